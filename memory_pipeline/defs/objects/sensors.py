"""Seed 001 triggers: compaction when a hot timeline passes its threshold (or an explicit compact
is queued), organize hourly when events are pending, the nightly deep review's deferral and
catch-up, and the Markdown projection while it lags."""

from datetime import datetime

from dagster import (
    AssetRecordsFilter,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunConfig,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from memory_pipeline.defs.objects import assets
from memory_pipeline.defs.objects.assets import ObjectsRunConfig
from memory_pipeline.defs.objects.jobs import (
    compaction_job,
    deep_review_job,
    organize_job,
    outcomes_job,
    projection_job,
)
from memory_pipeline.defs.objects.resources import ObjectsResource
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.objects import projection, reports, worker
from memory_pipeline.objects.logic import JobMode

IN_FLIGHT = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]
ORIGIN_TAG = "memory_pipeline/objects_origin"


def _in_flight(context: SensorEvaluationContext, job_name: str, origin: str | None = None) -> bool:
    tags = {ORIGIN_TAG: origin} if origin else None
    runs = context.instance.get_runs(RunsFilter(job_name=job_name, statuses=IN_FLIGHT, tags=tags), limit=1)
    return bool(runs)


def _queued(objects: ObjectsResource, mode: JobMode) -> bool:
    return bool(worker._worlds_with_jobs(objects.context("objects_sensor"), None, [mode]))


@sensor(
    job=compaction_job,
    name="objects_compaction_sensor",
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.STOPPED,
    description="Requests compaction when a world's hot timeline passes compact_threshold_tokens (estimated; "
    "not during the hour after a threshold failure) or an explicit compact request is queued, and no "
    "compaction run is in flight. New raw events are brought into the hot timeline by the same run.",
)
def objects_compaction_sensor(context: SensorEvaluationContext, objects: ObjectsResource) -> SkipReason | RunRequest:
    if _in_flight(context, compaction_job.name):
        return SkipReason("a compaction run is in flight")
    octx = objects.context("objects_compaction_sensor")
    if not octx.cfg.enabled:
        return SkipReason("memory.objects.enabled is false")
    over = worker.threshold_worlds(octx, include_unseen=True)
    explicit = _queued(objects, JobMode.COMPACT)
    if not over and not explicit:
        return SkipReason("no hot timeline over its threshold and no compact request queued")
    return RunRequest(run_key=f"compact-{utcnow():%Y%m%dT%H%M%S}", tags={ORIGIN_TAG: "threshold"})


@sensor(
    job=organize_job,
    name="objects_organize_sensor",
    minimum_interval_seconds=3600,
    default_status=DefaultSensorStatus.STOPPED,
    description="Hourly: keeps its last check time in its cursor; requests an organize run only when events "
    "are pending (an empty queue calls no model) and no hourly organize run is in flight. A started run "
    "advances batch after batch; it never waits for the next tick.",
)
def objects_organize_sensor(context: SensorEvaluationContext, objects: ObjectsResource) -> SkipReason | RunRequest:
    now = utcnow()
    last = context.cursor
    context.update_cursor(now.isoformat())
    if _in_flight(context, organize_job.name, "hourly"):
        return SkipReason("an hourly organize run is in flight")
    octx = objects.context("objects_organize_sensor")
    if not octx.cfg.enabled:
        return SkipReason("memory.objects.enabled is false")
    if not worker.hourly_worlds(octx) and not _queued(objects, JobMode.ORGANIZE):
        return SkipReason(f"no pending events (last check {last or 'never'})")
    return RunRequest(run_key=f"organize-{now:%Y%m%dT%H%M%S}", tags={ORIGIN_TAG: "hourly"})


def deep_review_request(objects: ObjectsResource, name: str) -> RunRequest | None:
    """The run for every world whose deep review is due, or whose deep job is still queued (a run
    that found the world's lease busy left it so): asked for again until it has run. A first
    request is keyed by its date and worlds; asking again for a queued job gets a fresh key."""
    octx = objects.context(name)
    due = worker.deep_worlds(octx)
    if not due:
        return None
    day = due[0][1].isoformat()
    key = f"deep-{day}-{','.join(w for w, _ in due)}"
    if worker.deep_queued(octx):
        key += f"-again-{utcnow():%Y%m%dT%H%M%S%f}"
    return RunRequest(
        run_key=key,
        run_config=RunConfig(ops={"objects_archive": ObjectsRunConfig(deep=True, automatic=False)}),
        tags={ORIGIN_TAG: "nightly"},
    )


@sensor(
    job=deep_review_job,
    name="objects_deep_review_sensor",
    minimum_interval_seconds=300,
    default_status=DefaultSensorStatus.STOPPED,
    description="The nightly deep review's deferral and catch-up: from 02:50 CST, once a world has been "
    "quiet for five minutes and has not been reviewed this local date, requests the deep review (a "
    "start after 02:50 catches up the current date only). A deep job not yet run (its run found the "
    "world busy, say with compaction) is requested again while no deep review run is in flight.",
)
def objects_deep_review_sensor(context: SensorEvaluationContext, objects: ObjectsResource) -> SkipReason | RunRequest:
    if _in_flight(context, deep_review_job.name):
        return SkipReason("a deep review run is in flight")
    request = deep_review_request(objects, "objects_deep_review_sensor")
    return request or SkipReason("no world due for its deep review and no deep job queued")


@sensor(
    job=projection_job,
    name="objects_projection_sensor",
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.STOPPED,
    description="Markdown projection heartbeat: one pass of at most 10 objects while the files lag the store, "
    "a file was deleted or edited by hand, or a core document's human edit waits to be imported.",
)
def objects_projection_sensor(context: SensorEvaluationContext, objects: ObjectsResource) -> SkipReason | RunRequest:
    if _in_flight(context, projection_job.name):
        return SkipReason("a projection run is in flight")
    why = projection.needs_pass(objects.memory_store.store(), objects.projection_root())
    if why is None:
        return SkipReason("projection is caught up with the store and the files on disk")
    return RunRequest(run_key=f"project-{datetime.now():%Y%m%dT%H%M%S}", tags={"memory_pipeline/projection": why})


STALE_MAX_REQUESTS = 100


@sensor(
    job=outcomes_job,
    name="objects_outcomes_stale_sensor",
    minimum_interval_seconds=300,
    default_status=DefaultSensorStatus.STOPPED,
    description="Late data: requests the objects_event_outcomes day partitions whose events changed after the "
    "partition was materialized (a late event entered the hot timeline, was queued or got its outcome), "
    "without a full rebuild; partitions never materialized are left to a backfill.",
)
def objects_outcomes_stale_sensor(
    context: SensorEvaluationContext, objects: ObjectsResource
) -> SkipReason | list[RunRequest]:
    key = assets.objects_event_outcomes.key
    requests = []
    for day, changed in sorted(reports.day_changes(objects.memory_store.store()).items()):
        partition = day.isoformat()
        records = context.instance.fetch_materializations(
            AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
        ).records
        if records and records[0].timestamp < changed.timestamp():
            requests.append(
                RunRequest(run_key=f"outcomes-{partition}-{changed:%Y%m%dT%H%M%S%f}", partition_key=partition)
            )
        if len(requests) >= STALE_MAX_REQUESTS:
            break
    return requests or SkipReason("no materialized day has changed since")


objects_sensors = [
    objects_outcomes_stale_sensor,
    objects_compaction_sensor,
    objects_organize_sensor,
    objects_deep_review_sensor,
    objects_projection_sensor,
]
