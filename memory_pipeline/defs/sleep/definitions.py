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
from memory_pipeline.sleep.light import late_days
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.order import LABELS, STAGES, RunStatus
from memory_pipeline.sleep.reports import cut_records, refused_records
from memory_pipeline.sleep.runs import CUT_REASON, REFUSED_REASON, day_statuses

defs = Definitions(
    assets=assets.sleep_assets,
    asset_checks=sleep_checks,
    jobs=sleep_jobs,
    schedules=sleep_schedules,
    sensors=[sleep_late_data_sensor],
)


def changed_days(
    stages: tuple[Stage, ...], defs: Definitions, keys: list[str], as_of: str, instance: DagsterInstance
) -> dict[str, str]:
    """Mode "changed" of the sleep targets: what `memory-pipeline sleep backfill` runs again there.
    The days where a world's record of one of ``stages`` was built from an answer the provider cut
    at the output limit, or one where every tool call the model made was refused (those worlds are
    asked again; every other world's record is reused), a day whose light sleep ran before some of its messages were ingested (late data, as `sleep status`
    and ``sleep_late_data_sensor`` find it), a day whose record is stale (an earlier day re-run);
    for the whole nights (``sleep``), every later day too, as a re-run of a day turns them stale."""
    resource = (defs.resources or {})["sleep"]
    assert isinstance(resource, SleepResource)
    with initialized(resource, instance) as sleep:  # environment variables resolved
        store = sleep.memory_store.store()
        tz = sleep.memory_config.zone()
    key_tz = ZoneInfo(cst_day.timezone)
    days = {local_date(cst_day.time_window_for_partition_key(k).start, key_tz): k for k in keys}
    if not days:
        return {}
    why: dict[str, list[str]] = {}
    flagged = (  # (stage, day, world) of the flagged records, newest day first
        (CUT_REASON, [(c["stage"], c["day"], c["world_id"]) for c in cut_records(store, list(days))]),
        (REFUSED_REASON, refused_records(store, list(days))),
    )
    for reason, records in flagged:
        found: dict[str, list[str]] = {}
        for stage, day, world in reversed(records):
            if stage in stages:
                found.setdefault(days[day], []).append(f"{LABELS[Stage(stage)]} of {world}")
        for key, what in found.items():
            why.setdefault(key, []).append(f"{reason} ({', '.join(what)})")
    if Stage.LIGHT in stages:
        for day in sorted(late_days(store, tz)):
            if day in days:
                why.setdefault(days[day], []).append("late data: messages ingested after its light sleep ran")
    with store.connect() as conn:
        statuses = day_statuses(conn, min(days))
    stale: dict[str, list[str]] = {}
    for p in sorted(p for p, status in statuses.items() if status == RunStatus.STALE and p.stage in stages):
        if p.day in days:
            stale.setdefault(days[p.day], []).append(LABELS[p.stage])
    for key, what in stale.items():
        why.setdefault(key, []).append(f"{', '.join(what)} stale (an earlier place was run again)")
    # A day never slept runs too (mode "changed" takes every partition never materialized): before
    # a day done, that is a re-run of the history from there, as a day re-run for a reason above.
    slept = {p.day for p in statuses}
    never = [key for day, key in days.items() if day not in slept]
    if stages == STAGES and (why or never):
        first = min([*why, *never])
        for key in keys:
            if key > first and key not in why and key not in never:
                why[key] = [f"after {first}: a re-run of a day turns the days after it stale"]
    return {key: "; ".join(reasons) for key, reasons in sorted(why.items())}


for _name, _target in {
    "light_sleep": Target(
        "sleep_light_job", cst_day, assets.LIGHT_KEY, op=assets.OP, changed=partial(changed_days, (Stage.LIGHT,))
    ),
    "deep_sleep": Target(
        "sleep_deep_job", cst_day, assets.DEEP_KEY, op=assets.OP, changed=partial(changed_days, (Stage.DEEP,))
    ),
    "autobiography": Target(
        "sleep_autobiography_job",
        cst_day,
        assets.AUTO_KEY,
        op=assets.OP,
        changed=partial(changed_days, (Stage.AUTOBIOGRAPHY,)),
    ),
    # The three stages, day by day (a range is one run; each day's stages before the next day's).
    "sleep": Target("sleep_nights_job", cst_day, assets.AUTO_KEY, op=assets.OP, changed=partial(changed_days, STAGES)),
}.items():
    register(_name, _target)
