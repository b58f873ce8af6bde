"""The read path: what an agent runtime injects. It only reads the store and the roll cache and
never calls an LLM; a peer-roll miss concatenates, truncates and asks for a background warm-up."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Row, select

from memory_pipeline.lib.cache import KVCache
from memory_pipeline.lib.jsontypes import JSONObject
from memory_pipeline.lib.store import Store, upsert
from memory_pipeline.lib.store.tables import conversations, inbox, messages
from memory_pipeline.lib.timeutil import bucket_end, bucket_label, day_bounds, local_date, require_aware, utcnow
from memory_pipeline.temporal import logic
from memory_pipeline.temporal.chunks import view_chunks
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.tables import warmup_requests


@dataclass
class TemporalView:
    world_id: str
    viewer_conversation_id: str | None
    at: datetime
    system_block: str
    system_truncated: bool
    rolls: dict[str, str | None]
    peer_messages: list[dict[str, Any]] = field(default_factory=list)
    warmups_requested: int = 0


def system_roll_keys(cfg: TemporalSummaryConfig, world_id: str, today: date) -> dict[str, str]:
    return {kind: logic.sys_roll_key(cfg.redis_key_prefix, world_id, kind, today) for kind in logic.SYS_ROLL_KINDS}


def system_block(
    store: Store,
    cache: KVCache,
    cfg: TemporalSummaryConfig,
    world_id: str,
    at: datetime,
    tz: ZoneInfo,
    cached: dict[str, dict[str, Any] | None] | None = None,
    *,
    record: bool = True,
) -> tuple[logic.SystemBlock, dict[str, str | None]]:
    """The system segment from the cached rolls (``cached``: values already fetched by key, as
    ``temporal_view`` does; otherwise fetched here in one round trip). A truncated segment is
    reported in the inbox unless ``record`` is False."""
    today = local_date(require_aware(at, "at"), tz)
    keys = system_roll_keys(cfg, world_id, today)
    if cached is None:
        cached = cache.get_many_json(list(keys.values()))
    rolls: dict[str, str | None] = {}
    for kind, key in keys.items():
        value = cached.get(key)
        summary = value.get("summary") if value else None
        rolls[kind] = summary if isinstance(summary, str) else None  # a roll's summary is text or None
    block = logic.assemble_system_block(rolls, cfg.system_prompt_max_chars)
    if block.truncated and record:
        ref = logic.truncation_source_ref(today)
        body = (
            f"The <temporal_summary> system segment for {world_id} exceeded system_prompt_max_chars="
            f"{cfg.system_prompt_max_chars} on {today.isoformat()} and was truncated."
        )
        with store.begin() as conn:
            upsert(
                conn,
                inbox,
                [
                    {
                        "subject": f"{who}:{world_id}",
                        "source_ref": ref,
                        "title": "Temporal summary truncated",
                        "body": body,
                    }
                    for who in ("user", "agent")
                ],
                keys=["subject", "source_ref"],
                update=[],
            )
    return block, rolls


@lru_cache(maxsize=4096)
def _peer_fp(sources: tuple[tuple[str, datetime, str], ...], viewer_conversation_id: str | None) -> str:
    """logic.peer_sources_fp, remembered by its whole input (a bucket's chunks and the viewer): every
    view of a bucket hashes the same chunks again otherwise. A changed chunk is another input."""
    return logic.peer_sources_fp(sources, viewer_conversation_id)


@dataclass
class _PeerBucket:
    bucket: datetime
    local_bucket: datetime
    peers: list[Row[Any]]  # (conversation_id, bucket, at, summary)
    fp: str
    key: str


def _peer_buckets(
    store: Store,
    cfg: TemporalSummaryConfig,
    world_id: str,
    viewer_conversation_id: str | None,
    at: datetime,
    tz: ZoneInfo,
) -> list[_PeerBucket]:
    """Today's closed buckets with peer chunks, each with its roll's key (one statement, on the
    store's read-only connection)."""
    today = local_date(require_aware(at, "at"), tz)
    chunks = store.read(lambda conn: view_chunks(conn, world_id, today, at))
    by_bucket: dict[datetime, list[Row[Any]]] = {}
    for c in chunks:
        by_bucket.setdefault(c.bucket, []).append(c)
    out = []
    for bucket, sources in sorted(by_bucket.items()):
        peers = [s for s in sources if s.conversation_id != viewer_conversation_id]
        if not peers:
            continue
        local_bucket = bucket.astimezone(tz)
        fp = _peer_fp(tuple((s.conversation_id, s.at, s.summary) for s in sources), viewer_conversation_id)
        key = logic.peer_roll_key(cfg.redis_key_prefix, world_id, today, local_bucket, fp)
        out.append(_PeerBucket(bucket, local_bucket, peers, fp, key))
    return out


def peer_messages(
    store: Store,
    cache: KVCache,
    cfg: TemporalSummaryConfig,
    world_id: str,
    viewer_conversation_id: str | None,
    at: datetime,
    tz: ZoneInfo,
    *,
    buckets: list[_PeerBucket] | None = None,
    cached: dict[str, dict[str, Any] | None] | None = None,
    record: bool = True,
) -> tuple[list[dict[str, Any]], int]:
    """One runtime-only assistant message per closed bucket of today that has peer chunks (all of
    the bucket's chunks, seq 0, 1, ...), placed at the bucket's end. Chunks are append-only, so an
    older bucket's insertion stays byte-identical unless a late arrival appends a chunk to that very
    bucket: then its sources_fp, and so its roll, changes once. The rolls come in one round trip.
    Each miss files a warm-up request in the store unless ``record`` is False; the count returned is
    the misses."""
    today = local_date(require_aware(at, "at"), tz)
    if buckets is None:
        buckets = _peer_buckets(store, cfg, world_id, viewer_conversation_id, at, tz)
    if cached is None:
        cached = cache.get_many_json([b.key for b in buckets])
    out, requests = [], []
    for b in buckets:
        hit_value = cached.get(b.key)
        if hit_value:
            content, hit = hit_value["summary"], True
        else:
            content, hit = logic.concat_peer_chunks([p.summary for p in b.peers], cfg.peer_roll_max_chars), False
            requests.append(
                {
                    "kind": "peer_roll",
                    "world_id": world_id,
                    "cst_date": today,
                    "bucket": b.bucket,
                    "viewer_conversation_id": viewer_conversation_id or "",
                    "sources_fp": b.fp,
                    "requested_at": utcnow(),
                    "done_at": None,
                }
            )
        out.append(
            {
                "role": "assistant",
                "name": logic.PEER_MESSAGE_NAME,
                "content": content,
                "at": bucket_end(b.local_bucket).isoformat(),
                "bucket": bucket_label(b.local_bucket),
                "cache": "hit" if hit else "miss",
            }
        )
    if requests and record:
        with store.begin() as conn:
            # A roll served before but gone again (TTL, Redis restart) is requested anew.
            upsert(
                conn,
                warmup_requests,
                requests,
                keys=["kind", "world_id", "bucket", "sources_fp"],
                update=["requested_at", "done_at"],
            )
    return out, len(requests)


def temporal_view(
    store: Store,
    cache: KVCache,
    cfg: TemporalSummaryConfig,
    world_id: str,
    viewer_conversation_id: str | None,
    at: datetime,
    tz: ZoneInfo,
    *,
    record: bool = True,
) -> TemporalView:
    """The system segment and the peer insertions of one view: one query for today's chunks,
    then every roll it needs (system and peer) in one cache round trip. ``record=False`` writes
    nothing to the store (a read-only caller, the memory server): no warm-up request for a peer-roll
    miss (the */30 tick warms every closed bucket for each viewer of the day and for none) and no
    inbox warning for a truncated segment; ``warmups_requested`` then counts the misses."""
    today = local_date(require_aware(at, "at"), tz)
    buckets = _peer_buckets(store, cfg, world_id, viewer_conversation_id, at, tz)
    sys_keys = system_roll_keys(cfg, world_id, today)
    cached = cache.get_many_json([*sys_keys.values(), *(b.key for b in buckets)])
    block, rolls = system_block(store, cache, cfg, world_id, at, tz, cached=cached, record=record)
    peers, warmups = peer_messages(
        store, cache, cfg, world_id, viewer_conversation_id, at, tz, buckets=buckets, cached=cached, record=record
    )
    return TemporalView(world_id, viewer_conversation_id, at, block.text, block.truncated, rolls, peers, warmups)


def conversation_owner(store: Store, conversation_id: str) -> str | None:
    """The world a conversation belongs to, None when none has been ingested: a viewer that is no
    conversation of its world (an agent's first turn, a mistyped id, another world's) is read as
    a new conversation, every conversation of the world a peer."""
    c = conversations.c
    with store.connect() as conn:
        owner: str | None = conn.execute(select(c.world_id).where(c.conversation_id == conversation_id)).scalar()
    return owner


def viewer_timeline(store: Store, view: TemporalView, tz: ZoneInfo) -> list[JSONObject]:
    """The viewer's messages of today up to ``at`` with the peer insertions merged at bucket_end."""
    today = local_date(view.at, tz)
    start, _ = day_bounds(today, tz)
    items: list[JSONObject] = []
    if view.viewer_conversation_id:
        with store.connect() as conn:
            rows = (
                conn.execute(
                    select(messages.c.role, messages.c.content, messages.c.tool_calls, messages.c.at)
                    .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
                    .where(
                        messages.c.conversation_id == view.viewer_conversation_id,
                        conversations.c.world_id == view.world_id,
                        messages.c.at >= start,
                        messages.c.at <= view.at,
                    )
                )
                .mappings()
                .all()
            )
        items = [
            {
                "role": r["role"],
                "content": r["content"],
                "tool_calls": r["tool_calls"],
                "at": r["at"].astimezone(tz).isoformat(),
            }
            for r in rows
        ]
    items.extend(view.peer_messages)
    # A peer block at bucket_end sorts before a viewer message at the same instant.
    return sorted(items, key=lambda m: (datetime.fromisoformat(str(m["at"])), 0 if m.get("name") else 1))
