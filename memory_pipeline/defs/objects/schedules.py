"""Seed 001 nightly deep review at 02:50 CST (the deferral while not quiet and the catch-up after a
late start are objects_deep_review_sensor's, under the same rule)."""

from dagster import DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, SkipReason, schedule

from memory_pipeline.defs._shared.partitions import TZ
from memory_pipeline.defs.objects.jobs import deep_review_job
from memory_pipeline.defs.objects.resources import ObjectsResource
from memory_pipeline.defs.objects.sensors import deep_review_request


@schedule(
    job=deep_review_job,
    cron_schedule="50 2 * * *",
    execution_timezone=TZ,
    name="objects_deep_review_schedule",
    default_status=DefaultScheduleStatus.STOPPED,
    description="02:50 CST: the deep review of every world quiet for five minutes and not yet reviewed this "
    "local date (a world still talking is deferred to objects_deep_review_sensor).",
)
def objects_deep_review_schedule(
    context: ScheduleEvaluationContext, objects: ObjectsResource
) -> RunRequest | SkipReason:
    request = deep_review_request(objects, "objects_deep_review_schedule")
    return request or SkipReason("no world quiet and due (deferred to objects_deep_review_sensor)")


objects_schedules = [objects_deep_review_schedule]
