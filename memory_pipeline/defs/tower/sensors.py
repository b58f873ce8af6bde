"""Tower sensors: the structural refresh of the open day (zero LLM, every
memory.tower.structural_refresh_seconds) and the semantic tick (every semantic_tick_minutes) are two
independent schedulers; late data re-materializes exactly the closed days that got entries after
their windows were built."""

from datetime import datetime, timedelta

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SkipReason, sensor

from memory_pipeline.defs.tower.jobs import semantic_tick_job, structural_job
from memory_pipeline.defs.tower.resources import TowerResource
from memory_pipeline.lib.timeutil import local_date, utcnow
from memory_pipeline.tower import windows


def _due(context: SensorEvaluationContext, every_seconds: int, now: datetime) -> bool:
    last = float(context.cursor) if context.cursor else 0.0
    return now.timestamp() - last >= every_seconds


@sensor(
    job=structural_job,
    name="tower_structural_refresh_sensor",
    minimum_interval_seconds=30,
    default_status=DefaultSensorStatus.STOPPED,
    description="Refreshes today's structural windows (zero LLM, no llm pool) every "
    "memory.tower.structural_refresh_seconds (60), and yesterday's once more after midnight if its last "
    "refresh was before the day closed. Independent of the semantic tick.",
)
def tower_structural_refresh_sensor(
    context: SensorEvaluationContext, tower: TowerResource
) -> SkipReason | list[RunRequest]:
    now, tz = utcnow(), tower.tz()
    if not _due(context, tower.cfg().structural_refresh_seconds, now):
        return SkipReason("refreshed less than structural_refresh_seconds ago")
    context.update_cursor(str(now.timestamp()))
    today = local_date(now, tz)
    requests = [RunRequest(run_key=f"tower-structural-{today}-{int(now.timestamp())}", partition_key=today.isoformat())]
    yesterday = today - timedelta(days=1)
    done = windows.window_run(tower.store(), "day", yesterday)
    if done is not None and done.astimezone(tz).date() <= yesterday:
        requests.append(RunRequest(run_key=f"tower-structural-close-{yesterday}", partition_key=yesterday.isoformat()))
    return requests


@sensor(
    job=semantic_tick_job,
    name="tower_semantic_tick_sensor",
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.STOPPED,
    description="Requests one semantic tick every memory.tower.semantic_tick_minutes (10): summaries of the "
    "latest settled windows only, under the five guardrails (pool llm).",
)
def tower_semantic_tick_sensor(context: SensorEvaluationContext, tower: TowerResource) -> SkipReason | RunRequest:
    now = utcnow()
    if not _due(context, tower.cfg().semantic_tick_minutes * 60, now):
        return SkipReason("ticked less than semantic_tick_minutes ago")
    context.update_cursor(str(now.timestamp()))
    return RunRequest(run_key=f"tower-tick-{int(now.timestamp())}")


@sensor(
    job=structural_job,
    name="tower_late_data_sensor",
    minimum_interval_seconds=300,
    default_status=DefaultSensorStatus.STOPPED,
    description="Late data: closed days (last 31) whose windows were built before entries or conversation "
    "messages of theirs arrived get their partition re-materialized, once per staleness. Summaries are not "
    "re-made: a read says how many entries a summary misses.",
)
def tower_late_data_sensor(context: SensorEvaluationContext, tower: TowerResource) -> SkipReason | list[RunRequest]:
    store = tower.store()
    stale = windows.stale_days(store, tower.tz(), utcnow(), activity_type=tower.cfg().activity_type)
    if not stale:
        return SkipReason("no closed day with entries past its windows")
    requests = []
    for d, n in sorted(stale.items()):
        # One request per staleness: the day's last materialization and what arrived after it.
        built = windows.window_run(store, "day", d)
        stamp = int(built.timestamp()) if built else 0
        requests.append(RunRequest(run_key=f"tower-late-{d}-{stamp}-{n}", partition_key=d.isoformat()))
    return requests


tower_sensors = [tower_structural_refresh_sensor, tower_semantic_tick_sensor, tower_late_data_sensor]
