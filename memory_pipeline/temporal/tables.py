"""Seed 000 tables: conversation day chunks, per-world day/month/year rows, peer-roll warm-ups."""

from __future__ import annotations

from sqlalchemy import JSON, Column, Date, ForeignKey, Index, Integer, String, Table, Text, UniqueConstraint

from memory_pipeline.lib.store.tables import ID, UTCDateTime, metadata, now_utc

# Seed 000 `conversations.temporal_day`, one row per chunk: append-only within a CST day.
temporal_day_chunks = Table(
    "temporal_day_chunks",
    metadata,
    Column("chunk_id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", ID, ForeignKey("conversations.conversation_id"), nullable=False),
    Column("world_id", ID, nullable=False),
    Column("cst_date", Date, nullable=False),
    Column("bucket", UTCDateTime, nullable=False),  # half-hour bucket start
    Column("at", UTCDateTime, nullable=False),  # the bucket end, where the chunk takes effect (peer fp)
    Column("summary", Text, nullable=False),
    Column("watermark_message_id", ID, nullable=False),
    Column("watermark_at", UTCDateTime, nullable=False),
    Column("source_ids", JSON, nullable=False),
    Column("model", String(256), nullable=False),
    # 0 for the tick's chunk of a bucket; 1, 2, ... for further chunks appended when messages of an
    # already-chunked bucket arrive late (append-only: an earlier chunk is never rewritten).
    Column("seq", Integer, nullable=False, default=0, server_default="0"),
    UniqueConstraint("conversation_id", "cst_date", "bucket", "seq", name="uq_chunk_conversation_bucket_seq"),
    Index("ix_chunks_world_date", "world_id", "cst_date"),
)

# Seed 000 per-world day/month/year entity rows.
temporal_summaries = Table(
    "temporal_summaries",
    metadata,
    Column("summary_id", Integer, primary_key=True, autoincrement=True),
    Column("world_id", ID, ForeignKey("worlds.world_id"), nullable=False),
    Column("window", String(8), nullable=False),
    Column("period_start", Date, nullable=False),
    Column("content", Text, nullable=False, default=""),
    Column("empty_reason", String(32)),
    Column("source_count", Integer, nullable=False, default=0),
    Column("source_kind", String(16), nullable=False),  # message | day | month
    Column("source_ids", JSON, nullable=False),
    Column("material_fp", String(64)),
    Column("model", String(256)),
    Column("prompt_version", String(64)),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
    UniqueConstraint("world_id", "window", "period_start", name="uq_temporal_world_window_period"),
    Index("ix_temporal_window_period", "window", "period_start"),
)

# Background warm-up requests from the read path (which may not call an LLM itself).
warmup_requests = Table(
    "warmup_requests",
    metadata,
    Column("request_id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),  # peer_roll
    Column("world_id", ID, nullable=False),
    Column("cst_date", Date, nullable=False),
    Column("bucket", UTCDateTime, nullable=False),
    Column("viewer_conversation_id", ID, nullable=False),
    Column("sources_fp", String(32), nullable=False),
    Column("requested_at", UTCDateTime, nullable=False, default=now_utc),
    Column("done_at", UTCDateTime),
    UniqueConstraint("kind", "world_id", "bucket", "sources_fp", name="uq_warmup_key"),
)

# The record of what each period's rows were built from: when the period was last materialized and
# the newest ingest among the events it read. Events ingested later (late data, a new world) make
# the period stale: the reconcile sensor and `memory-pipeline reconcile` request exactly those.
temporal_period_runs = Table(
    "temporal_period_runs",
    metadata,
    Column("window", String(8), primary_key=True),
    Column("period_start", Date, primary_key=True),
    Column("materialized_at", UTCDateTime, nullable=False),
    Column("material_ingested_at", UTCDateTime),  # newest messages.ingested_at seen (day) or None
    Column("worlds", Integer, nullable=False, default=0),
    # What the rows were built with: a run finding the same (and no newer input) skips the period.
    Column("model", String(256)),
    Column("prompt_version", String(64)),
    Column("config_fp", String(64)),
)
