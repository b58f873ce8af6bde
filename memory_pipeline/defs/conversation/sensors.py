"""The rolling-summary sensor: finds the due conversations in one pass (grouped queries) and
requests one run for all of them."""

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SkipReason, define_asset_job, sensor

from memory_pipeline.conversation import summaries
from memory_pipeline.defs.conversation.assets import conversation_rolling_summaries
from memory_pipeline.defs.conversation.resources import ConversationResource
from memory_pipeline.lib.text import short_hash

rolling_summary_job = define_asset_job(
    "conversation_rolling_summary_job",
    selection=[conversation_rolling_summaries],
    description="Rolling summaries of the conversations named in the run config (or every due one).",
)


@sensor(
    name="conversation_rolling_summary_sensor",
    job=rolling_summary_job,
    minimum_interval_seconds=300,
    default_status=DefaultSensorStatus.STOPPED,
    description="Every 5 minutes: conversations whose initialization_status is done and that have >= 30 "
    "entries after their summary's covered_range (or an open user check / preference override, still "
    "through the gate) get a new rolling-summary version, all in one run. A failed one is asked again "
    "once its backoff is over (10, 20, 40, 80 minutes by default; its failure changes the run key) and "
    "held after 5 failures in a row until `conversation retry`.",
)
def conversation_rolling_summary_sensor(
    context: SensorEvaluationContext, conversation: ConversationResource
) -> SkipReason | RunRequest:
    store, cfg = conversation.store(), conversation.cfg()
    if not cfg.enabled:
        return SkipReason("memory.conversation.enabled is false")
    due = summaries.due_conversations(store, cfg)
    if not due:
        return SkipReason("no conversation due (gate: initialization done and >= 30 entries)")
    failures = summaries.failure_counts(store)
    key = short_hash(
        [
            (d.conversation_id, d.entries, d.covered_end, str(d.trigger), failures.get(d.conversation_id, 0))
            for d in due
        ],
        length=32,
    )
    ids = [d.conversation_id for d in due]
    return RunRequest(
        run_key=f"rolling:{key}",
        run_config={"ops": {"conversation_rolling_summaries": {"config": {"conversations": ids}}}},
        tags={"memory_pipeline/conversations": str(len(ids))},
    )
