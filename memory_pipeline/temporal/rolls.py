"""Rolls (seed 000): system rolls past_days / past_months / past_years and per-bucket peer rolls,
kept in the disposable cache (Redis, in-process fallback), plus the background warm-ups the read
path requests on a miss."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime

from sqlalchemy import Connection, RowMapping, func, select

from memory_pipeline.lib.llm import LLMHardFailure
from memory_pipeline.lib.store import Store, retry_transient
from memory_pipeline.lib.timeutil import day_bounds, utcnow
from memory_pipeline.temporal import logic
from memory_pipeline.temporal.chunks import ChunkRow, closed_bucket_chunks
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.context import TemporalContext, buffered_llm, summarize
from memory_pipeline.temporal.tables import temporal_summaries, warmup_requests


@dataclass
class RollResult:
    regenerated: int = 0
    reused: int = 0
    empty: int = 0
    failures: dict[str, str] = field(default_factory=dict)


def _roll_max_chars(cfg: TemporalSummaryConfig, kind: str) -> int:
    return {
        "past_days": cfg.global_day_max_chars,
        "past_months": cfg.month_max_chars,
        "past_years": cfg.year_max_chars,
    }[kind]


def regenerate_system_rolls(
    ctx: TemporalContext,
    today: date,
    world_ids: list[str] | None = None,
    kinds: tuple[str, ...] = logic.SYS_ROLL_KINDS,
    force: bool = False,
) -> RollResult:
    """Rebuild each world's system rolls for ``today``, reusing a cached one whose sources_fp
    still matches its source rows."""
    result = RollResult()
    if not ctx.cfg.enabled:
        return result
    done: set[str] = set()  # slots settled by an attempt before a transient database error
    with buffered_llm(ctx):  # the ledger and cache rows of every call in one transaction at the end
        retry_transient(
            lambda: _system_rolls_once(ctx, result, done, today, world_ids, kinds, force), what=f"system rolls {today}"
        )
    return result


def _system_rolls_once(
    ctx: TemporalContext,
    result: RollResult,
    done: set[str],
    today: date,
    world_ids: list[str] | None,
    kinds: tuple[str, ...],
    force: bool,
) -> None:
    result.failures = {}
    for kind in kinds:
        window = logic.SYS_ROLL_WINDOW[logic.RollKind(kind)]
        with ctx.store.connect() as conn:
            by_world = roll_sources(conn, kind, today, world_ids)
        for world_id, src in sorted(by_world.items()):
            fp = roll_sources_fp(src)
            key = logic.sys_roll_key(ctx.cfg.redis_key_prefix, world_id, kind, today)
            if key in done:
                continue
            cached = ctx.cache.get_json(key)
            if cached and cached.get("sources_fp") == fp and not force:
                result.reused += 1
                done.add(key)
                continue
            fmt = {"day": "%Y-%m-%d", "month": "%Y-%m", "year": "%Y"}[window]
            material = "\n".join(f"{r['period_start']:{fmt}}: {r['content']}" for r in src)
            try:
                summary = summarize(ctx, kind, material, _roll_max_chars(ctx.cfg, kind), world_id)
            except LLMHardFailure as exc:
                result.failures[f"{world_id}:{kind}"] = str(exc)
                continue
            if not summary:
                result.empty += 1
                done.add(key)
                continue
            ctx.cache.set_json(
                key,
                {"summary": summary, "sources_fp": fp, "created_at": utcnow().isoformat()},
                logic.SYS_ROLL_TTL_SECONDS[logic.RollKind(kind)],
            )
            done.add(key)
            result.regenerated += 1


def roll_sources(
    conn: Connection, kind: str, today: date, world_ids: list[str] | None = None
) -> dict[str, list[RowMapping]]:
    """Per world, the non-empty rows a system roll covers on ``today`` (newest first)."""
    window, first, end = logic.sys_roll_scope(kind, today)
    t = temporal_summaries.c
    q = (
        select(t.world_id, t.window, t.period_start, t.content)
        .where(t.window == window, t.period_start < end)
        .where(t.empty_reason.is_(None), t.content != "")
        .order_by(t.world_id, t.period_start.desc())
    )
    if first is not None:
        q = q.where(t.period_start >= first)
    if world_ids is not None:
        q = q.where(t.world_id.in_(world_ids))
    by_world: dict[str, list[RowMapping]] = defaultdict(list)
    for r in conn.execute(q).mappings():
        by_world[r["world_id"]].append(r)
    return by_world


def roll_sources_fp(rows: Sequence[RowMapping]) -> str:
    return logic.rows_fp((r["window"], r["period_start"], r["content"]) for r in rows)


# --- peer rolls (Redis: peer_roll:{cst_date}:{bucket}:{sources_fp}) ---------------------------


def peer_roll_summary(ctx: TemporalContext, world_id: str, sources: list[ChunkRow]) -> str:
    """One line for a bucket's peer chunks: a single short source is used as is, more go to the LLM."""
    texts = [s["summary"] for s in sources if s["summary"].strip()]
    joined = " / ".join(texts)
    if len(joined) <= ctx.cfg.peer_roll_max_chars:
        return joined
    material = "\n".join(f"- {t}" for t in texts)
    return summarize(ctx, "peer_roll", material, ctx.cfg.peer_roll_max_chars, world_id)


@dataclass
class PeerWarmResult:
    buckets: int = 0
    warmed: int = 0
    reused: int = 0
    requests_done: int = 0
    failures: dict[str, str] = field(default_factory=dict)


def _warm_one(
    ctx: TemporalContext,
    result: PeerWarmResult,
    done: set[str],
    world_id: str,
    day: date,
    bucket: datetime,
    sources: list[ChunkRow],
    viewer: str | None,
) -> bool:
    """Cache the peer roll of one bucket as ``viewer`` sees it, unless cached already; False when
    the model failed (the roll stays a miss)."""
    peers = [s for s in sources if s["conversation_id"] != viewer]
    if not peers:
        return True
    fp = logic.peer_sources_fp(((s["conversation_id"], s["at"], s["summary"]) for s in sources), viewer)
    key = logic.peer_roll_key(ctx.cfg.redis_key_prefix, world_id, day, bucket.astimezone(ctx.tz), fp)
    if key in done:
        return True
    if key in result.failures:
        return False
    if ctx.cache.get_json(key):
        result.reused += 1
        done.add(key)
        return True
    try:
        summary = peer_roll_summary(ctx, world_id, peers)
    except LLMHardFailure as exc:
        result.failures[key] = str(exc)
        return False
    ctx.cache.set_json(
        key, {"summary": summary, "sources_fp": fp, "created_at": utcnow().isoformat()}, ctx.cfg.peer_roll_ttl_seconds
    )
    done.add(key)  # only once written: a database error before that redoes the key
    result.warmed += 1
    return True


def warm_peer_rolls(ctx: TemporalContext, day: date, now: datetime | None = None) -> PeerWarmResult:
    """Precompute peer rolls of every closed bucket for every viewer active that day (and for an
    outside viewer), then serve the read path's pending warm-up requests for that day."""
    now = min(now or utcnow(), utcnow(), day_bounds(day, ctx.tz)[1])  # never a future "now"
    result = PeerWarmResult()
    if not ctx.cfg.enabled:
        return result
    done: set[str] = set()  # keys written or found by an attempt before a transient database error
    with buffered_llm(ctx):  # the ledger and cache rows of every call in one transaction at the end
        retry_transient(lambda: _warm_once(ctx, result, done, day, now), what=f"peer rolls {day.isoformat()}")
    return result


def _warm_once(ctx: TemporalContext, result: PeerWarmResult, done: set[str], day: date, now: datetime) -> None:
    result.buckets, result.failures = 0, {}
    with ctx.store.connect() as conn:
        chunks = closed_bucket_chunks(conn, None, day, now)
        pending = (
            conn.execute(
                select(warmup_requests).where(
                    warmup_requests.c.kind == "peer_roll",
                    warmup_requests.c.cst_date == day,
                    warmup_requests.c.done_at.is_(None),
                )
            )
            .mappings()
            .all()
        )
    by_world_bucket: dict[tuple[str, datetime], list[ChunkRow]] = defaultdict(list)
    viewers: dict[str, set[str]] = defaultdict(set)
    for c in chunks:
        by_world_bucket[(c["world_id"], c["bucket"])].append(c)
        viewers[c["world_id"]].add(c["conversation_id"])
    for (world_id, bucket), sources in sorted(by_world_bucket.items()):
        result.buckets += 1
        for viewer in sorted(viewers[world_id]) + [None]:
            _warm_one(ctx, result, done, world_id, day, bucket, sources, viewer)
    for req in pending:
        sources = by_world_bucket.get((req["world_id"], req["bucket"]), [])
        if not _warm_one(
            ctx, result, done, req["world_id"], day, req["bucket"], sources, req["viewer_conversation_id"] or None
        ):
            continue  # stays pending for the next warm-up
        with ctx.store.begin() as conn:
            conn.execute(
                warmup_requests.update()
                .where(warmup_requests.c.request_id == req["request_id"])
                .values(done_at=utcnow())
            )
        result.requests_done += 1


def pending_warmup_days(store: Store) -> list[tuple[date, int]]:
    """(cst_date, newest pending request id) per day with pending warm-up requests."""
    with store.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                select(warmup_requests.c.cst_date, func.max(warmup_requests.c.request_id))
                .where(warmup_requests.c.done_at.is_(None))
                .group_by(warmup_requests.c.cst_date)
                .order_by(warmup_requests.c.cst_date)
            ).all()
        ]
