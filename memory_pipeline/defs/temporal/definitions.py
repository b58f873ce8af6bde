"""Seed 000 in Dagster: the temporal domain's one Definitions (resources injected by the root)."""

from dagster import Definitions

from memory_pipeline.defs._shared.partitions import cst_day, cst_day_open, cst_month, cst_year
from memory_pipeline.defs.temporal import assets
from memory_pipeline.defs.temporal.assets import temporal_assets
from memory_pipeline.defs.temporal.checks import temporal_checks, temporal_freshness_checks, temporal_freshness_sensor
from memory_pipeline.defs.temporal.jobs import temporal_jobs
from memory_pipeline.defs.temporal.schedules import temporal_schedules
from memory_pipeline.defs.temporal.sensors import temporal_sensors
from memory_pipeline.operations.registry import Target, register

defs = Definitions(
    assets=temporal_assets,
    asset_checks=[*temporal_checks, *temporal_freshness_checks],
    jobs=temporal_jobs,
    schedules=temporal_schedules,
    sensors=[*temporal_sensors, temporal_freshness_sensor],
)

for _name, _target in {
    "chunks": Target("temporal_tick_job", cst_day_open, assets.temporal_day_chunks.key, subset=True),
    "peer_rolls": Target("temporal_tick_job", cst_day_open, assets.temporal_peer_rolls.key, subset=True),
    "day": Target("temporal_day_job", cst_day, assets.temporal_day_summaries.key),
    "month": Target("temporal_month_job", cst_month, assets.temporal_month_summaries.key),
    "year": Target("temporal_year_job", cst_year, assets.temporal_year_summaries.key),
}.items():
    register(_name, _target)
