"""Seed 004 in Dagster: the tower domain's one Definitions (resources injected by the root)."""

from dagster import Definitions

from memory_pipeline.defs._shared.partitions import cst_day, cst_day_open, cst_month, cst_week
from memory_pipeline.defs._shared.registry import Target, register
from memory_pipeline.defs.tower import assets
from memory_pipeline.defs.tower.assets import tower_assets
from memory_pipeline.defs.tower.checks import tower_checks
from memory_pipeline.defs.tower.jobs import tower_jobs
from memory_pipeline.defs.tower.schedules import tower_schedules
from memory_pipeline.defs.tower.sensors import tower_sensors

defs = Definitions(
    assets=tower_assets,
    asset_checks=tower_checks,
    jobs=tower_jobs,
    schedules=tower_schedules,
    sensors=tower_sensors,
)

for _name, _target in {
    "tower_windows": Target("tower_structural_job", cst_day_open, assets.tower_day_windows.key, configurable=False),
    "tower_week_windows": Target("tower_week_windows_job", cst_week, assets.tower_week_windows.key, configurable=False),
    "tower_month_windows": Target(
        "tower_month_windows_job", cst_month, assets.tower_month_windows.key, configurable=False
    ),
    "tower_day_summaries": Target(
        "tower_day_summaries_job", cst_day, assets.tower_day_summaries.key, configurable=False
    ),
    "tower_week_summaries": Target(
        "tower_week_summaries_job", cst_week, assets.tower_week_summaries.key, configurable=False
    ),
}.items():
    register(_name, _target)
