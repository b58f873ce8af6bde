"""Tower asset checks, one result per partition (AssetCheckEvaluation per key, then one Output):
refs cover exactly the raw entries (no gap, no duplicate) and every summary's refs resolve; the
freshness of the structural view (entries past the materialization); the summaries' completeness
(no window left failed, read from the retry ledger); the drift of chained week summaries against a
recompute from raw."""

from collections.abc import Iterator
from datetime import date
from typing import Any
from zoneinfo import ZoneInfo

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetKey,
    AssetRecordsFilter,
    AssetsDefinition,
    MetadataValue,
    Output,
    TimeWindowPartitionsDefinition,
    asset_check,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from memory_pipeline.defs._shared.metadata import md_table
from memory_pipeline.defs._shared.partitions import cst_day, cst_day_open, cst_month, cst_week
from memory_pipeline.defs.tower import assets
from memory_pipeline.defs.tower.resources import TowerResource
from memory_pipeline.lib.timeutil import local_date
from memory_pipeline.tower import summaries, windows
from memory_pipeline.tower.logic import Granularity

CheckEvents = Iterator[AssetCheckEvaluation | Output[None]]
# One evaluation per partition, then the Output that ends the step: the decorator's type says a
# single AssetCheckResult, which a check over a range of partitions cannot return (hence the
# arg-type ignores below).
COVER_CHECK = "tower_windows_cover_entries"
FRESH_CHECK = "tower_windows_fresh"
DRIFT_CHECK = "tower_week_summaries_drift"
COMPLETE_CHECK = "tower_summaries_complete"


def _evaluation(
    context: AssetCheckExecutionContext,
    asset_key: AssetKey,
    key: str,
    passed: bool,
    metadata: dict[str, Any],
    severity: AssetCheckSeverity = AssetCheckSeverity.ERROR,
) -> AssetCheckEvaluation:
    (spec,) = context.check_specs
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=[key]), limit=1
    ).records
    record = records[0] if records else None
    return AssetCheckEvaluation(
        asset_key=asset_key,
        check_name=spec.name,
        passed=passed,
        partition=key,
        severity=severity,
        blocking=spec.blocking,
        target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
            storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp
        )
        if record
        else None,
        metadata=metadata,
    )


def _keys(context: AssetCheckExecutionContext, defn: TimeWindowPartitionsDefinition) -> list[tuple[str, date]]:
    """(key, local start date) of every partition the check runs for."""
    tz = ZoneInfo(defn.timezone)
    return [(k, local_date(defn.time_window_for_partition_key(k).start, tz)) for k in context.partition_keys]


def _problems(problems: list[str]) -> MetadataValue:
    return MetadataValue.md("\n".join(f"- {p}" for p in problems[:20]) or "none")


@asset_check(  # type: ignore[arg-type]
    asset=assets.tower_day_windows,
    partitions_def=cst_day_open,
    name=COVER_CHECK,
    description="Refs of the day's windows cover exactly its raw entries as of the materialization (no gap, "
    "no duplicate, no stranger), each level refers to exactly the finer windows present, each window's entry "
    "count and characters agree with its refs, and every summary's refs resolve. One result per partition.",
)
def day_windows_cover(context: AssetCheckExecutionContext, tower: TowerResource) -> CheckEvents:
    store, tz, activity_type = tower.store(), tower.tz(), tower.cfg().activity_type
    for key, day in _keys(context, cst_day_open):
        audit = windows.audit_day(store, day, tz, activity_type=activity_type)
        yield _evaluation(
            context,
            assets.tower_day_windows.key,
            key,
            not audit.problems,
            {
                "windows_audited": audit.audited,
                "problems": len(audit.problems),
                "first_problems": _problems(audit.problems),
            },
        )
    yield Output(None)


@asset_check(  # type: ignore[arg-type]
    asset=assets.tower_day_windows,
    partitions_def=cst_day_open,
    name=FRESH_CHECK,
    description="Stale but consistent, made explicit: warns when entries of the day (or conversation messages "
    "for the activity type) were appended after its windows were materialized. One result per partition.",
)
def day_windows_fresh(context: AssetCheckExecutionContext, tower: TowerResource) -> CheckEvents:
    store, tz, activity_type = tower.store(), tower.tz(), tower.cfg().activity_type
    for key, day in _keys(context, cst_day_open):
        audit = windows.audit_day(store, day, tz, activity_type=activity_type)
        materialized = windows.window_run(store, "day", day)
        at = materialized.astimezone(tz).isoformat(timespec="seconds") if materialized else "never"  # as operator times
        yield _evaluation(
            context,
            assets.tower_day_windows.key,
            key,
            audit.stale_entries == 0,
            {
                "entries_not_in_view": audit.stale_entries,
                "materialized_at": at,
            },
            AssetCheckSeverity.WARN,
        )
    yield Output(None)


def _coarse_check(
    asset_def: AssetsDefinition, g: Granularity, defn: TimeWindowPartitionsDefinition
) -> AssetChecksDefinition:
    @asset_check(  # type: ignore[arg-type]
        asset=asset_def,
        partitions_def=defn,
        name=COVER_CHECK,
        description=f"Each {g} window refers to exactly the finer windows present inside it, its entry count and "
        "characters agree with them, and every summary's refs resolve. One result per partition.",
    )
    def _check(context: AssetCheckExecutionContext, tower: TowerResource) -> CheckEvents:
        store, tz = tower.store(), tower.tz()
        for key, period in _keys(context, defn):
            audit = windows.audit_coarse(store, g, period, tz)
            yield _evaluation(
                context,
                asset_def.key,
                key,
                not audit.problems,
                {
                    "windows_audited": audit.audited,
                    "problems": len(audit.problems),
                    "first_problems": _problems(audit.problems),
                },
            )
        yield Output(None)

    return _check


def _complete_check(
    asset_def: AssetsDefinition, g: Granularity, defn: TimeWindowPartitionsDefinition
) -> AssetChecksDefinition:
    @asset_check(  # type: ignore[arg-type]
        asset=asset_def,
        partitions_def=defn,
        name=COMPLETE_CHECK,
        description=f"Warns when a {g} window of the partition has no summary because its call failed (backing "
        "off or given up, as the retry ledger holds it): a window failing alone does not fail the run, so the "
        "partition shows materialized. Reads the ledger, never calls a model. One result per partition.",
    )
    def _check(context: AssetCheckExecutionContext, tower: TowerResource) -> CheckEvents:
        keys = _keys(context, defn)
        by_period = summaries.left_failed(tower.store(), g, [period for _, period in keys], tower.tz())
        for key, period in keys:
            failed = by_period[period]
            rows = [
                (
                    f["window"]["window"],
                    f["type"],
                    f["window"]["reason"],
                    "none: given up (recompute rebuilds it)" if f["given_up"] else f["window"]["next_attempt_at"],
                )
                for f in failed[:20]
            ]
            yield _evaluation(
                context,
                asset_def.key,
                key,
                not failed,
                {
                    "failed_windows": len(failed),
                    "given_up": sum(f["given_up"] for f in failed),
                    "first_failed": md_table(("window", "type", "reason", "next attempt"), rows)
                    if rows
                    else MetadataValue.md("none"),
                },
                AssetCheckSeverity.WARN,
            )
        yield Output(None)

    return _check


tower_summary_checks = [
    _complete_check(assets.tower_day_summaries, Granularity.DAY, cst_day),
    _complete_check(assets.tower_week_summaries, Granularity.WEEK, cst_week),
    _complete_check(assets.tower_month_summaries, Granularity.MONTH, cst_month),
]


@asset_check(  # type: ignore[arg-type]
    asset=assets.tower_week_summaries,
    partitions_def=cst_week,
    name=DRIFT_CHECK,
    description="Drift, measured: for a sample of chained week summaries, the keyword/section overlap with a "
    "recompute from raw (metadata, not stored in the series); fails when a week's text equals a child day's "
    "text byte for byte (no compression happened). One result per partition.",
)
def week_summaries_drift(context: AssetCheckExecutionContext, tower: TowerResource) -> CheckEvents:
    for key, period in _keys(context, cst_week):
        sctx = tower.summary_context(DRIFT_CHECK, key)
        found = summaries.drift(sctx, Granularity.WEEK, period, sctx.cfg.drift_sample)
        identical = [d.window for d in found if d.identical_to_child]
        scored = [d.score for d in found if d.score is not None]
        yield _evaluation(
            context,
            assets.tower_week_summaries.key,
            key,
            not identical,
            {
                "sampled": len(found),
                "mean_overlap": round(sum(scored) / len(scored), 3) if scored else 1.0,
                "scores": MetadataValue.json({d.window: d.score for d in found}),
                "identical_to_a_child": MetadataValue.json(identical),
                "llm_calls": sctx.llm.stats.ledger_rows,  # every call, one per ledger row
            },
        )
    yield Output(None)


tower_checks = [
    day_windows_cover,
    day_windows_fresh,
    _coarse_check(assets.tower_week_windows, Granularity.WEEK, cst_week),
    _coarse_check(assets.tower_month_windows, Granularity.MONTH, cst_month),
    *tower_summary_checks,
    week_summaries_drift,
]
