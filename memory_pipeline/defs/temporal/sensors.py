"""Sensors: system rolls follow every day/month/year write; peer-roll warm-ups requested by the
read path run in the background; late data and new worlds are reconciled into the periods they
belong to."""

from dagster import (
    DefaultSensorStatus,
    MultiAssetSensorEvaluationContext,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    multi_asset_sensor,
    sensor,
)

from memory_pipeline.defs.temporal import assets
from memory_pipeline.defs.temporal.jobs import day_job, month_job, system_rolls_job, tick_job, year_job
from memory_pipeline.resources import MemoryConfigResource, MemoryStoreResource
from memory_pipeline.temporal import reconcile, rolls


@multi_asset_sensor(
    monitored_assets=[
        assets.temporal_day_summaries.key,
        assets.temporal_month_summaries.key,
        assets.temporal_year_summaries.key,
    ],
    job=system_rolls_job,
    name="temporal_system_rolls_sensor",
    minimum_interval_seconds=60,
    description="After any day, month or year write: rebuild the past_days / past_months / past_years "
    "system rolls (reused while their sources_fp matches).",
)
def temporal_system_rolls_sensor(context: MultiAssetSensorEvaluationContext) -> SkipReason | RunRequest:
    """Seed 000: past_days after the day write, past_months / past_years after each cascade."""
    records = context.latest_materialization_records_by_key()
    fresh = [r for r in records.values() if r is not None]
    if not fresh:
        return SkipReason("no new day/month/year materialization")
    context.advance_all_cursors()  # type: ignore[no-untyped-call]  # unannotated in dagster
    newest = max(r.storage_id for r in fresh)
    return RunRequest(run_key=f"sys-rolls-after-{newest}")


@sensor(
    job=tick_job,
    name="temporal_peer_roll_warmup_sensor",
    minimum_interval_seconds=30,
    description="Serves the read path's peer-roll warm-up requests (the read path never calls an LLM; "
    "on a cache miss it files a request that runs here).",
)
def temporal_peer_roll_warmup_sensor(
    context: SensorEvaluationContext, memory_store: MemoryStoreResource
) -> SkipReason | list[RunRequest]:
    """The read path never calls an LLM; on a peer-roll miss it files a request served here."""
    pending = rolls.pending_warmup_days(memory_store.store())
    if not pending:
        return SkipReason("no pending peer-roll warm-up requests")
    # One run per day and newest request id: a request arriving later gets a run of its own.
    return [
        RunRequest(
            run_key=f"warmup-{d.isoformat()}-{newest}",
            partition_key=d.isoformat(),
            asset_selection=[assets.temporal_peer_rolls.key],
        )
        for d, newest in pending
    ]


RECONCILE_JOBS = {"day": day_job, "month": month_job, "year": year_job}
# A world whose first event lies years back makes every materialized day since then stale: request
# them over several evaluations rather than flooding the run queue at once (oldest first).
RECONCILE_MAX_REQUESTS = 100


@sensor(
    name="temporal_reconcile_sensor",
    jobs=list(RECONCILE_JOBS.values()),
    minimum_interval_seconds=300,
    default_status=DefaultSensorStatus.STOPPED,
    description="Late data and new worlds: requests the closed day partitions that got messages ingested "
    "after they were materialized, or lack a row for a world that existed by then; then, once those days "
    "are written, the months whose day rows changed, then the years above. One run per partition; the "
    "run key carries a marker of the cause, so one staleness is requested once and new late data is "
    "requested again. Never an open day, never a partition that was never materialized (Backfill "
    "missing does those). System rolls follow through temporal_system_rolls_sensor.",
)
def temporal_reconcile_sensor(
    context: SensorEvaluationContext, memory_store: MemoryStoreResource, memory_config: MemoryConfigResource
) -> SkipReason | list[RunRequest]:
    stale = reconcile.stale_periods(memory_store.store(), memory_config.zone())
    # Days first: a month (year) waits while a day (month) below it is stale; when the children are
    # written, a later evaluation sees the parent stale by its changed children (or not at all).
    ready = stale.ready
    if not ready:
        return SkipReason("no stale period: every materialized day, month and year is up to date")
    waiting = len(stale.periods) - len(ready)
    if waiting or len(ready) > RECONCILE_MAX_REQUESTS:
        context.log.info(
            f"{len(ready)} stale period(s) ready, {waiting} waiting for their children; "
            f"requesting {min(len(ready), RECONCILE_MAX_REQUESTS)} now"
        )
    return [
        RunRequest(
            run_key=f"reconcile:{p.window}:{p.key}:{p.marker}",
            job_name=RECONCILE_JOBS[p.window].name,
            partition_key=p.key,
            tags={"memory_pipeline/operation": "reconcile"},
        )
        for p in ready[:RECONCILE_MAX_REQUESTS]
    ]


temporal_sensors = [temporal_system_rolls_sensor, temporal_peer_roll_warmup_sensor, temporal_reconcile_sensor]
