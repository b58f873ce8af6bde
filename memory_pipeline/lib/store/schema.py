"""The operational store: raw events (append-only) and every derived row, as SQLAlchemy Core tables.

Raw tables (worlds, conversations, messages) are never updated by derivations and never deleted.
Derived tables are upserted on their natural keys, so re-materializing a partition replaces
exactly that partition's rows.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator

metadata = MetaData()


class UTCDateTime(TypeDecorator):
    """Aware datetimes in, aware UTC datetimes out, on SQLite and PostgreSQL alike."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} written to the store")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _now() -> datetime:
    return datetime.now(UTC)


ID = String(128)

worlds = Table(
    "worlds",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("name", String(256)),
    Column("created_at", UTCDateTime, nullable=False, default=_now),
    # Earliest message timestamp seen: no placeholder rows are written for periods before it.
    Column("first_event_at", UTCDateTime),
)

conversations = Table(
    "conversations",
    metadata,
    Column("conversation_id", ID, primary_key=True),
    Column("world_id", ID, ForeignKey("worlds.world_id"), nullable=False, index=True),
    Column("platform", String(64), nullable=False),
    Column("debug", Boolean, nullable=False, default=False),
    Column("title", String(512)),
    Column("created_at", UTCDateTime, nullable=False, default=_now),
    # Bumped by the ORM-style onupdate on any UPDATE that does not pin it: the chunk writer never
    # updates this table at all (seed: writing temporal_day must not bump updated_at).
    Column("updated_at", UTCDateTime, nullable=False, default=_now, onupdate=_now),
)

messages = Table(
    "messages",
    metadata,
    Column("message_id", ID, primary_key=True),
    Column("conversation_id", ID, ForeignKey("conversations.conversation_id"), nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False, default=""),
    Column("tool_calls", JSON),
    Column("at", UTCDateTime, nullable=False),  # payload timestamp, not ingest time
    Column("ingested_at", UTCDateTime, nullable=False, default=_now),
    Column("source", String(1024)),  # file:line it came from
    Index("ix_messages_conversation_at", "conversation_id", "at"),
    Index("ix_messages_at", "at"),
)

ingest_batches = Table(
    "ingest_batches",
    metadata,
    Column("batch_id", Integer, primary_key=True, autoincrement=True),
    Column("source", String(1024), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("lines", Integer, nullable=False),
    Column("inserted", Integer, nullable=False),
    Column("duplicates", Integer, nullable=False),
    Column("rejected", Integer, nullable=False),
    Column("at", UTCDateTime, nullable=False, default=_now),
)

# Seed 000 `conversations.temporal_day`, one row per chunk: append-only within a CST day.
temporal_day_chunks = Table(
    "temporal_day_chunks",
    metadata,
    Column("chunk_id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", ID, ForeignKey("conversations.conversation_id"), nullable=False),
    Column("world_id", ID, nullable=False),
    Column("cst_date", Date, nullable=False),
    Column("bucket", UTCDateTime, nullable=False),  # half-hour bucket start
    Column("at", UTCDateTime, nullable=False),  # when the tick wrote it
    Column("summary", Text, nullable=False),
    Column("watermark_message_id", ID, nullable=False),
    Column("watermark_at", UTCDateTime, nullable=False),
    Column("source_ids", JSON, nullable=False),
    Column("model", String(256), nullable=False),
    UniqueConstraint("conversation_id", "cst_date", "bucket", name="uq_chunk_conversation_bucket"),
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
    Column("created_at", UTCDateTime, nullable=False, default=_now),
    Column("updated_at", UTCDateTime, nullable=False, default=_now),
    UniqueConstraint("world_id", "window", "period_start", name="uq_temporal_world_window_period"),
    Index("ix_temporal_window_period", "window", "period_start"),
)

llm_ledger = Table(
    "llm_ledger",
    metadata,
    Column("call_id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("at", UTCDateTime, nullable=False, default=_now),
    Column("asset", String(256)),
    Column("partition", String(256)),
    Column("task", String(64)),
    Column("world_id", ID),
    Column("model", String(256), nullable=False),
    Column("prompt_version", String(64)),
    Column("tokens_in", Integer, nullable=False, default=0),
    Column("tokens_out", Integer, nullable=False, default=0),
    Column("cost_usd", JSON),
    Column("latency_ms", Integer, nullable=False, default=0),
    Column("attempts", Integer, nullable=False, default=1),
    Column("outcome", String(32), nullable=False),  # ok | cache_hit | error
    Column("error", Text),
    Column("cache_key", String(64)),
    Index("ix_ledger_asset_partition", "asset", "partition"),
)

# Responses keyed by (model, prompt version, full prompt): an unchanged range costs no calls.
llm_cache = Table(
    "llm_cache",
    metadata,
    Column("cache_key", String(64), primary_key=True),
    Column("model", String(256), nullable=False),
    Column("prompt_version", String(64)),
    Column("response", Text, nullable=False),
    Column("tokens_in", Integer, nullable=False, default=0),
    Column("tokens_out", Integer, nullable=False, default=0),
    Column("created_at", UTCDateTime, nullable=False, default=_now),
)

inbox = Table(
    "inbox",
    metadata,
    Column("inbox_id", Integer, primary_key=True, autoincrement=True),
    Column("subject", String(256), nullable=False),  # user:{world} | agent:{world}
    Column("source_ref", String(256), nullable=False),
    Column("title", String(512), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=_now),
    UniqueConstraint("subject", "source_ref", name="uq_inbox_subject_ref"),
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
    Column("requested_at", UTCDateTime, nullable=False, default=_now),
    Column("done_at", UTCDateTime),
    UniqueConstraint("kind", "world_id", "bucket", "sources_fp", name="uq_warmup_key"),
)
