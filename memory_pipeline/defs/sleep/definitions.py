"""Seed 003 in Dagster: the sleep domain's one Definitions (resources injected by the root)."""

from dagster import Definitions

from memory_pipeline.defs._shared.partitions import cst_day
from memory_pipeline.defs._shared.registry import Target, register
from memory_pipeline.defs.sleep import assets
from memory_pipeline.defs.sleep.checks import sleep_checks
from memory_pipeline.defs.sleep.jobs import sleep_jobs
from memory_pipeline.defs.sleep.schedules import sleep_schedules
from memory_pipeline.defs.sleep.sensors import sleep_late_data_sensor

defs = Definitions(
    assets=assets.sleep_assets,
    asset_checks=sleep_checks,
    jobs=sleep_jobs,
    schedules=sleep_schedules,
    sensors=[sleep_late_data_sensor],
)

for _name, _target in {
    "light_sleep": Target("sleep_light_job", cst_day, assets.LIGHT_KEY, op=assets.OP),
    "deep_sleep": Target("sleep_deep_job", cst_day, assets.DEEP_KEY, op=assets.OP),
    "autobiography": Target("sleep_autobiography_job", cst_day, assets.AUTO_KEY, op=assets.OP),
    # The three stages, day by day (a range is one run; each day's stages before the next day's).
    "sleep": Target("sleep_nights_job", cst_day, assets.AUTO_KEY, op=assets.OP),
}.items():
    register(_name, _target)
