"""Every operational table the analyst layer exports, with the column that gives each row its CST
day (core, no Dagster).

A table with a day column is exported one CST day at a time: the export of a day replaces exactly
that day's rows in the DuckDB table and rewrites that day's Parquet file. A ``Date`` column is the
day itself; a timestamp column gives the day it falls on in the configured zone. A table without
one is small and exported whole.

A table whose rows belong to periods of different lengths (day, month and year summaries) is
exported as one table per period, each exported along its own partitions (a month's rows per
month), and the file has a view with the table's name over them.

A row that spans a period (a tower week or month window, a summary head of several events) also
names the column ending it: it keeps the CST day of its start, and the export of a range takes
every row whose period overlaps the range (a week window that started the Monday before the range's
first day included); the export replaces the same rows in the file, so adjacent ranges never
duplicate a row they share.

A domain that lands with tables adds them here (and what writes them in
``defs/analyst/assets.py``); a unit test fails while a table on the shared metadata is missing."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Date, Table

from memory_pipeline.conversation.tables import (
    conversation_init_status,
    conversation_summaries,
    conversation_summary_failures,
    conversation_summary_requests,
    user_profile_facts,
)
from memory_pipeline.events.tables import ingest_batches
from memory_pipeline.lib.kinds import Window
from memory_pipeline.lib.store.tables import conversations, inbox, llm_cache, llm_ledger, messages, worlds
from memory_pipeline.objects.tables import (
    objects_attachments,
    objects_core,
    objects_core_versions,
    objects_event_state,
    objects_failures,
    objects_hot_nodes,
    objects_jobs,
    objects_objects,
    objects_projection,
    objects_receipts,
    objects_relations,
    objects_versions,
    objects_worlds,
)
from memory_pipeline.recall.tables import recall_eval_results, recall_eval_runs
from memory_pipeline.sleep.tables import (
    autobiographical_memories,
    pinned_facts,
    self_blocks,
    semantic_memories,
    semantic_memory_snapshots,
    semantic_memory_versions,
    sleep_runs,
)
from memory_pipeline.temporal.tables import (
    temporal_day_chunks,
    temporal_period_runs,
    temporal_summaries,
    warmup_requests,
)
from memory_pipeline.tower.tables import (
    tower_entries,
    tower_jobs,
    tower_summaries,
    tower_summary_attempts,
    tower_types,
    tower_window_runs,
    tower_windows,
)

# The column every day-partitioned export adds: the row's CST day (the Parquet partition key).
DAY = "cst_day"


@dataclass(frozen=True)
class ExportTable:
    table: Table
    day_column: str | None  # the column whose CST day partitions the rows; None: exported whole
    description: str
    export_name: str = ""  # the table in the file; default: the store table's name
    rows: tuple[str, str] | None = None  # (column, value): only these rows of the store table
    grain: Window = Window.DAY  # the period one export partition covers
    # The column ending each row's period (None: a row is the instant or day of day_column); the
    # end is exclusive unless end_inclusive (the instant of the period's last event).
    end_column: str | None = None
    end_inclusive: bool = False
    # Columns exported as another DuckDB type than the store's own (column -> DuckDB type).
    types: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.export_name or self.table.name

    @property
    def by_day(self) -> bool:
        return self.day_column is not None

    @property
    def day_is_date(self) -> bool:
        """The day column holds the CST day itself (a Date), not an instant."""
        return self.day_column is not None and isinstance(self.table.c[self.day_column].type, Date)


EXPORTS: tuple[ExportTable, ...] = (
    ExportTable(worlds, None, "One row per world (agent): name, creation, first event."),
    ExportTable(conversations, None, "One row per conversation: world, platform, debug flag, title."),
    ExportTable(messages, "at", "Raw messages (append-only), by the CST day of their timestamp."),
    ExportTable(ingest_batches, "at", "One row per ingested file: lines, inserted, duplicates, rejected."),
    ExportTable(temporal_day_chunks, "cst_date", "Seed 000 30-minute conversation chunks, by their CST day."),
    *(
        ExportTable(
            temporal_summaries,
            "period_start",
            f"Seed 000 per-world {w} rows (placeholders with empty_reason), with source_kind and source_ids; "
            f"by the first day of their {w}.",
            export_name=f"temporal_{w}_summaries",
            rows=("window", w.value),
            grain=w,
        )
        for w in Window
    ),
    ExportTable(temporal_period_runs, None, "When each day, month and year was last materialized, and its input."),
    ExportTable(warmup_requests, "cst_date", "Peer-roll warm-up requests of the read path, by their CST day."),
    ExportTable(
        tower_types, None, "Seed 004 memory types: chain, summaries switch, cap, group field, declared retention."
    ),
    ExportTable(
        tower_entries, "at", "Seed 004 raw entries of every memory type (append-only), by the CST day of `at`."
    ),
    ExportTable(
        tower_windows,
        "start",
        "Seed 004 structural windows (refs to finer windows or entries), by their start; a range takes every "
        "window overlapping it.",
        end_column="end",
    ),
    ExportTable(
        tower_summaries,
        "start",
        "Seed 004 summary records (append-only; newest per window and group wins), by their window's start; a range "
        "takes every record whose window overlaps it.",
        end_column="end",
    ),
    ExportTable(tower_summary_attempts, None, "Seed 004 retry ledger of summaries: failures, backoff, given up."),
    ExportTable(tower_jobs, "created_at", "Seed 004 summarize / recompute / summarize_on_miss jobs and their states."),
    ExportTable(tower_window_runs, None, "Seed 004 record of each window partition's materialization (late data)."),
    ExportTable(
        llm_ledger,
        "at",
        "One row per LLM call (asset, partition, model, tokens, latency, cost, outcome).",
        types=(("cost_usd", "DOUBLE"),),  # a JSON number (or null) in the store
    ),
    ExportTable(llm_cache, "created_at", "Cached model answers by (model, prompt version, prompt) key."),
    ExportTable(inbox, "created_at", "Warnings to users and agents (e.g. a truncated temporal_summary block)."),
    ExportTable(semantic_memories, None, "Seed 003 semantic memory, live state (active / deprecated, merged_into)."),
    ExportTable(semantic_memory_versions, "at", "Seed 003 every change of a semantic memory, by the day it was made."),
    ExportTable(semantic_memory_snapshots, "day", "Seed 003 the active set of each world after a day's deep sleep."),
    ExportTable(self_blocks, None, "Seed 003 self layer: the six self blocks of each world (autobiography_summary)."),
    ExportTable(pinned_facts, None, "Seed 003 pinned facts (the top 20 go into every sleep prompt)."),
    ExportTable(autobiographical_memories, None, "Seed 003 autobiographical narratives (append-only; deprecated)."),
    ExportTable(sleep_runs, "day", "Seed 003 state record of every sleep stage run, per world and partition day."),
    ExportTable(recall_eval_runs, None, "One row per `eval` run: files, model, prompt versions, LLM cost, wall time."),
    ExportTable(recall_eval_results, None, "R@1, R@5 and characters per day of each index in an `eval` run."),
    ExportTable(conversation_init_status, None, "Seed 002 initialization status of each conversation (Step-0 gate)."),
    ExportTable(conversation_summaries, "created_at", "Seed 002 rolling summary versions, by the day written."),
    ExportTable(conversation_summary_requests, None, "Seed 002 explicit triggers (user check, preference override)."),
    ExportTable(conversation_summary_failures, "at", "Seed 002 failure log of rolling summaries, by the day."),
    ExportTable(user_profile_facts, None, "Seed 002 user-profile store (newest value per key)."),
    ExportTable(objects_worlds, None, "Seed 001 per-world graph revision, runtime flags, cooldown and worker error."),
    ExportTable(
        objects_hot_nodes,
        "first_at",
        "Seed 001 hot-timeline nodes (raw slices and summary heads), by their first event's day; a range takes "
        "every node whose events overlap it.",
        end_column="last_at",
        end_inclusive=True,
    ),
    ExportTable(
        objects_event_state,
        "event_day",
        "Seed 001 per-event archive state (hot, pending, in_progress, linked, archive_only, blocked), page cursor and "
        "progress, by the event's CST day.",
    ),
    ExportTable(objects_objects, None, "Seed 001 long-term objects: one current dossier per stable id."),
    ExportTable(objects_versions, "at", "Seed 001 every written object version (create / update / approve)."),
    ExportTable(objects_relations, None, "Seed 001 relations between objects (standard labels; legacy kept readable)."),
    ExportTable(objects_attachments, None, "Seed 001 attachments: object -> raw event evidence (and event -> object)."),
    ExportTable(objects_core, None, "Seed 001 per-world core documents (AGENTS.md, SOUL.md, USER.md)."),
    ExportTable(
        objects_core_versions,
        "at",
        "Seed 001 every version of a core document (model commit or human import), by the day written.",
    ),
    ExportTable(objects_jobs, None, "Seed 001 compact / organize / deep jobs with their origin and status."),
    ExportTable(objects_failures, "at", "Seed 001 failure history of claims (never rewritten as done)."),
    ExportTable(objects_receipts, "created_at", "Seed 001 one receipt per committed batch, with its outcome."),
    ExportTable(
        objects_projection,
        None,
        "Seed 001 Markdown projection state per object and core document (hash, pages, revision, drift, error).",
    ),
)

BY_NAME: dict[str, ExportTable] = {e.name: e for e in EXPORTS}

# Tables on the shared metadata that are deliberately not exported, each with the reason: only
# coordination state of the running system (rows that live for seconds to hours), never data.
NOT_EXPORTED: dict[str, str] = {
    "recall_documents": "memory_search's index: every domain's memory as documents, rebuilt from the memory "
    "tables (each exported itself)",
    "recall_index_state": "when memory_search's index of each world was last brought up to date",
    "partition_leases": "coordination state of running runs (who holds a partition now), not a fact to analyse",
    "pending_cache_writes": "a write-behind queue of cache values, emptied once Redis answers again",
    "conversation_summary_backoff": "when a failing rolling summary may be retried (gone on success or an "
    "operator's retry); every failure itself is exported in conversation_summary_failures",
    "access_tokens": "the memory server's bearer tokens (hashes and grants): access control, not memory; "
    "`memory-pipeline tokens list` shows them",
    "request_ids": "the memory server's record of caller-given request ids (a repeated write answers the first "
    "result): the writes themselves are exported in their domains' tables",
    "store_settings": "what the store was built under (its calendar zone), one row a setting: "
    "`memory-pipeline db current` shows it, and every exported day is already of that zone",
}


def split_tables() -> dict[str, list[ExportTable]]:
    """Store tables exported as several tables (one per period): the file's view name -> parts."""
    parts: dict[str, list[ExportTable]] = {}
    for e in EXPORTS:
        if e.name != e.table.name:
            parts.setdefault(e.table.name, []).append(e)
    return parts


def export_table(name: str) -> ExportTable:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no exported table {name!r} (one of {', '.join(BY_NAME)})") from None
