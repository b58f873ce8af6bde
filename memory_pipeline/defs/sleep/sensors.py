"""Late data for sleep: messages ingested after a day's light sleep ran reach the semantic memory
through that day's light sleep again. That is a rebuild of the day (sleep/order.py): the sensor
requests one run of the nights job from that day through the newest done place, day by day, each
day's light, deep and autobiography before the next day's. Only the worlds whose material changed
are asked again and restored first; every other world's records are reused."""

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SkipReason, sensor

from memory_pipeline.defs.sleep.jobs import nights_job
from memory_pipeline.defs.sleep.resources import SleepResource
from memory_pipeline.defs.sleep.schedules import busy, describe, run_request
from memory_pipeline.sleep.light import late_days
from memory_pipeline.sleep.order import rerun_from
from memory_pipeline.sleep.runs import day_statuses


@sensor(
    name="sleep_late_data_sensor",
    job=nights_job,
    minimum_interval_seconds=900,
    default_status=DefaultSensorStatus.STOPPED,
    description="Every 15 minutes: the earliest day whose light sleep ran before some of its messages were "
    "ingested (late data) is rebuilt, with every later day done so far, in one run in day order (run key: "
    "range + newest late ingest).",
)
def sleep_late_data_sensor(context: SensorEvaluationContext, sleep: SleepResource) -> SkipReason | list[RunRequest]:
    store = sleep.memory_store.store()
    late = late_days(store, sleep.memory_config.zone())
    if not late:
        return SkipReason("no message arrived after its day's light sleep")
    why = busy(context.instance)
    if why:
        return SkipReason(why)
    first = min(late)
    with store.connect() as conn:
        req = rerun_from(day_statuses(conn, first), first)
    if req is None:
        return SkipReason(f"{first}: nothing done from that day on")
    newest = max(late.values())
    return [run_request(f"late:{describe(req)}:{newest.isoformat()}", req, {})]
