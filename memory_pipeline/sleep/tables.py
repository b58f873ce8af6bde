"""Seed 003 tables: semantic memory (with a version row for every change), the self layer (self
blocks, pinned facts), autobiographical memory, the per-day semantic-memory snapshots, and the
state record of every stage run."""

from __future__ import annotations

from sqlalchemy import JSON, Column, Date, Index, Integer, String, Table, Text, UniqueConstraint

from memory_pipeline.lib.store.tables import ID, UTCDateTime, metadata, now_utc

MEMORY_ID = String(32)

# The live semantic memory of each world. Sleep stages never delete a row: they deprecate it (with
# a reason) or merge it (merged_into). Only the memory tool's explicit delete removes one.
semantic_memories = Table(
    "semantic_memories",
    metadata,
    Column("memory_id", MEMORY_ID, primary_key=True),
    Column("world_id", ID, nullable=False),
    Column("type", String(16), nullable=False),  # world | experience | imprint | preference
    Column("content", Text, nullable=False),
    Column("source_sessions", JSON, nullable=False),
    Column("observed_at", UTCDateTime, nullable=False),
    Column("status", String(16), nullable=False),  # active | deprecated
    Column("merged_into", MEMORY_ID),
    Column("reason", Text),
    Column("version", Integer, nullable=False),
    Column("created_by", String(32), nullable=False),  # light_sleep | deep_sleep | remember ...
    # The CST day it belongs to: the sleep partition that created it, or the day `remember` wrote it.
    # A day's sleep sees only the memories of that day or before.
    Column("created_day", Date),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_semantic_world_status", "world_id", "status"),
)

# Every change of a memory, the memory as it was after it: nothing but the explicit delete loses content.
semantic_memory_versions = Table(
    "semantic_memory_versions",
    metadata,
    Column("version_id", Integer, primary_key=True, autoincrement=True),
    Column("memory_id", MEMORY_ID, nullable=False),
    Column("world_id", ID, nullable=False),
    Column("version", Integer, nullable=False),
    Column("op", String(16), nullable=False),  # create | update | deprecate | merge | delete
    Column("type", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("source_sessions", JSON, nullable=False),
    Column("observed_at", UTCDateTime, nullable=False),
    Column("status", String(16), nullable=False),
    Column("merged_into", MEMORY_ID),
    Column("reason", Text),
    Column("stage", String(32), nullable=False),
    Column("day", Date),  # the partition of the stage run (None outside sleep)
    # Deep sleep's round; on a rebuild row (stage sleep_rebuild) deep_sleep when it put back the
    # state before that day's deep sleep (None: before its light sleep).
    Column("round", String(16)),
    Column("at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_semantic_versions_memory", "memory_id", "version"),
    Index("ix_semantic_versions_world_day", "world_id", "day"),
)

# The self layer: six named blocks per world (names from configuration), e.g. autobiography_summary.
self_blocks = Table(
    "self_blocks",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("content", Text, nullable=False),
    Column("updated_by", String(64), nullable=False),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
)

# Pinned facts: the top 20 (by priority, then age) go into every sleep stage's system prompt.
pinned_facts = Table(
    "pinned_facts",
    metadata,
    Column("fact_id", Integer, primary_key=True, autoincrement=True),
    Column("world_id", ID, nullable=False),
    Column("content", Text, nullable=False),
    Column("priority", Integer, nullable=False, default=0),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    UniqueConstraint("world_id", "content", name="uq_pinned_world_content"),
)

# Append-only narratives (autobiography phase A): created or deprecated, never rewritten.
autobiographical_memories = Table(
    "autobiographical_memories",
    metadata,
    Column("memory_id", MEMORY_ID, primary_key=True),
    Column("world_id", ID, nullable=False),
    Column("narrative", Text, nullable=False),
    Column("significance", Integer, nullable=False),
    Column("kind", String(16), nullable=False),  # event | milestone | turning_point
    Column("period", String(32)),
    Column("source_memory_ids", JSON, nullable=False),
    Column("status", String(16), nullable=False),
    Column("reason", Text),
    Column("created_day", Date, nullable=False),
    Column("deprecated_day", Date),  # the partition whose run deprecated it: a rebuild of it undoes that
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
    Index("ix_autobiographical_world_status", "world_id", "status"),
)

# The active set of each world after the day's deep sleep: any two days can be diffed.
semantic_memory_snapshots = Table(
    "semantic_memory_snapshots",
    metadata,
    Column("day", Date, primary_key=True),
    Column("world_id", ID, primary_key=True),
    Column("memory_id", MEMORY_ID, primary_key=True),
    Column("type", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("source_sessions", JSON, nullable=False),
    Column("observed_at", UTCDateTime, nullable=False),
)

# One state record per stage run and world (the seed's light_sleep_state.json, for every stage).
sleep_runs = Table(
    "sleep_runs",
    metadata,
    Column("stage", String(32), primary_key=True),
    Column("day", Date, primary_key=True),
    Column("world_id", ID, primary_key=True),
    Column("status", String(16), nullable=False),  # done | failed | stale | refused | partial (RunStatus)
    Column("input_fp", String(64)),
    # What it ran with: a record of another model or prompt version is not reused (null: before they were kept).
    Column("model", String(256)),
    Column("prompt_version", String(64)),
    Column("sessions", Integer, nullable=False, default=0),
    Column("sessions_truncated", Integer, nullable=False, default=0),
    Column("input_chars", Integer, nullable=False, default=0),
    Column("llm_calls", Integer, nullable=False, default=0),
    Column("tool_calls", Integer, nullable=False, default=0),
    Column("applied", Integer, nullable=False, default=0),
    Column("rejected", Integer, nullable=False, default=0),
    Column("created", Integer, nullable=False, default=0),
    Column("detail", JSON, nullable=False),
    Column("finished_at", UTCDateTime, nullable=False, default=now_utc),
    # A place's look at the places after it (rebuild.ahead, any_done_after, mark_stale) is by day:
    # the key leads with stage, so without this each of them read the whole history.
    Index("ix_sleep_runs_day_stage", "day", "stage"),
)
