"""The analyst domain as Dagster assets: one export asset per exported table (``analyst_<table>``;
a multi-asset per partitioning: by CST day, by month, by year, whole), and the coverage and cost
picture. Each export run is one new version of the DuckDB file (see ``analyst.files``); every
writer of the file runs in the ``duckdb`` pool."""

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from dagster import (
    AllPartitionMapping,
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionsDefinition,
    asset,
    multi_asset,
)

from memory_pipeline.analyst import exports as core
from memory_pipeline.analyst import reports
from memory_pipeline.analyst.logic import DayWindow
from memory_pipeline.analyst.registry import EXPORTS, ExportTable
from memory_pipeline.defs._shared.keys import RAW_EVENTS
from memory_pipeline.defs._shared.partitions import cst_day_open, cst_month, cst_year
from memory_pipeline.defs.analyst.automation import Trigger, after_upstream, condition_for
from memory_pipeline.defs.analyst.resources import AnalystResource
from memory_pipeline.lib.kinds import Window
from memory_pipeline.lib.timeutil import local_date

GROUP = "analyst"
# The code location adds the store's technology (postgres or sqlite) to assets with this tag.
STORE_TAG = {"memory_pipeline/store": ""}
# Every asset that writes the DuckDB file: one at a time (the file lock in analyst.files backs it).
DUCKDB_POOL = "duckdb"

_ALL = AllPartitionMapping()
# Other domains' assets by key (a domain's defs import no other domain's).
SLEEP_LIGHT = AssetKey("sleep_light_sleep")
SLEEP_DEEP = AssetKey("sleep_deep_sleep")
SLEEP_AUTO = AssetKey("sleep_autobiography")
# Every asset whose runs call a model: each call is a ledger row (and a cache row) of the call's day.
LLM_ASSETS = [
    AssetKey("temporal_day_chunks"),
    AssetKey("temporal_peer_rolls"),
    AssetKey("temporal_day_summaries"),
    AssetKey("temporal_month_summaries"),
    AssetKey("temporal_year_summaries"),
    SLEEP_LIGHT,
    SLEEP_DEEP,
    SLEEP_AUTO,
]


@dataclass(frozen=True)
class Upstream:
    deps: tuple[AssetKey | AssetDep, ...]
    trigger: Trigger


def _calls() -> tuple[AssetKey | AssetDep, ...]:
    return (
        *(AssetDep(a, partition_mapping=_ALL) for a in [*LLM_ASSETS, AssetKey("objects_event_outcomes")]),
        AssetKey("temporal_system_rolls"),
        AssetKey("conversation_rolling_summaries"),
        AssetKey("objects_compaction"),
        AssetKey("objects_archive"),
    )


def _sleep_all(*keys: AssetKey) -> tuple[AssetDep, ...]:
    return tuple(AssetDep(k, partition_mapping=_ALL) for k in keys)


_OBJECTS: tuple[AssetKey, ...] = (AssetKey("objects_compaction"), AssetKey("objects_archive"))


# What writes each exported table, and so when its export runs. A domain that lands with tables
# adds them to analyst/registry.py and here (a unit test checks both lists match).
UPSTREAM: dict[str, Upstream] = {
    "worlds": Upstream((RAW_EVENTS,), Trigger.REFRESH),
    "conversations": Upstream((RAW_EVENTS,), Trigger.REFRESH),
    # A day's messages: after the tick that chunks them and after the day rows (nightly, reconcile).
    "messages": Upstream(
        (RAW_EVENTS, AssetKey("temporal_day_chunks"), AssetKey("temporal_day_summaries")), Trigger.ALIGNED
    ),
    "ingest_batches": Upstream((RAW_EVENTS,), Trigger.REFRESH),
    "temporal_day_chunks": Upstream((AssetKey("temporal_day_chunks"),), Trigger.ALIGNED),
    # Each window's rows along that window's partitions: a rebuilt month re-exports that month.
    "temporal_day_summaries": Upstream((AssetKey("temporal_day_summaries"),), Trigger.ALIGNED),
    "temporal_month_summaries": Upstream((AssetKey("temporal_month_summaries"),), Trigger.ALIGNED),
    "temporal_year_summaries": Upstream((AssetKey("temporal_year_summaries"),), Trigger.ALIGNED),
    "temporal_period_runs": Upstream(
        (AssetKey("temporal_day_summaries"), AssetKey("temporal_month_summaries"), AssetKey("temporal_year_summaries")),
        Trigger.ALIGNED,
    ),
    "warmup_requests": Upstream((AssetKey("temporal_peer_rolls"),), Trigger.ALIGNED),
    "llm_ledger": Upstream(_calls(), Trigger.RECENT),
    "llm_cache": Upstream(_calls(), Trigger.RECENT),
    "inbox": Upstream((), Trigger.REFRESH),  # written by the read path
    # Seed 004: types, entries, jobs and the retry ledger are written by the API / CLI / MCP too.
    "tower_types": Upstream((), Trigger.REFRESH),
    "tower_entries": Upstream((AssetKey("tower_day_windows"),), Trigger.ALIGNED),
    "tower_windows": Upstream((AssetKey("tower_day_windows"),), Trigger.ALIGNED),
    "tower_summaries": Upstream((AssetKey("tower_day_summaries"),), Trigger.ALIGNED),
    "tower_summary_attempts": Upstream((), Trigger.REFRESH),
    "tower_jobs": Upstream((), Trigger.REFRESH),
    "tower_window_runs": Upstream((), Trigger.REFRESH),
    # Seed 003: whole tables after any sleep run; by-day tables along the sleep partitions.
    "semantic_memories": Upstream((SLEEP_LIGHT, SLEEP_DEEP), Trigger.ALIGNED),
    "semantic_memory_versions": Upstream(_sleep_all(SLEEP_LIGHT, SLEEP_DEEP), Trigger.RECENT),
    "semantic_memory_snapshots": Upstream((SLEEP_DEEP,), Trigger.ALIGNED),
    "self_blocks": Upstream((SLEEP_AUTO,), Trigger.ALIGNED),
    "pinned_facts": Upstream((), Trigger.REFRESH),  # written by operators (CLI)
    "autobiographical_memories": Upstream((SLEEP_AUTO,), Trigger.ALIGNED),
    "sleep_runs": Upstream((SLEEP_LIGHT, SLEEP_DEEP, SLEEP_AUTO), Trigger.ALIGNED),
    # Seed 002: versions and failures land on the day of the run; the rest is written outside runs.
    "conversation_summaries": Upstream((AssetKey("conversation_rolling_summaries"),), Trigger.RECENT),
    "conversation_summary_failures": Upstream((AssetKey("conversation_rolling_summaries"),), Trigger.RECENT),
    "conversation_init_status": Upstream((), Trigger.REFRESH),
    # Written by `eval` (a command, not a run): refreshed with the other whole tables.
    "recall_eval_runs": Upstream((), Trigger.REFRESH),
    "recall_eval_results": Upstream((), Trigger.REFRESH),
    "conversation_summary_requests": Upstream((), Trigger.REFRESH),
    "user_profile_facts": Upstream((), Trigger.REFRESH),
    # Seed 001: one current state written by unpartitioned runs (and the per-day outcomes).
    "objects_worlds": Upstream(_OBJECTS, Trigger.ALIGNED),
    "objects_hot_nodes": Upstream((AssetKey("objects_hot_timeline"), AssetKey("objects_compaction")), Trigger.ALIGNED),
    "objects_event_state": Upstream(
        (*_OBJECTS, AssetDep(AssetKey("objects_event_outcomes"), partition_mapping=_ALL)), Trigger.ALIGNED
    ),
    "objects_objects": Upstream((AssetKey("objects_archive"),), Trigger.ALIGNED),
    "objects_versions": Upstream((AssetKey("objects_archive"),), Trigger.RECENT),
    "objects_relations": Upstream((AssetKey("objects_archive"),), Trigger.ALIGNED),
    "objects_attachments": Upstream((AssetKey("objects_archive"),), Trigger.ALIGNED),
    # Core documents: written by commits and by the projection's import of a human edit.
    "objects_core": Upstream((AssetKey("objects_archive"), AssetKey("objects_markdown_projection")), Trigger.ALIGNED),
    "objects_core_versions": Upstream(
        (AssetKey("objects_archive"), AssetKey("objects_markdown_projection")), Trigger.RECENT
    ),
    "objects_jobs": Upstream(_OBJECTS, Trigger.ALIGNED),
    "objects_failures": Upstream(_OBJECTS, Trigger.RECENT),
    "objects_receipts": Upstream(_OBJECTS, Trigger.RECENT),
    "objects_projection": Upstream((AssetKey("objects_markdown_projection"),), Trigger.ALIGNED),
}

_WHEN = {
    Trigger.ALIGNED: "Runs after any upstream partition of its day is written (backfills, rebuilds, reconcile).",
    Trigger.RECENT: "Rows land on the day of the call: runs for the newest two days after any upstream run.",
    Trigger.REFRESH: "Written outside runs: refreshed every 30 minutes.",
}


def export_key(table: str) -> AssetKey:
    return AssetKey(f"analyst_{table}")


def _spec(export: ExportTable) -> AssetSpec:
    up = UPSTREAM[export.name]
    by = f"by the CST day of `{export.day_column}`" if export.by_day else "whole"
    if export.grain is not Window.DAY:
        by += f", one {export.grain} partition at a time"
    return AssetSpec(
        key=export_key(export.name),
        deps=up.deps,
        group_name=GROUP,
        kinds={"duckdb", "parquet"},
        tags=STORE_TAG,
        skippable=True,
        automation_condition=condition_for(up.trigger, export.by_day),
        description=f"`{export.name}` in the DuckDB file and as Parquet, {by}. {export.description} {_WHEN[up.trigger]}",
    )


WHOLE_EXPORTS = [e for e in EXPORTS if not e.by_day]
PARTITIONS = {Window.DAY: cst_day_open, Window.MONTH: cst_month, Window.YEAR: cst_year}


def _selected(context: AssetExecutionContext, exports: list[ExportTable]) -> list[ExportTable]:
    keys = context.selected_asset_keys
    return [e for e in exports if export_key(e.name) in keys]


def _window(context: AssetExecutionContext) -> DayWindow:
    """The CST days of the run's partition range (a month partition: its days)."""
    span = context.partition_time_window
    tz = ZoneInfo(context.assets_def.partitions_def.timezone)
    return DayWindow(local_date(span.start, tz), local_date(span.end, tz) - timedelta(days=1))


def _results(
    report: core.ExportReport, context: AssetExecutionContext | None = None
) -> Iterator[MaterializeResult[None]]:
    """One result per table. A range run's result would put the whole range's counts on each of its
    partitions: each partition gets its own ``rows``, ``days`` and ``days_with_rows`` (``context``),
    the run's totals are ``run_rows`` and ``run_days``."""
    days_of = _partition_days(context) if context is not None and report.window is not None else {}
    for t in report.tables:
        metadata: dict[str, Any] = {
            "rows": t.rows,
            "parquet_files": t.parquet_files,
            "duckdb_file": MetadataValue.path(str(report.duckdb_path)),
            "file_bytes": report.file_bytes,
            "export_seconds": round(report.seconds, 2),
        }
        if context is not None and report.window is not None and t.days:
            metadata |= {"run_rows": t.rows, "run_days": t.days, "window": str(report.window)}
            for key, days in days_of.items():  # each overrides the run's "rows"
                counts = [t.rows_by_day[d] for d in days if d in t.rows_by_day]
                own = {"rows": sum(counts), "days": len(days), "days_with_rows": len(counts)}
                context.add_asset_metadata(own, asset_key=export_key(t.table), partition_key=key)
        yield MaterializeResult(asset_key=export_key(t.table), metadata=metadata)


def _partition_days(context: AssetExecutionContext) -> dict[str, list[str]]:
    """The CST days (ISO) of each partition of the run."""
    defn = context.assets_def.partitions_def
    assert isinstance(defn, TimeWindowPartitionsDefinition)  # every export's partitions are by time
    tz = ZoneInfo(defn.timezone)
    out = {}
    for key in context.partition_keys:
        span = defn.time_window_for_partition_key(key)
        window = DayWindow(local_date(span.start, tz), local_date(span.end, tz) - timedelta(days=1))
        out[key] = [d.isoformat() for d in window.days()]
    return out


def _period_exports(grain: Window) -> AssetsDefinition:
    """The tables by day whose export partitions are ``grain`` periods: one multi-asset, so a run
    over several of them is one new version of the file."""
    exports = [e for e in EXPORTS if e.by_day and e.grain is grain]

    @multi_asset(
        name=f"analyst_{grain}_exports",
        specs=[_spec(e) for e in exports],
        partitions_def=PARTITIONS[grain],
        backfill_policy=BackfillPolicy.single_run(),
        can_subset=True,
        pool=DUCKDB_POOL,
    )
    def _exports(context: AssetExecutionContext, analyst: AnalystResource) -> Iterator[MaterializeResult[None]]:
        window = _window(context)
        report = core.export_tables(
            analyst.store(), analyst.files(), _selected(context, exports), window, analyst.tz, context.log.warning
        )
        context.log.info(f"exported {len(report.tables)} table(s) for {window} in {report.seconds:.1f}s")
        yield from _results(report, context)

    return _exports


analyst_day_exports = _period_exports(Window.DAY)
analyst_month_exports = _period_exports(Window.MONTH)
analyst_year_exports = _period_exports(Window.YEAR)


@multi_asset(name="analyst_table_exports", specs=[_spec(e) for e in WHOLE_EXPORTS], can_subset=True, pool=DUCKDB_POOL)
def analyst_table_exports(
    context: AssetExecutionContext, analyst: AnalystResource
) -> Iterator[MaterializeResult[None]]:
    """The selected tables without a day, whole: one new version of the file."""
    report = core.export_tables(
        analyst.store(), analyst.files(), _selected(context, WHOLE_EXPORTS), None, analyst.tz, context.log.warning
    )
    yield from _results(report)


JSON_FIGURES = ("placeholders_by_reason", "llm_calls_off_data_days")
REPORT_DEPS = [AssetKey("analyst_mart_temporal_coverage"), AssetKey("analyst_mart_llm_cost_by_data_day")]


@asset(
    name="analyst_coverage_report",
    deps=REPORT_DEPS,
    group_name=GROUP,
    kinds={"duckdb", "matplotlib"},
    automation_condition=after_upstream(),
    description="A PNG of the coverage and the cost: worlds per CST day with a day summary, a placeholder or "
    "no row; placeholders by empty_reason; LLM calls and tokens per data day (the CST day the calls served). "
    "Written beside the DuckDB file and shown in this materialization.",
)
def analyst_coverage_report(context: AssetExecutionContext, analyst: AnalystResource) -> MaterializeResult[None]:
    files = analyst.files()
    figures, png = reports.write_report(files)
    image = base64.b64encode(png).decode("ascii")
    summary = figures.summary()
    return MaterializeResult(
        metadata={
            "picture": MetadataValue.md(f"![coverage and cost](data:image/png;base64,{image})"),
            "path": MetadataValue.path(str(files.report)),
            "png_bytes": len(png),
            **{k: v for k, v in summary.items() if k not in JSON_FIGURES},
            **{k: MetadataValue.json(summary[k]) for k in JSON_FIGURES},
        }
    )


analyst_export_assets = [analyst_day_exports, analyst_month_exports, analyst_year_exports, analyst_table_exports]
