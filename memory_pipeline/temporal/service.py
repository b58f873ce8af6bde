"""Seed 000 operations over the store, the cache and the LLM client (no Dagster).

Every function takes a ``TemporalContext`` and a closed window; the Dagster assets call them per
partition key. Writes are idempotent: re-running a window rewrites only rows whose content,
empty_reason or sources changed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from sqlalchemy import func, select

from memory_pipeline.lib.cache import RollCache
from memory_pipeline.lib.llm import LLMClient, LLMHardFailure, LLMRequest
from memory_pipeline.lib.settings import TemporalSummaryConfig
from memory_pipeline.lib.store import Store, upsert
from memory_pipeline.lib.store.schema import (
    conversations,
    messages,
    temporal_day_chunks,
    temporal_summaries,
    warmup_requests,
    worlds,
)
from memory_pipeline.lib.text import short_hash, truncate
from memory_pipeline.lib.timeutil import bucket_end, day_bounds, expected_periods, local_date, period_bounds, utcnow
from memory_pipeline.temporal import logic, prompts
from memory_pipeline.temporal.logic import EmptyReason

MESSAGE_LINE_MAX_CHARS = 300


@dataclass
class TemporalContext:
    store: Store
    llm: LLMClient
    cache: RollCache
    cfg: TemporalSummaryConfig
    tz: ZoneInfo
    force_llm: bool = False  # bypass cached answers (fresh calls)


class PartitionFailure(RuntimeError):
    """Some worlds of a window hit an LLM hard failure: nothing was written for them."""

    def __init__(self, window: str, period: str, failures: dict[str, str]):
        self.failures = failures
        detail = "; ".join(f"{w}: {e}" for w, e in sorted(failures.items())[:5])
        super().__init__(f"{window} {period}: LLM hard failure for {len(failures)} world(s), no row written for them: {detail}")


@dataclass
class PeriodResult:
    window: str
    period_start: date
    worlds: int = 0
    written: int = 0  # rows inserted or changed
    unchanged: int = 0
    reused: int = 0  # summaries kept without a model call (same model, prompt and material)
    non_empty: int = 0
    placeholders: Counter = field(default_factory=Counter)
    failures: dict[str, str] = field(default_factory=dict)
    disabled: bool = False
    preview: list[tuple[str, str, str]] = field(default_factory=list)  # (world, period, content or reason)


def _llm(ctx: TemporalContext, task: str, material: str, max_chars: int, world_id: str | None) -> str:
    req = LLMRequest(
        task=task, system=prompts.spec(task, max_chars), user=material,
        prompt_version=prompts.PROMPT_VERSION, max_chars=max_chars, world_id=world_id,
    )
    return ctx.llm.complete(req, force=ctx.force_llm).text.strip()


def _line(at: datetime, role: str, content: str, tz: ZoneInfo) -> str:
    text = truncate(" ".join(content.split()), MESSAGE_LINE_MAX_CHARS)
    return f"[{at.astimezone(tz):%H:%M}] {role}: {text}"


def _day_messages(conn, d: date, tz: ZoneInfo, world_ids: list[str] | None = None):
    """Every message of eligible conversations timestamped in CST day ``d`` (by payload time,
    never by conversations.updated_at)."""
    start, end = day_bounds(d, tz)
    q = (
        select(messages.c.message_id, messages.c.conversation_id, messages.c.role, messages.c.content,
               messages.c.tool_calls, messages.c.at, conversations.c.world_id, conversations.c.platform)
        .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
        .where(messages.c.at >= start, messages.c.at < end)
        .where(conversations.c.debug.is_(False), conversations.c.platform != "cron")
        .order_by(messages.c.at, messages.c.message_id)
    )
    if world_ids is not None:
        q = q.where(conversations.c.world_id.in_(world_ids))
    return conn.execute(q).mappings().all()


def _worlds_alive(conn, end: datetime, world_ids: list[str] | None) -> list[str]:
    """Worlds whose first event is before the window's end: no placeholders before a world existed."""
    q = select(worlds.c.world_id).where(worlds.c.first_event_at < end).order_by(worlds.c.world_id)
    if world_ids is not None:
        q = q.where(worlds.c.world_id.in_(world_ids))
    return list(conn.execute(q).scalars())


# --- conversation day chunks (the */30 tick) -------------------------------------------------


@dataclass
class TickResult:
    day: date
    conversations: int = 0
    chunks_written: int = 0
    failures: dict[str, str] = field(default_factory=dict)


def run_tick(ctx: TemporalContext, day: date, now: datetime | None = None) -> TickResult:
    """Append chunks for every closed bucket of ``day`` up to ``now`` (a past day: all of it)."""
    now = min(now or utcnow(), day_bounds(day, ctx.tz)[1])
    result = TickResult(day)
    if not ctx.cfg.enabled:
        return result
    with ctx.store.connect() as conn:
        rows = _day_messages(conn, day, ctx.tz)
        marks = dict(conn.execute(
            select(temporal_day_chunks.c.conversation_id, func.max(temporal_day_chunks.c.watermark_at))
            .where(temporal_day_chunks.c.cst_date == day)
            .group_by(temporal_day_chunks.c.conversation_id)
        ).all())
    by_conv: dict[str, list] = defaultdict(list)
    for r in rows:
        if logic.is_material(r["role"], r["content"], r["tool_calls"]):
            by_conv[r["conversation_id"]].append(r)
    result.conversations = len(by_conv)
    for conv_id, msgs in sorted(by_conv.items()):
        index = {m["message_id"]: m for m in msgs}
        planned = logic.plan_chunks([(m["message_id"], m["at"]) for m in msgs], marks.get(conv_id), day, now, ctx.tz)
        for chunk in planned:
            material = "\n".join(_line(index[i]["at"], index[i]["role"], index[i]["content"], ctx.tz) for i in chunk.message_ids)
            world_id = msgs[0]["world_id"]
            try:
                summary = _llm(ctx, "chunk", material, ctx.cfg.chunk_max_chars, world_id)
            except LLMHardFailure as exc:
                # Later buckets wait: chunks are append-only and ordered by watermark.
                result.failures[conv_id] = str(exc)
                break
            with ctx.store.begin() as conn:
                upsert(conn, temporal_day_chunks, [{
                    "conversation_id": conv_id, "world_id": world_id, "cst_date": day,
                    "bucket": chunk.bucket, "at": bucket_end(chunk.bucket), "summary": summary,
                    "watermark_message_id": chunk.watermark_message_id, "watermark_at": chunk.watermark_at,
                    "source_ids": list(chunk.message_ids), "model": ctx.llm.model,
                }], keys=["conversation_id", "cst_date", "bucket"], update=[])
            result.chunks_written += 1
    return result


# --- per-world day / month / year rows --------------------------------------------------------


def _existing_rows(conn, window: str, period_start: date) -> dict[str, dict]:
    rows = conn.execute(
        select(temporal_summaries).where(temporal_summaries.c.window == window,
                                         temporal_summaries.c.period_start == period_start)
    ).mappings().all()
    return {r["world_id"]: dict(r) for r in rows}


def _row(world_id: str, window: str, period_start: date, content: str, reason: str | None,
         source_kind: str, source_ids: list, source_count: int, material_fp: str | None,
         model: str | None) -> dict:
    return {
        "world_id": world_id, "window": window, "period_start": period_start, "content": content,
        "empty_reason": reason, "source_count": source_count, "source_kind": source_kind,
        "source_ids": source_ids, "material_fp": material_fp, "model": model,
        "prompt_version": prompts.PROMPT_VERSION,
    }


def _write(ctx: TemporalContext, result: PeriodResult, rows: list[dict], existing: dict[str, dict]) -> None:
    """Upsert rows whose meaningful fields changed; a successful row clears empty_reason."""
    with ctx.store.begin() as conn:
        now = datetime.now(timezone.utc)
        changed = []
        for row in rows:
            old = existing.get(row["world_id"])
            same = old is not None and all(
                old[k] == row[k] for k in ("content", "empty_reason", "source_count", "source_ids", "material_fp", "model")
            )
            if same:
                result.unchanged += 1
            else:
                changed.append(row | {"created_at": old["created_at"] if old else now, "updated_at": now})
        upsert(conn, temporal_summaries, changed, keys=["world_id", "window", "period_start"],
               update=[c for c in changed[0] if c not in ("world_id", "window", "period_start", "created_at")] if changed else [])
        result.written += len(changed)
    for row in rows:
        if row["empty_reason"]:
            result.placeholders[row["empty_reason"]] += 1
        else:
            result.non_empty += 1
        if len(result.preview) < 20:
            result.preview.append((row["world_id"], row["period_start"].isoformat(),
                                   row["content"] or f"({row['empty_reason']})"))


def _summarize_or_placeholder(ctx, result, prev, world_id, task, material, max_chars, source_kind, source_ids,
                              source_count):
    """The row for one world: reused as is when model, prompt version and material fingerprint
    match the stored row (no call at all), else asked of the model."""
    fp = short_hash([material, source_ids])
    if (prev is not None and not ctx.force_llm and prev["material_fp"] == fp and prev["model"] == ctx.llm.model
            and prev["prompt_version"] == prompts.PROMPT_VERSION):
        result.reused += 1
        return _row(world_id, result.window, result.period_start, prev["content"], prev["empty_reason"],
                    source_kind, prev["source_ids"], prev["source_count"], fp, prev["model"])
    try:
        text = _llm(ctx, task, material, max_chars, world_id)
    except LLMHardFailure as exc:
        result.failures[world_id] = str(exc)
        return None
    if not text:
        return _row(world_id, result.window, result.period_start, "", EmptyReason.EMPTY_SUMMARY,
                    source_kind, [], 0, fp, ctx.llm.model)
    return _row(world_id, result.window, result.period_start, text, None, source_kind, source_ids,
                source_count, fp, ctx.llm.model)


def regenerate_day(ctx: TemporalContext, day: date, world_ids: list[str] | None = None) -> PeriodResult:
    result = PeriodResult("day", day)
    if not ctx.cfg.enabled:
        result.disabled = True
        return result
    start, end = day_bounds(day, ctx.tz)
    with ctx.store.connect() as conn:
        alive = _worlds_alive(conn, end, world_ids)
        rows = _day_messages(conn, day, ctx.tz, world_ids)
        existing = _existing_rows(conn, "day", day)
    by_world: dict[str, list] = defaultdict(list)
    for r in rows:
        by_world[r["world_id"]].append(r)
    out = []
    for world_id in alive:
        result.worlds += 1
        msgs = by_world.get(world_id, [])
        if not msgs:
            out.append(_row(world_id, "day", day, "", EmptyReason.NO_SESSIONS, "message", [], 0, None, None))
            continue
        material = [m for m in msgs if logic.is_material(m["role"], m["content"], m["tool_calls"])]
        if not material:
            out.append(_row(world_id, "day", day, "", EmptyReason.EMPTY, "message", [], 0, None, None))
            continue
        # Keep the newest lines within the material budget; sources are exactly the lines sent.
        used, budget = [], ctx.cfg.day_material_max_chars
        for m in reversed(material):
            cost = len(_line(m["at"], m["role"], m["content"], ctx.tz)) + 1
            if cost > budget and used:
                break
            budget -= cost
            used.append(m)
        used.reverse()
        by_conv: dict[str, list] = defaultdict(list)
        for m in used:
            by_conv[m["conversation_id"]].append(m)
        blocks = [f"# {ms[0]['platform']} conversation\n" + "\n".join(_line(m["at"], m["role"], m["content"], ctx.tz) for m in ms)
                  for ms in sorted(by_conv.values(), key=lambda ms: ms[0]["at"])]
        row = _summarize_or_placeholder(
            ctx, result, existing.get(world_id), world_id, "day", "\n\n".join(blocks), ctx.cfg.global_day_max_chars, "message",
            [m["message_id"] for m in used], len({m["conversation_id"] for m in used}),
        )
        if row is not None:
            out.append(row)
    _write(ctx, result, out, existing)
    if result.failures:
        raise PartitionFailure("day", day.isoformat(), result.failures)
    return result


def regenerate_rollup(ctx: TemporalContext, window: str, period_start: date,
                      world_ids: list[str] | None = None) -> PeriodResult:
    """Month from its day rows, year from its month rows, ignoring empty children."""
    child = logic.CHILD_WINDOW[window]
    result = PeriodResult(window, period_start)
    if not ctx.cfg.enabled:
        result.disabled = True
        return result
    start, end = period_bounds(window, period_start, ctx.tz)
    last = local_date(end - timedelta(seconds=1), ctx.tz)
    max_chars = ctx.cfg.month_max_chars if window == "month" else ctx.cfg.year_max_chars
    with ctx.store.connect() as conn:
        alive = _worlds_alive(conn, end, world_ids)
        q = (
            select(temporal_summaries.c.summary_id, temporal_summaries.c.world_id,
                   temporal_summaries.c.period_start, temporal_summaries.c.content)
            .where(temporal_summaries.c.window == child)
            .where(temporal_summaries.c.period_start >= period_start, temporal_summaries.c.period_start <= last)
            .where(temporal_summaries.c.empty_reason.is_(None), temporal_summaries.c.content != "")
            .order_by(temporal_summaries.c.world_id, temporal_summaries.c.period_start)
        )
        children = conn.execute(q).mappings().all()
        existing = _existing_rows(conn, window, period_start)
    by_world: dict[str, list] = defaultdict(list)
    for c in children:
        by_world[c["world_id"]].append(c)
    fmt = "%Y-%m-%d" if child == "day" else "%Y-%m"
    out = []
    for world_id in alive:
        result.worlds += 1
        kids = by_world.get(world_id, [])
        if not kids:
            out.append(_row(world_id, window, period_start, "", logic.CHILD_EMPTY_REASON[window], child, [], 0, None, None))
            continue
        material = "\n".join(f"{k['period_start']:{fmt}}: {k['content']}" for k in kids)
        row = _summarize_or_placeholder(ctx, result, existing.get(world_id), world_id, window, material, max_chars, child,
                                        [k["summary_id"] for k in kids], len(kids))
        if row is not None:
            out.append(row)
    _write(ctx, result, out, existing)
    if result.failures:
        raise PartitionFailure(window, period_start.isoformat(), result.failures)
    return result


def missing_children(ctx: TemporalContext, window: str, period_start: date,
                     world_ids: list[str] | None = None) -> list[tuple[str, str]]:
    """(world, child period) pairs a month/year needs but has no row for yet (placeholders count)."""
    child = logic.CHILD_WINDOW[window]
    _, end = period_bounds(window, period_start, ctx.tz)
    last = local_date(end - timedelta(seconds=1), ctx.tz)
    periods = expected_periods(child, period_start, last, local_date(utcnow(), ctx.tz))
    with ctx.store.connect() as conn:
        first = dict(conn.execute(select(worlds.c.world_id, worlds.c.first_event_at)
                                  .where(worlds.c.first_event_at < end)).all())
        have = set(conn.execute(
            select(temporal_summaries.c.world_id, temporal_summaries.c.period_start)
            .where(temporal_summaries.c.window == child)
            .where(temporal_summaries.c.period_start >= period_start, temporal_summaries.c.period_start <= last)
        ).all())
    missing = []
    for world_id, first_at in sorted(first.items()):
        if world_ids is not None and world_id not in world_ids:
            continue
        for p in periods:
            if period_bounds(child, p, ctx.tz)[1] > first_at and (world_id, p) not in have:
                missing.append((world_id, p.isoformat()))
    return missing


def regenerate(ctx: TemporalContext, window: str, period_start: date, world_ids: list[str] | None = None) -> PeriodResult:
    if window == "day":
        return regenerate_day(ctx, period_start, world_ids)
    return regenerate_rollup(ctx, window, period_start, world_ids)


# --- system rolls (Redis: past_days / past_months / past_years) -------------------------------


@dataclass
class RollResult:
    regenerated: int = 0
    reused: int = 0
    empty: int = 0
    failures: dict[str, str] = field(default_factory=dict)


def _roll_max_chars(cfg: TemporalSummaryConfig, kind: str) -> int:
    return {"past_days": cfg.global_day_max_chars, "past_months": cfg.month_max_chars,
            "past_years": cfg.year_max_chars}[kind]


def regenerate_system_rolls(ctx: TemporalContext, today: date, world_ids: list[str] | None = None,
                            kinds: tuple[str, ...] = logic.SYS_ROLL_KINDS, force: bool = False) -> RollResult:
    """Rebuild each world's system rolls for ``today``, reusing a cached one whose sources_fp
    still matches its source rows."""
    result = RollResult()
    if not ctx.cfg.enabled:
        return result
    for kind in kinds:
        window, first, end = logic.sys_roll_scope(kind, today)
        q = (
            select(temporal_summaries.c.world_id, temporal_summaries.c.window,
                   temporal_summaries.c.period_start, temporal_summaries.c.content)
            .where(temporal_summaries.c.window == window, temporal_summaries.c.period_start < end)
            .where(temporal_summaries.c.empty_reason.is_(None), temporal_summaries.c.content != "")
            .order_by(temporal_summaries.c.world_id, temporal_summaries.c.period_start.desc())
        )
        if first is not None:
            q = q.where(temporal_summaries.c.period_start >= first)
        if world_ids is not None:
            q = q.where(temporal_summaries.c.world_id.in_(world_ids))
        with ctx.store.connect() as conn:
            rows = conn.execute(q).mappings().all()
        by_world: dict[str, list] = defaultdict(list)
        for r in rows:
            by_world[r["world_id"]].append(r)
        for world_id, src in sorted(by_world.items()):
            fp = logic.rows_fp((r["window"], r["period_start"], r["content"]) for r in src)
            key = logic.sys_roll_key(ctx.cfg.redis_key_prefix, world_id, kind, today)
            cached = ctx.cache.get_json(key)
            if cached and cached.get("sources_fp") == fp and not force:
                result.reused += 1
                continue
            fmt = {"day": "%Y-%m-%d", "month": "%Y-%m", "year": "%Y"}[window]
            material = "\n".join(f"{r['period_start']:{fmt}}: {r['content']}" for r in src)
            try:
                summary = _llm(ctx, kind, material, _roll_max_chars(ctx.cfg, kind), world_id)
            except LLMHardFailure as exc:
                result.failures[f"{world_id}:{kind}"] = str(exc)
                continue
            if not summary:
                result.empty += 1
                continue
            ctx.cache.set_json(key, {"summary": summary, "sources_fp": fp,
                                     "created_at": utcnow().isoformat()}, logic.SYS_ROLL_TTL_SECONDS[kind])
            result.regenerated += 1
    return result


# --- peer rolls (Redis: peer_roll:{cst_date}:{bucket}:{sources_fp}) ---------------------------


def closed_bucket_chunks(conn, world_id: str | None, day: date, now: datetime, tz: ZoneInfo) -> list[dict]:
    """Chunks of ``day`` in buckets already closed at ``now``."""
    q = select(temporal_day_chunks).where(temporal_day_chunks.c.cst_date == day)
    if world_id is not None:
        q = q.where(temporal_day_chunks.c.world_id == world_id)
    rows = conn.execute(q.order_by(temporal_day_chunks.c.bucket, temporal_day_chunks.c.conversation_id)).mappings().all()
    return [dict(r) for r in rows if bucket_end(r["bucket"]) <= now]


def peer_roll_summary(ctx: TemporalContext, world_id: str, sources: list[dict]) -> str:
    """One line for a bucket's peer chunks: a single short source is used as is, more go to the LLM."""
    texts = [s["summary"] for s in sources if s["summary"].strip()]
    joined = " / ".join(texts)
    if len(joined) <= ctx.cfg.peer_roll_max_chars:
        return joined
    material = "\n".join(f"- {t}" for t in texts)
    return _llm(ctx, "peer_roll", material, ctx.cfg.peer_roll_max_chars, world_id)


@dataclass
class PeerWarmResult:
    buckets: int = 0
    warmed: int = 0
    reused: int = 0
    requests_done: int = 0
    failures: dict[str, str] = field(default_factory=dict)


def _warm_one(ctx: TemporalContext, result: "PeerWarmResult", done: set[str], world_id: str, day: date,
              bucket: datetime, sources: list[dict], viewer: str | None) -> bool:
    """Cache the peer roll of one bucket as ``viewer`` sees it, unless cached already; False when
    the model failed (the roll stays a miss)."""
    peers = [s for s in sources if s["conversation_id"] != viewer]
    if not peers:
        return True
    fp = logic.peer_sources_fp(((s["conversation_id"], s["at"], s["summary"]) for s in sources), viewer)
    key = logic.peer_roll_key(ctx.cfg.redis_key_prefix, world_id, day, bucket.astimezone(ctx.tz), fp)
    if key in done:
        return key not in result.failures
    done.add(key)
    if ctx.cache.get_json(key):
        result.reused += 1
        return True
    try:
        summary = peer_roll_summary(ctx, world_id, peers)
    except LLMHardFailure as exc:
        result.failures[key] = str(exc)
        return False
    ctx.cache.set_json(key, {"summary": summary, "sources_fp": fp, "created_at": utcnow().isoformat()},
                       ctx.cfg.peer_roll_ttl_seconds)
    result.warmed += 1
    return True


def warm_peer_rolls(ctx: TemporalContext, day: date, now: datetime | None = None) -> PeerWarmResult:
    """Precompute peer rolls of every closed bucket for every viewer active that day (and for an
    outside viewer), then serve the read path's pending warm-up requests for that day."""
    now = min(now or utcnow(), day_bounds(day, ctx.tz)[1])
    result = PeerWarmResult()
    if not ctx.cfg.enabled:
        return result
    with ctx.store.connect() as conn:
        chunks = closed_bucket_chunks(conn, None, day, now, ctx.tz)
        pending = conn.execute(
            select(warmup_requests).where(warmup_requests.c.kind == "peer_roll", warmup_requests.c.cst_date == day,
                                          warmup_requests.c.done_at.is_(None))
        ).mappings().all()
    by_world_bucket: dict[tuple[str, datetime], list[dict]] = defaultdict(list)
    viewers: dict[str, set] = defaultdict(set)
    for c in chunks:
        by_world_bucket[(c["world_id"], c["bucket"])].append(c)
        viewers[c["world_id"]].add(c["conversation_id"])
    done: set[str] = set()
    for (world_id, bucket), sources in sorted(by_world_bucket.items()):
        result.buckets += 1
        for viewer in sorted(viewers[world_id]) + [None]:
            _warm_one(ctx, result, done, world_id, day, bucket, sources, viewer)
    for req in pending:
        sources = by_world_bucket.get((req["world_id"], req["bucket"]), [])
        if not _warm_one(ctx, result, done, req["world_id"], day, req["bucket"], sources,
                         req["viewer_conversation_id"] or None):
            continue  # stays pending for the next warm-up
        with ctx.store.begin() as conn:
            conn.execute(warmup_requests.update().where(warmup_requests.c.request_id == req["request_id"])
                         .values(done_at=utcnow()))
        result.requests_done += 1
    return result


def pending_warmup_days(store: Store) -> list[tuple[date, int]]:
    """(cst_date, newest pending request id) per day with pending warm-up requests."""
    with store.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(warmup_requests.c.cst_date, func.max(warmup_requests.c.request_id))
            .where(warmup_requests.c.done_at.is_(None))
            .group_by(warmup_requests.c.cst_date).order_by(warmup_requests.c.cst_date)
        ).all()]


__all__ = [
    "PartitionFailure", "PeriodResult", "TemporalContext", "regenerate", "regenerate_day",
    "regenerate_rollup", "regenerate_system_rolls", "run_tick", "warm_peer_rolls",
]


# --- audits (asset checks) --------------------------------------------------------------------


def audit_period(store: Store, window: str, period_start: date, tz: ZoneInfo, now: datetime | None = None) -> list[str]:
    """Problems with one window's rows: a non-empty row without sources, a source outside the
    window or world, or any row for a period that is not closed yet (the future)."""
    today = local_date(now or utcnow(), tz)
    problems: list[str] = []
    start, end = period_bounds(window, period_start, tz)
    last = local_date(end - timedelta(seconds=1), tz)
    if period_start >= today or last >= today:
        problems.append(f"{window} {period_start} is not closed on {today} (future or open window)")
    with store.connect() as conn:
        rows = conn.execute(select(temporal_summaries).where(
            temporal_summaries.c.window == window, temporal_summaries.c.period_start == period_start)).mappings().all()
        for r in rows:
            tag = f"{r['world_id']} {window} {period_start}"
            if r["empty_reason"] is None and (not r["content"] or r["source_count"] <= 0 or not r["source_ids"]):
                problems.append(f"{tag}: non-empty row without sources")
                continue
            if r["empty_reason"] is not None and r["content"]:
                problems.append(f"{tag}: placeholder ({r['empty_reason']}) carries content")
            if not r["source_ids"]:
                continue
            if r["source_kind"] == "message":
                found = conn.execute(
                    select(messages.c.message_id, messages.c.at, conversations.c.world_id)
                    .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
                    .where(messages.c.message_id.in_(r["source_ids"]))
                ).all()
                bad = [m for m in found if not (start <= m[1] < end) or m[2] != r["world_id"]]
                if len(found) != len(r["source_ids"]):
                    problems.append(f"{tag}: {len(r['source_ids']) - len(found)} source message(s) do not exist")
                if bad:
                    problems.append(f"{tag}: {len(bad)} source message(s) outside the window or world")
            else:
                kids = conn.execute(select(temporal_summaries).where(
                    temporal_summaries.c.summary_id.in_(r["source_ids"]))).mappings().all()
                ok = [k for k in kids if k["window"] == r["source_kind"] and k["world_id"] == r["world_id"]
                      and period_start <= k["period_start"] <= last and k["empty_reason"] is None]
                if len(ok) != len(r["source_ids"]):
                    problems.append(f"{tag}: {len(r['source_ids']) - len(ok)} child source(s) missing, empty or outside")
    return problems


def audit_chunks(store: Store, day: date, tz: ZoneInfo, now: datetime | None = None) -> list[str]:
    """Chunks of ``day``: sources present, bucket inside the day and closed, watermark inside it."""
    now = now or utcnow()
    problems = []
    start, end = day_bounds(day, tz)
    with store.connect() as conn:
        rows = conn.execute(select(temporal_day_chunks).where(temporal_day_chunks.c.cst_date == day)).mappings().all()
    for r in rows:
        tag = f"chunk {r['conversation_id']} {r['bucket'].astimezone(tz):%Y-%m-%dT%H:%M}"
        if not r["source_ids"]:
            problems.append(f"{tag}: no sources")
        if not (start <= r["bucket"] < end):
            problems.append(f"{tag}: bucket outside {day}")
        if bucket_end(r["bucket"]) > now:
            problems.append(f"{tag}: bucket not closed yet")
        if not (r["watermark_at"] < bucket_end(r["bucket"])):
            problems.append(f"{tag}: watermark after the bucket end")
    return problems
