"""Sensors: system rolls follow every day/month/year write; peer-roll warm-ups requested by the
read path run in the background."""

from dagster import RunRequest, SensorEvaluationContext, SkipReason, multi_asset_sensor, sensor

from memory_pipeline.defs.temporal import assets
from memory_pipeline.defs.temporal.jobs import system_rolls_job, tick_job
from memory_pipeline.resources import MemoryStoreResource
from memory_pipeline.temporal import rolls


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
def temporal_system_rolls_sensor(context):
    """Seed 000: past_days after the day write, past_months / past_years after each cascade."""
    records = context.latest_materialization_records_by_key()
    fresh = [r for r in records.values() if r is not None]
    if not fresh:
        return SkipReason("no new day/month/year materialization")
    context.advance_all_cursors()
    newest = max(r.storage_id for r in fresh)
    return RunRequest(run_key=f"sys-rolls-after-{newest}")


@sensor(
    job=tick_job,
    name="temporal_peer_roll_warmup_sensor",
    minimum_interval_seconds=30,
    description="Serves the read path's peer-roll warm-up requests (the read path never calls an LLM; "
    "on a cache miss it files a request that runs here).",
)
def temporal_peer_roll_warmup_sensor(context: SensorEvaluationContext, memory_store: MemoryStoreResource):
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


temporal_sensors = [temporal_system_rolls_sensor, temporal_peer_roll_warmup_sensor]
