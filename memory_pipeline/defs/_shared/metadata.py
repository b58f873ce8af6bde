"""Metadata helpers every domain's assets attach: LLM stats of a run and Markdown previews."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from zoneinfo import ZoneInfo

from dagster import AssetExecutionContext, MetadataValue, TimeWindowPartitionsDefinition
from dagster._core.definitions.metadata import RawMetadataValue  # what MaterializeResult(metadata=) takes; not public

from memory_pipeline.lib.cache import KVCache
from memory_pipeline.lib.llm.client import CallStats
from memory_pipeline.lib.timeutil import local_date


def llm_metadata(stats: CallStats) -> dict[str, RawMetadataValue]:
    return {
        "llm_calls": stats.calls,
        "llm_cache_hits": stats.cache_hits,
        "llm_tokens_in": stats.tokens_in,
        "llm_tokens_out": stats.tokens_out,
        "llm_failures": stats.failures,
        # Answers the provider cut at the output limit (finish_reason length).
        "llm_truncated_answers": stats.truncated,
    }


def warn_truncated(context: AssetExecutionContext, stats: CallStats, what: str, written: str = "") -> None:
    """A warning in the run's log when answers were cut at the output limit (finish_reason
    length): what they went into (``written``, e.g. which rows) was written from the cut text (the
    ledger rows' finish_reason say which calls). Every domain that writes model text says it so."""
    if stats.truncated:
        context.log.warning(
            f"{what}: {stats.truncated} model answer(s) cut at the output limit (finish_reason length); "
            f"{written or 'what they went into'} written from the cut text; the ledger rows with "
            "finish_reason 'length' name the calls"
        )


def cache_metadata(context: AssetExecutionContext, cache: KVCache, what: str) -> dict[str, RawMetadataValue]:
    """Whether a configured Redis failed during the run, and how many writes wait in the store's
    write-behind for cache_writeback_sensor (the run still succeeds: nothing is lost)."""
    if cache.degraded:
        context.log.warning(
            f"{what}: Redis did not answer ({cache.last_error or 'unreachable'}); {cache.pending_writes} "
            "cache write(s) kept in the store until cache_writeback_sensor writes them back"
            + (f", {cache.unsaved_writes} held in this process only" if cache.unsaved_writes else "")
        )
    return {
        "cache_degraded": cache.degraded,
        "cache_writes_pending": cache.pending_writes,
    }


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> MetadataValue[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(" ".join(str(c).split()).replace("|", "/") for c in r) + " |" for r in rows]
    return MetadataValue.md("\n".join(lines))


def partition_dates(context: AssetExecutionContext) -> list[tuple[str, date]]:
    """(key, local start date) of every partition of the run, in order."""
    defn = context.assets_def.partitions_def
    assert isinstance(defn, TimeWindowPartitionsDefinition), "a time-window partitioned asset (day, week, month, year)"
    tz = ZoneInfo(defn.timezone)
    return [(k, local_date(defn.time_window_for_partition_key(k).start, tz)) for k in context.partition_keys]
