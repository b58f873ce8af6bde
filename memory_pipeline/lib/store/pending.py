"""The cache's write-behind in the store (``pending_cache_writes``): a key-value write Redis could
not take, with its absolute expiry, until ``lib.cache.flush_pending`` writes it through. One row
per key: a newer write of the same key replaces the older one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, delete, func, select

from memory_pipeline.lib.jsontypes import JSONMapping
from memory_pipeline.lib.store.db import Store, upsert
from memory_pipeline.lib.store.tables import now_utc, pending_cache_writes

_REASON_CHARS = 512  # the column's length
t = pending_cache_writes.c


@dataclass(frozen=True)
class PendingWrite:
    key: str
    value: dict[str, Any]
    expires_at: datetime
    created_at: datetime


@dataclass(frozen=True)
class PendingSummary:
    count: int
    expired: int  # dropped, not written, at the next write-back
    oldest: datetime | None
    newest: datetime | None
    last_reason: str | None


def record(
    store: Store, key: str, value: JSONMapping, ttl_seconds: int, reason: str, now: datetime | None = None
) -> None:
    """Keep a write for Redis: it expires ``ttl_seconds`` after now, as it would have in Redis."""
    now = now or now_utc()
    with store.begin() as conn:
        upsert(
            conn,
            pending_cache_writes,
            [
                {
                    "key": key,
                    "value": value,
                    "ttl_seconds": ttl_seconds,
                    "expires_at": now + timedelta(seconds=ttl_seconds),
                    "created_at": now,
                    "reason": reason[:_REASON_CHARS],
                }
            ],
            keys=["key"],
        )


def discard(store: Store, key: str) -> int:
    """Forget a pending write of ``key`` (Redis took a newer value of it directly)."""
    with store.begin() as conn:
        return max(conn.execute(delete(pending_cache_writes).where(t.key == key)).rowcount, 0)


def exists(store: Store) -> bool:
    with store.connect() as conn:
        return conn.execute(select(t.key).limit(1)).first() is not None


def drop_expired(store: Store, now: datetime | None = None) -> int:
    with store.begin() as conn:
        return max(conn.execute(delete(pending_cache_writes).where(t.expires_at <= (now or now_utc()))).rowcount, 0)


def oldest(store: Store, limit: int) -> list[PendingWrite]:
    """Up to ``limit`` pending writes, oldest first."""
    with store.connect() as conn:
        rows = conn.execute(
            select(t.key, t.value, t.expires_at, t.created_at).order_by(t.created_at, t.key).limit(limit)
        ).all()
    return [PendingWrite(r[0], r[1], r[2], r[3]) for r in rows]


def done(store: Store, write: PendingWrite) -> int:
    """Delete a written (or expired) pending write, unless a newer write of its key replaced it
    meanwhile: that one stays for the next write-back."""
    with store.begin() as conn:
        q = delete(pending_cache_writes).where(t.key == write.key, t.created_at == write.created_at)
        return max(conn.execute(q).rowcount, 0)


def summary(store: Store, now: datetime | None = None) -> PendingSummary:
    now = now or now_utc()
    with store.connect() as conn:
        count, expired, first, last = conn.execute(
            select(
                func.count(),
                func.coalesce(func.sum(case((t.expires_at <= now, 1), else_=0)), 0),
                func.min(t.created_at),
                func.max(t.created_at),
            )
        ).one()
        reason = conn.execute(select(t.reason).order_by(t.created_at.desc()).limit(1)).scalar()
    return PendingSummary(int(count), int(expired), first, last, reason)
