"""Seed 004 as Dagster assets: the structural windows (zero LLM, never in the `llm` pool) by CST
day (every level up to `day`, the open day included), week and month; the semantic summaries
(pool `llm`) by closed day, week and month; and the semantic tick. Each asset loops over its run's
partition keys and calls the core (memory_pipeline.tower)."""

from collections import Counter
from collections.abc import Sequence
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    BackfillPolicy,
    Config,
    MaterializeResult,
    TimeWindowPartitionsDefinition,
    asset,
)
from pydantic import Field

from memory_pipeline.defs._shared.failures import provider_down
from memory_pipeline.defs._shared.keys import RAW_EVENTS
from memory_pipeline.defs._shared.metadata import llm_metadata, md_table, partition_dates, warn_truncated
from memory_pipeline.defs._shared.partitions import cst_day, cst_day_open, cst_month, cst_week
from memory_pipeline.defs._shared.written import Written
from memory_pipeline.defs.tower.resources import TowerResource
from memory_pipeline.lib.llm.client import CallStats, LLMProviderDown
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.tower import summaries, windows
from memory_pipeline.tower.logic import Granularity

GROUP = "tower"
STORE_TAG = {"memory_pipeline/store": ""}
LLM_POOL = "llm"


class TowerRunConfig(Config):
    force_llm: bool = Field(default=False, description="Ignore cached answers and call the model afresh.")


def tower_llm_metadata(stats: CallStats) -> dict[str, Any]:
    """``llm_calls`` is every call of the run, one per ledger row (answered after its retries, from
    the cache, or failed; the children a bottom-up summary made included); ``llm_answered`` the
    model's fresh answers among them."""
    return {**llm_metadata(stats), "llm_calls": stats.ledger_rows, "llm_answered": stats.calls}


def _round_metadata(result: summaries.RoundResult) -> dict[str, Any]:
    return {
        "summaries_written": result.committed,
        "summaries_reused": result.reused,
        "skipped_empty": result.skipped_empty,
        "failed": result.failed,
        "given_up": result.given_up,
        "deferred": result.deferred,
        "problems": md_table(
            ("window", "reason"), [r.split(": ", 1) + [""] * (1 - r.count(": ")) for r in result.reasons[:20]]
        )
        if result.reasons
        else "none",
    }


@asset(
    partitions_def=cst_day_open,
    backfill_policy=BackfillPolicy.single_run(),
    deps=[RAW_EVENTS],
    group_name=GROUP,
    tags=STORE_TAG,
    description="Seed 004 structural windows of one CST day, every level up to `day` of every memory type "
    "(refs to the finer windows, down to the raw entries; zero LLM). Feeds the day's conversation messages "
    "into the activity type first (not once it is archived). Today's open partition is refreshed every minute by "
    "tower_structural_refresh_sensor; empty windows get no rows.",
)
def tower_day_windows(context: AssetExecutionContext, tower: TowerResource) -> MaterializeResult[Any]:
    store, tz, cfg = tower.store(), tower.tz(), tower.cfg()
    totals: Counter[str] = Counter()
    with Written(context) as written:
        for key, day in partition_dates(context):
            result = windows.build_day(store, day, tz, activity_type=cfg.activity_type)
            totals.update(windows=result.windows, entries=result.entries, activity_fed=result.activity_fed)
            written.add(
                key,
                {
                    "windows_written": result.windows,
                    "entries": result.entries,
                    "activity_entries_fed": result.activity_fed,
                    "activity_feed": f"{cfg.activity_type} archived: no message fed"
                    if result.activity_archived
                    else f"into {cfg.activity_type}",
                    "by_level": dict(result.by_level),
                    "llm_calls": 0,
                },
            )
    context.log.info(f"tower day windows: {dict(totals)}")
    return MaterializeResult()


def _coarse_windows(
    name: str, g: Granularity, partitions_def: TimeWindowPartitionsDefinition, description: str
) -> AssetsDefinition:
    @asset(
        name=name,
        partitions_def=partitions_def,
        backfill_policy=BackfillPolicy.single_run(),
        deps=[tower_day_windows],
        group_name=GROUP,
        tags=STORE_TAG,
        description=description,
    )
    def _asset(context: AssetExecutionContext, tower: TowerResource) -> MaterializeResult[Any]:
        store, tz = tower.store(), tower.tz()
        with Written(context) as written:
            for key, period in partition_dates(context):
                result = windows.build_coarse(store, g, period, tz)
                written.add(key, {"windows_written": result.windows, "entries": result.entries, "llm_calls": 0})
        return MaterializeResult()

    return _asset


tower_week_windows = _coarse_windows(
    "tower_week_windows",
    Granularity.WEEK,
    cst_week,
    "Seed 004 week windows (Monday 00:00 CST) of every type whose chain has `week`, referring to the finer "
    "level's windows (zero LLM).",
)
tower_month_windows = _coarse_windows(
    "tower_month_windows",
    Granularity.MONTH,
    cst_month,
    "Seed 004 month windows of every type whose chain has `month`, referring to its days (weeks do not fit "
    "in months; zero LLM).",
)


def _summary_asset(
    name: str,
    g: Granularity,
    partitions_def: TimeWindowPartitionsDefinition,
    deps: Sequence[AssetsDefinition],
    description: str,
) -> AssetsDefinition:
    @asset(
        name=name,
        partitions_def=partitions_def,
        backfill_policy=BackfillPolicy.single_run(),
        deps=deps,
        group_name=GROUP,
        kinds={"llm"},
        tags=STORE_TAG,
        pool=LLM_POOL,
        description=description,
    )
    def _asset(context: AssetExecutionContext, config: TowerRunConfig, tower: TowerResource) -> MaterializeResult[Any]:
        now = utcnow()
        with Written(context) as written:
            for key, period in partition_dates(context):
                sctx = tower.summary_context(name, key, config.force_llm)
                try:
                    result = summaries.summarize_period(sctx, g, period, now)
                except LLMProviderDown as exc:  # the provider's breaker opened: the run stops with its one line
                    raise provider_down(exc, failed_partition=key) from None
                written.add(key, {**_round_metadata(result), **tower_llm_metadata(sctx.llm.stats)})
                warn_truncated(context, sctx.llm.stats, f"{name} {key}", "the summary records appended")
                if result.failed or result.given_up:
                    context.log.warning(f"{name} {key}: " + " | ".join(result.reasons[:3]))
        return MaterializeResult()

    return _asset


tower_day_summaries = _summary_asset(
    "tower_day_summaries",
    Granularity.DAY,
    cst_day,
    [tower_day_windows],
    "Seed 004 day summaries of every type with summaries on and `day` in its chain (worklog: one per closed "
    "natural day per project), bottom-up: missing finer children from raw first, one aggregating call per "
    "group. Append-only: a re-run appends (or reuses an unchanged record), never replaces.",
)
tower_week_summaries = _summary_asset(
    "tower_week_summaries",
    Granularity.WEEK,
    cst_week,
    [tower_week_windows, tower_day_summaries],
    "Seed 004 week summaries (the default cap), bottom-up from the day summaries: one call per group plus one "
    "per child day with entries but no summary; 0 calls on a second run.",
)
tower_month_summaries = _summary_asset(
    "tower_month_summaries",
    Granularity.MONTH,
    cst_month,
    [tower_month_windows, tower_day_summaries],
    "Seed 004 month summaries, only for types that raised their summary cap to `month`.",
)


@asset(
    deps=[tower_day_windows],
    group_name=GROUP,
    kinds={"llm"},
    tags=STORE_TAG,
    pool=LLM_POOL,
    description="Seed 004 semantic tick (every 10 min by tower_semantic_tick_sensor): for each type with "
    "summaries on, each level up to its cap, only the latest window closed for the settle period; done "
    "windows cost nothing, empty ones are skipped, failures back off and are given up past the limit, and "
    "at most max_commits_per_round records are written per round.",
)
def tower_semantic_tick(
    context: AssetExecutionContext, config: TowerRunConfig, tower: TowerResource
) -> MaterializeResult[Any]:
    sctx = tower.summary_context("tower_semantic_tick", None, config.force_llm)
    result = summaries.semantic_tick(sctx, utcnow())
    warn_truncated(context, sctx.llm.stats, "tower_semantic_tick", "the summary records appended")
    return MaterializeResult(
        metadata={
            **_round_metadata(result),
            **tower_llm_metadata(sctx.llm.stats),
            "written": md_table(("window",), [(w,) for w in result.written[:50]]) if result.written else "none",
        }
    )


tower_assets = [
    tower_day_windows,
    tower_week_windows,
    tower_month_windows,
    tower_day_summaries,
    tower_week_summaries,
    tower_month_summaries,
    tower_semantic_tick,
]
