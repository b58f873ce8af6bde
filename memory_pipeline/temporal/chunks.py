"""Conversation day chunks (seed 000 `conversations.temporal_day`): the */30 tick appends one chunk
per closed half-hour bucket with material after the watermark, and a further chunk (seq 1, 2, ...)
for material of an already-chunked bucket that arrived late; append-only within the CST day."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Row, RowMapping, bindparam, select

from memory_pipeline.lib.llm import LLMHardFailure
from memory_pipeline.lib.store import Store, cached_insert, retry_transient, upsert
from memory_pipeline.lib.timeutil import bucket_end, bucket_start, day_bounds, local_date, utcnow
from memory_pipeline.temporal import logic
from memory_pipeline.temporal.context import (
    Message,
    TemporalContext,
    buffered_llm,
    day_messages,
    material_line,
    messages_between,
    summarize,
    summary_request,
)
from memory_pipeline.temporal.tables import temporal_day_chunks


@dataclass
class TickResult:
    day: date
    now: datetime | None = None  # the tick's "now": buckets ending by then are closed
    read_at: datetime | None = None  # when the tick read the messages (later ingests wait)
    conversations: int = 0
    chunks_written: int = 0  # rows actually inserted
    late_messages: int = 0  # chunked into an already-chunked bucket or from at/before the watermark gate
    failures: dict[str, str] = field(default_factory=dict)
    db_retries: int = 0  # ticks redone after a transient database error


class _ConvChunks(TypedDict):
    ids: set[str]  # the union of the conversation-day's chunks' source_ids
    seqs: dict[datetime, int]  # bucket -> its highest seq
    watermark_at: datetime | None


ChunkRow = dict[str, Any]  # a temporal_day_chunks row
ChunkKey = tuple[str, datetime, int]  # (conversation_id, bucket, seq)


def _chunk_state(conn: Connection, day: date) -> dict[str, _ConvChunks]:
    """Per conversation of ``day``: the union of its chunks' source_ids, the highest seq per
    bucket and the newest watermark."""
    rows = conn.execute(
        select(
            temporal_day_chunks.c.conversation_id,
            temporal_day_chunks.c.bucket,
            temporal_day_chunks.c.seq,
            temporal_day_chunks.c.watermark_at,
            temporal_day_chunks.c.source_ids,
        ).where(temporal_day_chunks.c.cst_date == day)
    ).all()
    state: dict[str, _ConvChunks] = defaultdict(lambda: {"ids": set(), "seqs": {}, "watermark_at": None})
    for conv_id, bucket, seq, watermark_at, source_ids in rows:
        s = state[conv_id]
        s["ids"].update(source_ids or [])
        s["seqs"][bucket] = max(seq, s["seqs"].get(bucket, seq))
        if s["watermark_at"] is None or watermark_at > s["watermark_at"]:
            s["watermark_at"] = watermark_at
    return state


def append_chunk(conn: Connection, row: ChunkRow) -> bool:
    """Insert one chunk; False when its (conversation, day, bucket, seq) exists already (a
    concurrent tick got there first: the next tick plans what is left, from the source set)."""
    return (
        upsert(conn, temporal_day_chunks, [row], keys=["conversation_id", "cst_date", "bucket", "seq"], update=[]) == 1
    )


def run_tick(ctx: TemporalContext, day: date, now: datetime | None = None) -> TickResult:
    """Append chunks for every closed bucket of ``day`` up to ``now`` (a past day: all of it): every
    material message no chunk of its conversation-day lists yet goes into a new chunk of its own
    bucket (logic.plan_chunks), so late arrivals are appended rather than lost. The day's cached
    answers are read in one query, and its chunks are written in one transaction with the LLM
    ledger and cache rows of its calls."""
    now = min(now or utcnow(), utcnow(), day_bounds(day, ctx.tz)[1])  # never a future "now"
    result = TickResult(day, now=now)
    if not ctx.cfg.enabled:
        return result

    def retried(_attempt: int, _exc: BaseException) -> None:
        result.db_retries += 1

    # A transient database error redoes the tick: its one transaction rolled back whole, so the
    # retry plans the same chunks again (their answers are served from the client).
    with buffered_llm(ctx):
        retry_transient(lambda: _tick_once(ctx, day, now, result), what=f"chunks {day.isoformat()}", on_retry=retried)
    return result


_CHUNK_KEY = ("conversation_id", "cst_date", "bucket", "seq")


def _tick_once(ctx: TemporalContext, day: date, now: datetime, result: TickResult) -> None:
    result.conversations, result.failures = 0, {}
    result.chunks_written = result.late_messages = 0
    with ctx.store.connect() as conn:
        result.read_at = utcnow()
        rows = day_messages(conn, day, ctx.tz)
        state = _chunk_state(conn, day)
        by_conv: dict[str, list[Message]] = defaultdict(list)
        for r in rows:
            if logic.is_material(r["role"], r["content"]):
                by_conv[r["conversation_id"]].append(r)
        result.conversations = len(by_conv)
        plans = []
        for conv_id, msgs in sorted(by_conv.items()):
            index = {m["message_id"]: m for m in msgs}
            s = state.get(conv_id)
            planned = logic.plan_chunks(
                [(m["message_id"], m["at"]) for m in msgs],
                day,
                now,
                ctx.tz,
                chunked_ids=s["ids"] if s else (),
                bucket_seqs=s["seqs"] if s else None,
                watermark_at=s["watermark_at"] if s else None,
            )
            for chunk in planned:
                material = "\n".join(
                    material_line(index[i]["at"], index[i]["role"], index[i]["content"], ctx.tz)
                    for i in chunk.message_ids
                )
                plans.append((conv_id, msgs[0]["world_id"], chunk, material))
        if plans and not ctx.force_llm:
            reqs = [summary_request("chunk", m, ctx.cfg.chunk_max_chars, w) for _c, w, _ch, m in plans]
            ctx.llm.prefetch(reqs, conn)
    out, late = [], {}
    for conv_id, world_id, chunk, material in plans:
        if conv_id in result.failures:
            continue  # later buckets wait for the next tick, which plans them again from the source set
        try:
            summary = summarize(ctx, "chunk", material, ctx.cfg.chunk_max_chars, world_id)
        except LLMHardFailure as exc:
            # the run's failure line names where: the conversation and its world (the day is the run's)
            result.failures[conv_id] = f"conversation {conv_id} (world {world_id}): {exc}"
            continue
        out.append(
            {
                "conversation_id": conv_id,
                "world_id": world_id,
                "cst_date": day,
                "bucket": chunk.bucket,
                "at": bucket_end(chunk.bucket),
                "summary": summary,
                "watermark_message_id": chunk.watermark_message_id,
                "watermark_at": chunk.watermark_at,
                "source_ids": list(chunk.message_ids),
                "model": ctx.llm.model,
                "seq": chunk.seq,
            }
        )
        late[(conv_id, chunk.bucket, chunk.seq)] = chunk.late
    with ctx.store.begin() as conn:
        written = append_chunks(conn, out)
        ctx.llm.write_pending(conn)
    ctx.llm.clear_pending()
    result.chunks_written = len(written)
    result.late_messages = sum(int(late[k]) for k in written)


def append_chunks(conn: Connection, rows: list[ChunkRow]) -> set[ChunkKey]:
    """Insert chunks (batches of 500 rows); a (conversation, day, bucket, seq) that exists already
    (a concurrent tick got there first: the next tick plans what is left) is skipped. Returns the
    (conversation_id, bucket, seq) of the chunks inserted."""
    c = temporal_day_chunks.c
    written: set[ChunkKey] = set()
    stmt = cached_insert(
        conn,
        temporal_day_chunks,
        ("temporal.append_chunks",),
        lambda ins: ins.on_conflict_do_nothing(index_elements=list(_CHUNK_KEY)).returning(
            c.conversation_id, c.bucket, c.seq
        ),
    )
    for i in range(0, len(rows), 500):
        written.update((conv, bucket, seq) for conv, bucket, seq in conn.execute(stmt, rows[i : i + 500]))
    return written


def closed_bucket_chunks(conn: Connection, world_id: str | None, day: date, now: datetime) -> list[ChunkRow]:
    """Chunks of ``day`` in buckets already closed at ``now``; a bucket may hold several chunks of
    one conversation (late arrivals, seq 1, 2, ...): its peers are all of them."""
    q = select(temporal_day_chunks).where(temporal_day_chunks.c.cst_date == day)
    if world_id is not None:
        q = q.where(temporal_day_chunks.c.world_id == world_id)
    q = q.order_by(temporal_day_chunks.c.bucket, temporal_day_chunks.c.conversation_id, temporal_day_chunks.c.seq)
    rows = conn.execute(q).mappings().all()
    return [dict(r) for r in rows if bucket_end(r["bucket"]) <= now]


# The read path's one statement, built once (no per-call construction or cache-key work): a
# world's chunks of one day with just what a view uses (the peer fingerprint's conversation, at
# and summary, and the bucket), in ix_chunks_world_date.
_c = temporal_day_chunks.c
_VIEW_CHUNKS = (
    select(_c.conversation_id, _c.bucket, _c.at, _c.summary)
    .where(_c.world_id == bindparam("world_id"), _c.cst_date == bindparam("cst_date"))
    .order_by(_c.bucket, _c.conversation_id, _c.seq)
)


def view_chunks(conn: Connection, world_id: str, day: date, now: datetime) -> list[Row[Any]]:
    """:func:`closed_bucket_chunks` of one world, for the read path: rows of (conversation_id,
    bucket, at, summary)."""
    rows = conn.execute(_VIEW_CHUNKS, {"world_id": world_id, "cst_date": day}).all()
    return [r for r in rows if bucket_end(r.bucket) <= now]


def audit_chunks(
    store: Store,
    day: date,
    tz: ZoneInfo,
    now: datetime | None = None,
    *,
    coverage: bool = True,
    tick_now: datetime | None = None,
    ingested_before: datetime | None = None,
) -> list[str]:
    """The problems :func:`chunk_audit` finds."""
    return chunk_audit(
        store, day, tz, now, coverage=coverage, tick_now=tick_now, ingested_before=ingested_before
    ).problems


@dataclass(frozen=True)
class TickSeen:
    """What the tick that materialized a day saw: buckets closed at ``tick_now``, messages
    ingested by ``ingested_before``; ``coverage`` False when it wrote nothing (disabled)."""

    tick_now: datetime | None = None
    ingested_before: datetime | None = None
    coverage: bool = True


def chunk_audit(
    store: Store,
    day: date,
    tz: ZoneInfo,
    now: datetime | None = None,
    *,
    coverage: bool = True,
    tick_now: datetime | None = None,
    ingested_before: datetime | None = None,
) -> logic.Audit:
    """:func:`chunk_audits` of one day."""
    return chunk_audits(store, {day: TickSeen(tick_now, ingested_before, coverage)}, tz, now)[day]


def chunk_audits(
    store: Store, days: dict[date, TickSeen], tz: ZoneInfo, now: datetime | None = None
) -> dict[date, logic.Audit]:
    """Chunks of each day: sources present, bucket inside the day and closed at ``now``, watermark
    inside it, no message in two chunks; with ``coverage``, every material message of an eligible
    conversation in a bucket closed at ``tick_now`` (default ``now``) is in a chunk, counting only
    messages ingested by ``ingested_before`` when given (the tick could not see later ones).
    Set-based: one read of the days' chunks and one of their messages, whatever the number of
    days and worlds. ``audited`` is the number of chunks of a day read."""
    if not days:
        return {}
    now = now or utcnow()
    ordered = sorted(days)
    c = temporal_day_chunks.c
    by_day: dict[date, list[RowMapping]] = defaultdict(list)
    msgs_by_day: dict[date, list[Message]] = defaultdict(list)
    with store.connect() as conn:
        q = select(temporal_day_chunks).where(c.cst_date.in_(ordered)).order_by(c.conversation_id, c.bucket, c.seq)
        for r in conn.execute(q).mappings():
            by_day[r["cst_date"]].append(r)
        covered = [d for d in ordered if days[d].coverage]
        if covered:
            lo, hi = day_bounds(covered[0], tz)[0], day_bounds(covered[-1], tz)[1]
            for m in messages_between(conn, lo, hi):
                d = local_date(m["at"], tz)
                if d in days and days[d].coverage:
                    msgs_by_day[d].append(m)
    return {d: _audit_day(d, by_day[d], msgs_by_day[d], days[d], tz, now) for d in ordered}


def _audit_day(
    day: date, rows: list[RowMapping], msgs: list[Message], seen_by: TickSeen, tz: ZoneInfo, now: datetime
) -> logic.Audit:
    tick_now = min(seen_by.tick_now or now, now)
    ingested_before = seen_by.ingested_before
    problems = []
    start, end = day_bounds(day, tz)
    seen: dict[str, int] = defaultdict(int)
    for r in rows:
        tag = f"chunk {r['conversation_id']} {r['bucket'].astimezone(tz):%Y-%m-%dT%H:%M}#{r['seq']}"
        if not r["source_ids"]:
            problems.append(f"{tag}: no sources")
        if not (start <= r["bucket"] < end):
            problems.append(f"{tag}: bucket outside {day}")
        if bucket_end(r["bucket"]) > now:
            problems.append(f"{tag}: bucket not closed yet")
        if not (r["watermark_at"] < bucket_end(r["bucket"])):
            problems.append(f"{tag}: watermark after the bucket end")
        for i in r["source_ids"] or []:
            seen[i] += 1
    twice: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        for i in r["source_ids"] or []:
            if seen[i] > 1 and i not in twice[r["conversation_id"]]:
                twice[r["conversation_id"]].append(i)
    for conv_id, ids in sorted(twice.items()):
        problems.append(f"conversation {conv_id}: {len(ids)} message(s) in two or more chunks, e.g. {ids[:3]}")
    missing: dict[str, list[str]] = defaultdict(list)
    for m in msgs:
        if (
            logic.is_material(m["role"], m["content"])
            and m["message_id"] not in seen
            and bucket_end(bucket_start(m["at"], tz)) <= tick_now
            and (ingested_before is None or m["ingested_at"] <= ingested_before)
        ):
            missing[m["conversation_id"]].append(m["message_id"])
    for conv_id, ids in sorted(missing.items()):
        problems.append(
            f"conversation {conv_id}: {len(ids)} material message(s) of closed buckets in no chunk, e.g. {ids[:3]}"
        )
    return logic.Audit(len(rows), problems)
