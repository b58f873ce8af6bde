"""Platform tables on the shared metadata: the raw events every domain reads (worlds,
conversations, messages: append-only, never deleted), the LLM ledger and response cache, the
Inbox, and the partition leases every domain's runs take. Each domain declares its own tables on the same ``metadata`` in ``<domain>/tables.py``;
the schema itself is created by the migrations (``memory-pipeline db upgrade``)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    func,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator

from memory_pipeline.lib.kinds import CRON_PLATFORM

metadata = MetaData()


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes in, aware UTC datetimes out, on SQLite and PostgreSQL alike."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} written to the store")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is UTC:  # PostgreSQL in a UTC session: as is, the common case
            return value
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def now_utc() -> datetime:
    return datetime.now(UTC)


ID = String(128)

worlds = Table(
    "worlds",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("name", String(256)),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
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
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    # Bumped by the ORM-style onupdate on any UPDATE that does not pin it: the chunk writer never
    # updates this table at all (seed: writing temporal_day must not bump updated_at).
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc, onupdate=now_utc),
)


def counted_conversations() -> ColumnElement[bool]:
    """Seed 000's counted conversations (计入): debug = false and platform ≠ cron, whatever its case."""
    return and_(conversations.c.debug.is_(False), func.lower(conversations.c.platform) != CRON_PLATFORM)


messages = Table(
    "messages",
    metadata,
    Column("message_id", ID, primary_key=True),
    Column("conversation_id", ID, ForeignKey("conversations.conversation_id"), nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False, default=""),
    Column("tool_calls", JSON),
    Column("at", UTCDateTime, nullable=False),  # payload timestamp, not ingest time
    Column("ingested_at", UTCDateTime, nullable=False, default=now_utc),
    Column("source", String(1024)),  # file:line it came from
    # true: the line gave no timestamp, so ``at`` is the time of its ingest (seed 001: 时间不明确用接入时间)
    Column("at_from_ingest", Boolean),
    Index("ix_messages_conversation_at", "conversation_id", "at"),
    Index("ix_messages_at", "at"),
)


llm_ledger = Table(
    "llm_ledger",
    metadata,
    Column("call_id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("at", UTCDateTime, nullable=False, default=now_utc),
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
    Column("outcome", String(32), nullable=False),  # ok | cache_hit | error | breaker_open
    Column("error", Text),
    Column("cache_key", String(64)),
    # provider | estimated (kinds.TokensSource); null on rows without tokens (cache hits, errors)
    Column("tokens_source", String(16)),
    # The model's finish reason (stop, tool_calls, length = truncated at max_tokens, ...)
    Column("finish_reason", String(32)),
    Column("max_tokens", Integer),  # output tokens asked for (null: the provider's default)
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
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
)

inbox = Table(
    "inbox",
    metadata,
    Column("inbox_id", Integer, primary_key=True, autoincrement=True),
    Column("subject", String(256), nullable=False),  # user:{world} | agent:{world}
    Column("source_ref", String(256), nullable=False),
    Column("title", String(512), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    UniqueConstraint("subject", "source_ref", name="uq_inbox_subject_ref"),
)

# Write-behind of the key-value cache: a write Redis could not take (unreachable) is kept here with
# its absolute expiry and written through once Redis answers again (lib.cache.flush_pending); one
# row per key, the newest write wins. Expired rows are dropped, never written.
pending_cache_writes = Table(
    "pending_cache_writes",
    metadata,
    Column("key", String(1024), primary_key=True),
    Column("value", JSON, nullable=False),
    Column("ttl_seconds", Integer, nullable=False),  # as asked; the write-back honours expires_at
    Column("expires_at", UTCDateTime, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Column("reason", String(512), nullable=False),
    Index("ix_pending_cache_writes_created_at", "created_at"),
)


# Who is working on one partition of one asset right now (lib.store.leases): one row per (asset,
# partition) while a run holds it, renewed while it works, deleted when it is done. A row past
# expires_at belongs to a dead worker and is taken over.
partition_leases = Table(
    "partition_leases",
    metadata,
    Column("asset", String(256), primary_key=True),
    Column("partition", String(256), primary_key=True),
    Column("holder", String(256), nullable=False),  # a run id
    Column("acquired_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    # The process holding it (None: taken before these were recorded): a holder on this host whose
    # pid is gone died without releasing it (kill -9), and is taken over at once.
    Column("host", String(256)),
    Column("pid", Integer),
)


# Caller-given request ids of the writes a client may repeat (lib.store.requests): one row per
# (world, kind of write, request id), written in the transaction of the write it names, holding
# that write's result; a repeated request gets this result back and writes nothing.
request_ids = Table(
    "request_ids",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("kind", String(64), primary_key=True),
    Column("request_id", ID, primary_key=True),
    Column("result", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Column("fingerprint", String(64)),  # of the request's arguments (migration 0034; null: recorded before)
)


# What the store itself was built under, one row a setting (lib.store.calendar): the calendar zone
# (MEMORY_TIMEZONE) its days, weeks, months and partitions are cut in, recorded at its first open.
store_settings = Table(
    "store_settings",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
    Column("recorded_at", UTCDateTime, nullable=False, default=now_utc),
)
