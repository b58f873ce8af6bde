"""Late data for sleep: messages ingested after a day's light sleep ran reach the semantic memory
through that day's light sleep again (only worlds whose material changed are asked again); the
next night's deep sleep then consolidates them (they carry that earlier day)."""

from zoneinfo import ZoneInfo

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SkipReason, sensor

from memory_pipeline.defs.sleep.jobs import light_job
from memory_pipeline.defs.sleep.resources import SleepResource
from memory_pipeline.sleep.light import late_days


@sensor(
    name="sleep_late_data_sensor",
    job=light_job,
    minimum_interval_seconds=900,
    default_status=DefaultSensorStatus.STOPPED,
    description="Every 15 minutes: days whose light sleep ran before some of their messages were ingested "
    "(late data) get their light sleep again, one run per day (run key: day + newest late ingest).",
)
def sleep_late_data_sensor(context: SensorEvaluationContext, sleep: SleepResource):
    late = late_days(sleep.memory_store.store(), ZoneInfo(sleep.memory_config.timezone))
    if not late:
        return SkipReason("no message arrived after its day's light sleep")
    return [
        RunRequest(run_key=f"late:{day.isoformat()}:{at.isoformat()}", partition_key=day.isoformat())
        for day, at in sorted(late.items())
    ]
