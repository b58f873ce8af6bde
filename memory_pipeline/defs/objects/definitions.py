"""Seed 001 in Dagster: the objects domain's one Definitions (resources injected by the root)."""

from dagster import Definitions

from memory_pipeline.defs.objects.assets import objects_assets
from memory_pipeline.defs.objects.checks import objects_checks
from memory_pipeline.defs.objects.jobs import objects_jobs
from memory_pipeline.defs.objects.schedules import objects_schedules
from memory_pipeline.defs.objects.sensors import objects_sensors

defs = Definitions(
    assets=objects_assets,
    asset_checks=objects_checks,
    jobs=objects_jobs,
    schedules=objects_schedules,
    sensors=objects_sensors,
)
