"""Seed 002 as a Dagster asset (group ``conversation``): the rolling summaries of the conversations
a run names (the sensor names the due ones). Not partitioned: one run serves every due
conversation, whatever their number."""

from typing import Any

from dagster import AssetExecutionContext, Config, MaterializeResult, MetadataValue, asset
from pydantic import Field

from memory_pipeline.conversation import summaries
from memory_pipeline.conversation.logic import FailingState
from memory_pipeline.defs._shared.failures import provider_down
from memory_pipeline.defs._shared.keys import RAW_EVENTS
from memory_pipeline.defs._shared.metadata import llm_metadata
from memory_pipeline.defs.conversation.resources import ConversationResource
from memory_pipeline.lib.settings import ConfigError
from memory_pipeline.sleep import config as sleep_config
from memory_pipeline.sleep.memory import self_block_of

GROUP = "conversation"


class RollingSummaryConfig(Config):
    conversations: list[str] = Field(
        default_factory=list,
        description="Conversation ids to summarize (the sensor fills it); empty: every due conversation. "
        "Each passes the Step-0 gate again at run time.",
    )


@asset(
    name="conversation_rolling_summaries",
    deps=[RAW_EVENTS],
    group_name=GROUP,
    kinds={"llm"},
    tags={"memory_pipeline/store": ""},
    pool="llm",
    description="Seed 002 rolling conversation summaries (session_summary.md): for each due conversation "
    "(>= 30 entries after covered_range, a user's memory check or a preference override; always through "
    "the Step-0 gate: initialization_status done and >= 30 entries), a new version in the seed's layout "
    "(emotional arc in 3-5 sentences, never more than 10; preferences / facts; emotional key points; "
    "unresolved hooks; last_updated; covered_range). A rolling update, never an overwrite; a failure "
    "writes nothing, logs an event and is retried on a later trigger after a doubling backoff (10, 20, 40, "
    "80 minutes by default); after 5 failures in a row the conversation is held until an operator runs "
    "`conversation retry`.",
)
def conversation_rolling_summaries(
    context: AssetExecutionContext, config: RollingSummaryConfig, conversation: ConversationResource
) -> MaterializeResult[Any]:
    store, cfg = conversation.store(), conversation.cfg()
    if not cfg.enabled:
        context.log.info("memory.conversation.enabled is false, nothing read or written")
        return MaterializeResult(metadata={"disabled": True, "due": 0, "written": 0, "failed": 0})
    due = summaries.due_conversations(store, cfg)
    if config.conversations:
        wanted = set(config.conversations)
        due = [d for d in due if d.conversation_id in wanted]
    llm = conversation.client(store, "conversation_rolling_summaries")
    # long_arc lives in the self layer (seed 003's self blocks): read here, never written.
    try:
        blocks = sleep_config.load().block_names()
    except ConfigError:  # sleep's own runs refuse its section; the summaries need only the name
        blocks = (cfg.long_arc_block,)
    if due and cfg.long_arc_block not in blocks:  # no world could have it: said, not silently empty
        context.log.warning(
            f"memory.conversation.long_arc_block {cfg.long_arc_block!r} is none of memory.sleep.self_blocks "
            f"({', '.join(blocks)}): the summaries are written without a long arc"
        )
    arcs = self_block_of(store, cfg.long_arc_block, sorted({d.world_id for d in due}))
    try:
        result = summaries.run(store, llm, cfg, conversation.tz(), due, long_arcs=arcs)
    except summaries.ProviderStopped as exc:  # the provider's breaker: the run stops with its one line
        done = exc.result
        raise provider_down(
            exc,
            summaries.LEFT_FOR_NEXT_RUN,
            due=len(due),
            written=len(done.written),
            failed=len(done.failed),
            failures=MetadataValue.json(done.failed),
            not_done=MetadataValue.json(done.not_done),
            conversations=MetadataValue.json(done.written),
            **llm_metadata(llm.stats),
        ) from None
    if result.failed:
        context.log.warning(
            f"{len(result.failed)} summary(ies) failed (nothing written, retried after the backoff): "
            + " | ".join(f"{c}: {e}" for c, e in list(result.failed.items())[:5])
        )
    if result.held:
        context.log.warning(
            f"held after {cfg.max_consecutive_failures} failures in a row (`memory-pipeline conversation retry "
            f"CONV` retries): {', '.join(result.held)}"
        )
    if result.truncated:
        context.log.warning(
            f"answer cut at the output limit (finish_reason length) for {', '.join(result.truncated)}: a failure, "
            "nothing written (seed 002: 生成失败 → 不更新), asked again after the backoff"
        )
    waiting = summaries.failing(store, cfg)
    return MaterializeResult(
        metadata={
            "due": len(due),
            "written": len(result.written),
            "failed": len(result.failed),
            "failures": MetadataValue.json(result.failed),
            "held": MetadataValue.json([f["conversation_id"] for f in waiting if f["state"] == FailingState.HELD]),
            "backing_off": MetadataValue.json(
                [f["conversation_id"] for f in waiting if f["state"] == FailingState.BACKING_OFF]
            ),
            "retry_due": MetadataValue.json(
                [f["conversation_id"] for f in waiting if f["state"] == FailingState.RETRY_DUE]
            ),
            "conversations": MetadataValue.json(result.written),
            # Failed on an answer cut at the output limit (also in failures): nothing written from it.
            "conversations_truncated": MetadataValue.json(result.truncated),
            **llm_metadata(llm.stats),
        }
    )
