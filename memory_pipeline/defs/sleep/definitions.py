"""Seed 003 in Dagster: the sleep domain's one Definitions (resources injected by the root)."""

from functools import partial
from zoneinfo import ZoneInfo

from dagster import DagsterInstance, Definitions

from memory_pipeline.defs._shared.partitions import cst_day
from memory_pipeline.defs._shared.registry import Target, register
from memory_pipeline.defs._shared.resources import initialized
from memory_pipeline.defs.sleep import assets
from memory_pipeline.defs.sleep.checks import sleep_checks
from memory_pipeline.defs.sleep.jobs import sleep_jobs
from memory_pipeline.defs.sleep.resources import SleepResource
from memory_pipeline.defs.sleep.schedules import sleep_schedules
from memory_pipeline.defs.sleep.sensors import sleep_late_data_sensor
from memory_pipeline.lib.timeutil import local_date
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.order import LABELS, STAGES
from memory_pipeline.sleep.reports import cut_records
from memory_pipeline.sleep.runs import CUT_REASON

defs = Definitions(
    assets=assets.sleep_assets,
    asset_checks=sleep_checks,
    jobs=sleep_jobs,
    schedules=sleep_schedules,
    sensors=[sleep_late_data_sensor],
)


def cut_days(
    stages: tuple[Stage, ...], defs: Definitions, keys: list[str], as_of: str, instance: DagsterInstance
) -> dict[str, str]:
    """Mode "changed" of the sleep targets: the days where a world's record of one of ``stages`` was
    built from an answer the provider cut at the output limit. A run of the day asks those worlds
    again (their records are never reused as whole); every other world's record is reused."""
    resource = (defs.resources or {})["sleep"]
    assert isinstance(resource, SleepResource)
    with initialized(resource, instance) as sleep:  # environment variables resolved
        store = sleep.memory_store.store()
    key_tz = ZoneInfo(cst_day.timezone)
    days = {local_date(cst_day.time_window_for_partition_key(k).start, key_tz): k for k in keys}
    found: dict[str, list[str]] = {}
    for c in reversed(cut_records(store, list(days))):
        if c["stage"] in stages:
            found.setdefault(days[c["day"]], []).append(f"{LABELS[Stage(c['stage'])]} of {c['world_id']}")
    return {key: f"{CUT_REASON} ({', '.join(what)})" for key, what in found.items()}


for _name, _target in {
    "light_sleep": Target(
        "sleep_light_job", cst_day, assets.LIGHT_KEY, op=assets.OP, changed=partial(cut_days, (Stage.LIGHT,))
    ),
    "deep_sleep": Target(
        "sleep_deep_job", cst_day, assets.DEEP_KEY, op=assets.OP, changed=partial(cut_days, (Stage.DEEP,))
    ),
    "autobiography": Target(
        "sleep_autobiography_job",
        cst_day,
        assets.AUTO_KEY,
        op=assets.OP,
        changed=partial(cut_days, (Stage.AUTOBIOGRAPHY,)),
    ),
    # The three stages, day by day (a range is one run; each day's stages before the next day's).
    "sleep": Target("sleep_nights_job", cst_day, assets.AUTO_KEY, op=assets.OP, changed=partial(cut_days, STAGES)),
}.items():
    register(_name, _target)
