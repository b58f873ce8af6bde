"""Seed 003 as Dagster assets (group ``sleep``, ``cst_day`` partitions, one partition for every
world): light sleep, deep sleep (after that day's light sleep and the previous day's deep sleep)
and the self autobiography (after deep sleep). Each loops over the days of its run in order and
calls the core."""

from collections.abc import Callable
from typing import Any

from dagster import (
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    BackfillPolicy,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionMapping,
    asset,
)
from pydantic import Field

from memory_pipeline.defs._shared.metadata import llm_metadata, md_table, partition_dates
from memory_pipeline.defs._shared.partitions import cst_day
from memory_pipeline.defs.events.definitions import raw_conversation_events
from memory_pipeline.defs.sleep.resources import SleepResource
from memory_pipeline.operations.runner import RangeError, check_worlds
from memory_pipeline.sleep.autobiography import run_autobiography
from memory_pipeline.sleep.context import StageFailure
from memory_pipeline.sleep.deep import run_deep_sleep
from memory_pipeline.sleep.light import run_light_sleep

GROUP = "sleep"
STORE_TAG = {"memory_pipeline/store": ""}
LLM_POOL = "llm"
DEEP_KEY = AssetKey("sleep_deep_sleep")


class SleepRunConfig(Config):
    force_llm: bool = Field(
        False, description="Ask the model again even where the state record shows the same input was done."
    )
    worlds: list[str] = Field(default_factory=list, description="Only these world ids (default: all).")
    as_of: str = Field("", description="Unused by sleep (its partitions are closed days); accepted for the runner.")


def _worlds(config: SleepRunConfig) -> list[str] | None:
    try:
        return check_worlds(config.worlds) or None
    except RangeError as exc:
        raise Failure(description=f"run config: {exc}", allow_retries=False) from None


def _run(
    context: AssetExecutionContext,
    config: SleepRunConfig,
    sleep: SleepResource,
    stage: Callable[..., Any],
    describe: Callable[[Any], dict[str, Any]],
) -> MaterializeResult:
    """The run's days in order; the first failure stops the run (later days need it) and says why."""
    worlds = _worlds(config)
    asset = context.assets_def.key.to_user_string()
    if not sleep.cfg().enabled:
        context.log.info(f"{asset}: memory.sleep.enabled is false, nothing read or written")
        for key in context.partition_keys:
            context.add_asset_metadata({"disabled": True}, partition_key=key)
        return MaterializeResult()
    for key, day in partition_dates(context):
        ctx = sleep.context(asset, key, force=config.force_llm)
        try:
            result = stage(ctx, day, worlds)
        except StageFailure as exc:
            raise Failure(description=str(exc), metadata={"failed_partition": key}, allow_retries=False) from None
        meta = describe(result)
        context.add_asset_metadata({**meta, **llm_metadata(ctx.llm.stats)}, partition_key=key)
        context.log.info(f"{asset} {key}: {meta}")
        for world, why in getattr(result, "refused", {}).items():  # a degraded day says so
            context.log.warning(f"{asset} {key}: {why} (world {world}); the other worlds ran")
    return MaterializeResult()


def _light_meta(r: Any) -> dict[str, Any]:
    return {
        "worlds": r.worlds,
        "worlds_reused": r.reused,
        "sessions": r.sessions,
        "sessions_truncated": r.sessions_truncated,
        "memories_created": r.created,
        "memories_updated": r.updated,
        "memories_deprecated": r.deprecated,
        "tool_calls_rejected": r.rejected,
        "duplicates_skipped": r.duplicates_skipped,
        "per_world": md_table(
            ("world", "sessions", "truncated", "created", "updated", "deprecated", "rejected"),
            [
                (w, d["sessions"], d["truncated"], d["created"], d["updated"], d["deprecated"], d["rejected"])
                for w, d in sorted(r.per_world.items())
            ],
        ),
    }


def _deep_meta(r: Any) -> dict[str, Any]:
    rows = [
        (
            w,
            rec.round_index,
            rec.round,
            rec.batch_type or "",
            rec.active_count,
            rec.tool_calls,
            rec.applied,
            len(rec.rejected),
        )
        for w, recs in sorted(r.rounds.items())
        for rec in recs
    ]
    return {
        "worlds": r.worlds,
        "worlds_reused": r.reused,
        "worlds_warned_10k": r.warned,
        "worlds_batched_100k": r.batched,
        "worlds_refused_300k": MetadataValue.json(r.refused),  # world -> why; nothing written for them
        "worlds_empty": r.empty,  # no memory as of the day: not asked
        "changes": r.changes,
        "tool_calls_rejected": r.rejected,
        "snapshot_rows": r.snapshot_rows,
        "later_days_marked_stale": r.marked_stale,
        "round_log_files": len(r.log_files),
        "rounds": md_table(("world", "#", "round", "batch", "active", "tool calls", "applied", "rejected"), rows),
    }


def _auto_meta(r: Any) -> dict[str, Any]:
    return {
        "worlds": r.worlds,
        "narratives_created": r.narratives_created,
        "narratives_deprecated": r.narratives_deprecated,
        "tool_calls_rejected": r.rejected,
        "summaries_written": r.summaries_written,
        "per_world": MetadataValue.json(r.per_world),
    }


_COMMON: dict[str, Any] = dict(
    partitions_def=cst_day,
    backfill_policy=BackfillPolicy.single_run(),
    group_name=GROUP,
    kinds={"llm"},
    tags=STORE_TAG,
    pool=LLM_POOL,
)


@asset(
    name="sleep_light_sleep",
    deps=[raw_conversation_events],
    description="Seed 003 light sleep (builtin-light-sleep, 02:00 CST) for the CST day of the partition: per "
    "world, the sessions with a recallable message that day (message 1, by session, with timestamps; "
    "over ~120k characters the oldest-updated sessions are dropped and marked [已截断 N 个 session]), the "
    "active memories citing them (message 2) and the extraction instructions (message 3), with only "
    "create / update / deprecate_semantic_memory. The only path extracting semantic memory from "
    "conversations. A state record per world; an unchanged day is not asked again.",
    **_COMMON,
)
def sleep_light_sleep(
    context: AssetExecutionContext, config: SleepRunConfig, sleep: SleepResource
) -> MaterializeResult:
    return _run(context, config, sleep, run_light_sleep, _light_meta)


@asset(
    name="sleep_deep_sleep",
    deps=[
        AssetDep("sleep_light_sleep"),
        AssetDep(
            DEEP_KEY,
            partition_mapping=TimeWindowPartitionMapping(
                start_offset=-1, end_offset=-1, allow_nonexistent_upstream_partitions=True
            ),
        ),
    ],
    description="Seed 003 deep sleep (builtin-deep-sleep, 03:00 CST): three rounds in order over every "
    "world's active semantic memory (contradiction + expiry, split, dedupe-merge) with create / update / "
    "deprecate / merge; message 1 (all active memories as JSON) byte-identical across the rounds, message "
    "1.5 the cumulative change log; < 10k normal, 10k-100k warned, 100k-300k batched by type, > 300k "
    "refused before any call. One JSON log per round (files). Output: the day's semantic memory snapshot. "
    "Needs that day's light sleep and the previous day's deep sleep.",
    **_COMMON,
)
def sleep_deep_sleep(context: AssetExecutionContext, config: SleepRunConfig, sleep: SleepResource) -> MaterializeResult:
    return _run(context, config, sleep, run_deep_sleep, _deep_meta)


@asset(
    name="sleep_autobiography",
    deps=[DEEP_KEY],
    description="Seed 003 self autobiography (builtin-self-autobiography, 04:00 CST, after deep sleep). Phase A: "
    "from the active experience / imprint memories observed in the 7 days ending on the partition day and "
    "the existing narratives, append 0..N autobiographical memories (create / deprecate only; none is a "
    "normal success). Phase B, always: refresh self_blocks.autobiography_summary (updated_by "
    "autobiography_cron), recent narratives finer, distant ones only milestones and turning points.",
    **_COMMON,
)
def sleep_autobiography(
    context: AssetExecutionContext, config: SleepRunConfig, sleep: SleepResource
) -> MaterializeResult:
    return _run(context, config, sleep, run_autobiography, _auto_meta)


sleep_assets = [sleep_light_sleep, sleep_deep_sleep, sleep_autobiography]
