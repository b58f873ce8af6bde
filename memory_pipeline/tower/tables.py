"""Seed 004 tables: memory types, their raw entry series and summary series (append-only, never
deleted), the structural windows (a regenerable view), the retry ledger of summaries, the
asynchronous summarize jobs and the record of each window partition's materialization."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    true,
)

from memory_pipeline.lib.store.tables import ID, UTCDateTime, metadata, now_utc

NAME = String(128)
GRAIN = String(8)

tower_types = Table(
    "tower_types",
    metadata,
    Column("name", NAME, primary_key=True),
    Column("description", Text, nullable=False, default=""),
    Column("chain", JSON, nullable=False),
    Column("summary_cap", GRAIN, nullable=False),
    Column("summaries_enabled", Boolean, nullable=False, default=False),
    Column("summaries_enabled_at", UTCDateTime),
    Column("group_field", String(64)),
    Column("retention", String(64)),  # declared, stored and shown; nothing deletes because of it
    Column("builtin", Boolean, nullable=False, default=False),
    # The worlds of the scoped token that created it through the server: only a token holding them
    # all changes or archives it. NULL: the operator's (an --all-worlds token, the CLI, the API).
    Column("owner_worlds", JSON),
    Column("archived_at", UTCDateTime),  # delete archives: appends refused, recall still works
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
)

# The raw series of each type: append-only, never deleted, idempotent on (type, group, entry_id):
# each group's ids are its own, so a world's ids neither collide with nor reveal another's.
tower_entries = Table(
    "tower_entries",
    metadata,
    Column("entry_pk", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("type_name", NAME, ForeignKey("tower_types.name"), nullable=False),
    Column("entry_id", ID, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    # Whether the caller sent `at` (else the append's time): a retry is matched on what was sent.
    Column("at_given", Boolean, nullable=False, default=True, server_default=true()),
    Column("group_value", ID, nullable=False, default=""),
    Column("content", JSON, nullable=False),
    Column("chars", Integer, nullable=False),
    Column("ingested_at", UTCDateTime, nullable=False, default=now_utc),
    Column("source", String(1024)),
    UniqueConstraint("type_name", "group_value", "entry_id", name="uq_tower_entry_group_id"),  # migration 0031
    Index("ix_tower_entries_type_at", "type_name", "at"),
    # one group's entries of a window, counted as they are now by exact recall (migration 0029)
    Index("ix_tower_entries_group_at", "type_name", "group_value", "at"),
    Index("ix_tower_entries_ingested_at", "ingested_at"),
)

# One row per non-empty window of each level: refs to the next finer level's windows (their
# starts), or to raw entries (their entry_pk) at the finest level. Rebuilt per partition.
tower_windows = Table(
    "tower_windows",
    metadata,
    Column("type_name", NAME, primary_key=True),
    Column("granularity", GRAIN, primary_key=True),
    Column("start", UTCDateTime, primary_key=True),
    Column("group_value", ID, primary_key=True),
    Column("end", UTCDateTime, nullable=False),
    Column("entry_count", Integer, nullable=False),
    Column("chars", Integer, nullable=False),
    Column("ref_kind", String(8), nullable=False),  # entry | window
    Column("refs", JSON, nullable=False),
    Column("materialized_at", UTCDateTime, nullable=False),
    Index("ix_tower_windows_grain_start", "granularity", "start"),
    # exact recall's walk: one group's children by a range of starts (migration 0029)
    Index("ix_tower_windows_group_start", "type_name", "granularity", "group_value", "start"),
)

# The summary series (`<type>.summary`): append-only; the newest record per (window, group) wins.
tower_summaries = Table(
    "tower_summaries",
    metadata,
    Column("record_id", Integer, primary_key=True, autoincrement=True),
    Column("type_name", NAME, ForeignKey("tower_types.name"), nullable=False),
    Column("granularity", GRAIN, nullable=False),  # a level, or "range" for an explicit from/to
    Column("start", UTCDateTime, nullable=False),
    Column("end", UTCDateTime, nullable=False),
    Column("group_value", ID, nullable=False, default=""),
    Column("sections", JSON, nullable=False),
    Column("text", Text, nullable=False),
    Column("ref_kind", String(8), nullable=False),  # entry (source raw) | summary (source chain)
    Column("refs", JSON, nullable=False),
    Column("source", String(8), nullable=False),  # chain | raw
    Column("entry_count", Integer, nullable=False),
    Column("model", String(256), nullable=False),
    Column("prompt_version", String(64), nullable=False),
    Column("strategy", String(16), nullable=False),
    Column("chunks", Integer, nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("clipped_entries", Integer, nullable=False),
    Column("material_fp", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_tower_summaries_window", "type_name", "granularity", "start", "group_value"),
)

# The retry ledger of guardrail 4: consecutive failures per (window, group); a success deletes it.
tower_summary_attempts = Table(
    "tower_summary_attempts",
    metadata,
    Column("type_name", NAME, primary_key=True),
    Column("granularity", GRAIN, primary_key=True),
    Column("start", UTCDateTime, primary_key=True),
    Column("end", UTCDateTime, primary_key=True),
    Column("group_value", ID, primary_key=True),
    Column("failures", Integer, nullable=False),
    Column("last_error", Text, nullable=False),
    Column("next_attempt_at", UTCDateTime, nullable=False),
    Column("given_up_at", UTCDateTime),
    # The semantic tick failed here and owns the retries (an explicit call's failure waits for its caller).
    Column("scheduled", Boolean, nullable=False, default=False, server_default=false()),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
)

# summarize / recompute / summarize_on_miss run as jobs: the call returns the id at once.
tower_jobs = Table(
    "tower_jobs",
    metadata,
    Column("job_id", String(36), primary_key=True),
    Column("kind", String(24), nullable=False),
    Column("type_name", NAME, nullable=False),
    Column("granularity", GRAIN, nullable=False),
    Column("start", UTCDateTime, nullable=False),
    Column("end", UTCDateTime, nullable=False),
    Column("group_value", ID, nullable=False),
    Column("state", String(16), nullable=False),
    Column("record_id", Integer),
    Column("llm_calls", Integer, nullable=False, default=0),
    Column("error", Text),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_tower_jobs_created", "created_at"),
)

# The late-data record: when each window partition (a CST day, week or month) was materialized.
# Entries (or conversation messages feeding the activity type) ingested after it make it stale.
tower_window_runs = Table(
    "tower_window_runs",
    metadata,
    Column("grain", GRAIN, primary_key=True),
    Column("period_start", Date, primary_key=True),
    Column("materialized_at", UTCDateTime, nullable=False),
    Column("windows", Integer, nullable=False),
)
