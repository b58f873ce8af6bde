"""Seed 003 as Dagster assets (group ``sleep``, ``cst_day`` partitions, one partition for every
world): light sleep, deep sleep (after that day's light sleep and the previous day's deep sleep)
and the self autobiography (after deep sleep). They are one multi-asset, subsettable, so a run over
a range goes day by day, each day's selected stages in order (light, deep, autobiography) before the
next day's: a day's outputs are a function of that day whatever is launched (sleep/order.py). The
nightly schedules select one stage; catch-up, late data and backfills select all three."""

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from typing import Any

from dagster import (
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetObservation,
    AssetSpec,
    BackfillPolicy,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionMapping,
    multi_asset,
)
from dagster._utils.warnings import BetaWarning
from pydantic import Field

from memory_pipeline.defs._shared.failures import provider_down
from memory_pipeline.defs._shared.keys import RAW_EVENTS
from memory_pipeline.defs._shared.metadata import llm_metadata, md_table, partition_dates, warn_truncated
from memory_pipeline.defs._shared.partitions import cst_day
from memory_pipeline.defs._shared.run_config import RangeError, check_worlds
from memory_pipeline.defs._shared.written import Written
from memory_pipeline.defs.sleep.resources import SleepResource
from memory_pipeline.lib.llm import LLMProviderDown
from memory_pipeline.sleep.autobiography import run_autobiography
from memory_pipeline.sleep.carry import ActiveCarry
from memory_pipeline.sleep.context import StageFailure
from memory_pipeline.sleep.deep import run_deep_sleep
from memory_pipeline.sleep.light import run_light_sleep
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.order import STAGES, gap_problem
from memory_pipeline.sleep.reports import stale_positions
from memory_pipeline.sleep.runs import day_statuses

GROUP = "sleep"
STORE_TAG = {"memory_pipeline/store": ""}
LLM_POOL = "llm"
OP = "sleep_stages"
LIGHT_KEY = AssetKey("sleep_light_sleep")
DEEP_KEY = AssetKey("sleep_deep_sleep")
AUTO_KEY = AssetKey("sleep_autobiography")
KEYS = {Stage.LIGHT: LIGHT_KEY, Stage.DEEP: DEEP_KEY, Stage.AUTOBIOGRAPHY: AUTO_KEY}


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


def _stage_fn(stage: Stage) -> tuple[Callable[..., Any], Callable[[Any], dict[str, Any]]]:
    return {
        Stage.LIGHT: (run_light_sleep, _light_meta),
        Stage.DEEP: (run_deep_sleep, _deep_meta),
        Stage.AUTOBIOGRAPHY: (run_autobiography, _auto_meta),
    }[stage]


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
        "worlds_restored_first": r.restored,
        "worlds_truncated": r.worlds_truncated,  # records from a cut answer: asked again at the next run
        "worlds_all_calls_refused": r.worlds_all_refused,  # nothing applied: asked again at the next run
        "worlds_at_once": r.worlds_at_once,  # threads that asked the model (memory.sleep.worlds_at_once)
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
        "worlds_truncated": r.worlds_truncated,  # records from a cut answer: asked again at the next run
        "worlds_at_once": r.worlds_at_once,  # threads that asked the model (memory.sleep.worlds_at_once)
        "changes": r.changes,
        "tool_calls_rejected": r.rejected,
        "snapshot_rows": r.snapshot_rows,
        "worlds_restored_first": r.restored,
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
        "worlds_restored_first": r.restored,
        "worlds_truncated": r.worlds_truncated,  # records from a cut answer: asked again at the next run
        "worlds_all_calls_refused": r.worlds_all_refused,  # nothing applied: asked again at the next run
        "per_world": MetadataValue.json(r.per_world),
    }


_SPEC: dict[str, Any] = dict(group_name=GROUP, kinds={"llm"}, tags=STORE_TAG, skippable=True)

# Deep sleep of D needs D-1's; the first day has none. The parameter saying so is in beta: its
# warning is silenced here, where it is made, whatever filters the importing process has (a test
# run resets them between tests, and the package-wide filter ran once, at the first import).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", category=BetaWarning)
    _PREVIOUS_NIGHT = TimeWindowPartitionMapping(
        start_offset=-1, end_offset=-1, allow_nonexistent_upstream_partitions=True
    )


@multi_asset(
    name=OP,
    specs=[
        AssetSpec(
            LIGHT_KEY,
            deps=[RAW_EVENTS],
            description="Seed 003 light sleep (builtin-light-sleep, 02:00 CST) for the CST day of the partition: "
            "per world, the sessions with a recallable message that day (message 1, by session, with timestamps; "
            "over ~120k characters the oldest-updated sessions are dropped and marked [已截断 N 个 session]), the "
            "active memories citing them (message 2) and the extraction instructions (message 3), with only "
            "create / update / deprecate_semantic_memory. The only path extracting semantic memory from "
            "conversations. A state record per world; an unchanged day is not asked again. Needs the previous "
            "day's autobiography; run where later stages are done, it is a rebuild of the day (they turn stale).",
            **_SPEC,
        ),
        AssetSpec(
            DEEP_KEY,
            deps=[
                AssetDep(LIGHT_KEY),
                AssetDep(DEEP_KEY, partition_mapping=_PREVIOUS_NIGHT),
            ],
            description="Seed 003 deep sleep (builtin-deep-sleep, 03:00 CST): three rounds in order over every "
            "world's active semantic memory as of the day (contradiction + expiry, split, dedupe-merge) with "
            "create / update / deprecate / merge; message 1 (all active memories as JSON) byte-identical across "
            "the rounds, message 1.5 the cumulative change log; < 10k normal, 10k-100k warned, 100k-300k batched "
            "by type, > 300k refused before any call. One JSON log per round (files). Output: the day's semantic "
            "memory snapshot. Needs that day's light sleep (and so the previous day's stages).",
            **_SPEC,
        ),
        AssetSpec(
            AUTO_KEY,
            deps=[DEEP_KEY],
            description="Seed 003 self autobiography (builtin-self-autobiography, 04:00 CST, after deep sleep). Phase "
            "A: from the active experience / imprint memories observed in the 7 days ending on the partition day "
            "and the existing narratives, append 0..N autobiographical memories (create / deprecate only; none is "
            "a normal success). Phase B, always: refresh self_blocks.autobiography_summary (updated_by "
            "autobiography_cron), recent narratives finer, distant ones only milestones and turning points.",
            **_SPEC,
        ),
    ],
    can_subset=True,
    partitions_def=cst_day,
    backfill_policy=BackfillPolicy.single_run(),
    pool=LLM_POOL,
)
def sleep_stages(
    context: AssetExecutionContext, config: SleepRunConfig, sleep: SleepResource
) -> Iterator[MaterializeResult[Any]]:
    """The run's days in order, each day's selected stages in order; the first failure stops the run
    (later places need it) and says why. Places the run leaves stale get an observation saying so."""
    worlds = _worlds(config)
    stages = [s for s in STAGES if KEYS[s] in context.selected_asset_keys]
    if not sleep.cfg().enabled:
        context.log.info("sleep: memory.sleep.enabled is false, nothing read or written")
        for key in context.partition_keys:
            for stage in stages:
                context.add_asset_metadata({"disabled": True}, asset_key=KEYS[stage], partition_key=key)
    else:
        days = [day for _, day in partition_dates(context)]
        with sleep.memory_store.store().connect() as conn:  # as `sleep backfill` refuses it, from any entry point
            problem = gap_problem(day_statuses(conn), min(days), max(days))
        if problem:
            raise Failure(description=f"refused, nothing run: {problem}", allow_retries=False)
        carry = ActiveCarry()  # each world's active set, from one place of the run to the next
        # What is stale from the run's first day on is observed at its end, whatever made it so:
        # this run's redo of an earlier place, or a `sleep rebuild`'s restore before the run.
        first = min(day for _, day in partition_dates(context))
        with Written(context) as written, _stale_observed(context, sleep, first):
            for key, day in partition_dates(context):
                done: list[str] = []  # one log line per day (every event is a write to the instance)
                try:
                    for stage in stages:
                        asset = KEYS[stage].to_user_string()
                        ctx = sleep.context(asset, key, force=config.force_llm)
                        ctx.carry = carry
                        run, describe = _stage_fn(stage)
                        try:
                            result = run(ctx, day, worlds)
                        except StageFailure as exc:
                            raise Failure(
                                description=str(exc), metadata={"failed_partition": key}, allow_retries=False
                            ) from None
                        except LLMProviderDown as exc:  # the provider's breaker opened: its one line
                            raise provider_down(exc, failed_partition=key) from None
                        made = [d.isoformat() for d in result.stale_days]
                        meta = {**describe(result), "later_days_marked_stale": made, **llm_metadata(ctx.llm.stats)}
                        written.add(key, meta, asset_key=KEYS[stage])
                        cut = ", ".join(result.worlds_truncated)
                        warn_truncated(
                            context,
                            ctx.llm.stats,
                            f"{asset} {key}",
                            f"the records of world(s) {cut} (marked, asked again at the next run of the day)",
                        )
                        done.append(f"{asset} {key}: {meta}")
                        for world, why in getattr(result, "refused", {}).items():  # a degraded day says so
                            context.log.warning(f"{asset} {key}: {why} (world {world}); the other worlds ran")
                        for world in getattr(result, "worlds_all_refused", []):
                            context.log.warning(
                                f"{asset} {key}: every tool call the model made for world {world} was refused "
                                "(nothing applied; its record is marked and asked again at the next run of the day)"
                            )
                finally:
                    if done:
                        context.log.info("\n".join(done))
        if carry.hits or carry.misses:
            context.log.info(
                f"sleep: active sets taken from the previous place {carry.hits} times (checked against the "
                f"store), read from the store {carry.misses} times"
            )
    for stage in stages:
        yield MaterializeResult(asset_key=KEYS[stage])


@contextmanager
def _stale_observed(context: AssetExecutionContext, sleep: SleepResource, since: date) -> Iterator[None]:
    """When the run ends, failed or not, the places stale from ``since`` on are observed (an earlier
    place it redid, a rebuild's restore before it: a place a run marks stale is always after its
    first day). On failure, recording them must not hide the run's error (a store that is down
    fails both): a warning then, and the run's own error goes on."""
    try:
        yield
    except Exception:
        try:
            _observe_stale(context, sleep, since)
        except Exception as exc:  # the run's own failure is the one to report
            context.log.warning(f"sleep: could not record the places left stale: {exc}")
        raise
    _observe_stale(context, sleep, since)


def _observe_stale(context: AssetExecutionContext, sleep: SleepResource, since: date) -> None:
    """What is stale from ``since`` on when the run ends (an earlier place ran again, in this run or
    a rebuild's restore before it, and nothing after it in this run redid it): an observation on
    each such partition, so the UI says it is to be run again."""
    for position in stale_positions(sleep.memory_store.store(), since):
        context.log_event(
            AssetObservation(
                asset_key=KEYS[position.stage],
                partition=position.day.isoformat(),
                metadata={
                    "stale": True,
                    "why": f"an earlier place was run again (in run {context.run.run_id} or a rebuild's restore "
                    f"before it): {position} runs again at the next nightly tick (or `memory-pipeline sleep backfill`)",
                },
            )
        )


sleep_assets = [sleep_stages]
