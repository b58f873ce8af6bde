"""Conversation day chunks (seed 000 `conversations.temporal_day`): the */30 tick appends one chunk
per closed half-hour bucket with material after the watermark; append-only within the CST day."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime
from zoneinfo import ZoneInfo

from sqlalchemy import func, select

from memory_pipeline.lib.llm import LLMHardFailure
from memory_pipeline.lib.store import Store, upsert
from memory_pipeline.lib.timeutil import bucket_end, day_bounds, utcnow
from memory_pipeline.temporal import logic
from memory_pipeline.temporal.context import TemporalContext, day_messages, material_line, summarize
from memory_pipeline.temporal.tables import temporal_day_chunks


@dataclass
class TickResult:
    day: date
    conversations: int = 0
    chunks_written: int = 0
    failures: dict[str, str] = field(default_factory=dict)


def run_tick(ctx: TemporalContext, day: date, now: datetime | None = None) -> TickResult:
    """Append chunks for every closed bucket of ``day`` up to ``now`` (a past day: all of it)."""
    now = min(now or utcnow(), utcnow(), day_bounds(day, ctx.tz)[1])  # never a future "now"
    result = TickResult(day)
    if not ctx.cfg.enabled:
        return result
    with ctx.store.connect() as conn:
        rows = day_messages(conn, day, ctx.tz)
        marks = dict(
            conn.execute(
                select(temporal_day_chunks.c.conversation_id, func.max(temporal_day_chunks.c.watermark_at))
                .where(temporal_day_chunks.c.cst_date == day)
                .group_by(temporal_day_chunks.c.conversation_id)
            ).all()
        )
    by_conv: dict[str, list] = defaultdict(list)
    for r in rows:
        if logic.is_material(r["role"], r["content"], r["tool_calls"]):
            by_conv[r["conversation_id"]].append(r)
    result.conversations = len(by_conv)
    for conv_id, msgs in sorted(by_conv.items()):
        index = {m["message_id"]: m for m in msgs}
        planned = logic.plan_chunks([(m["message_id"], m["at"]) for m in msgs], marks.get(conv_id), day, now, ctx.tz)
        for chunk in planned:
            material = "\n".join(
                material_line(index[i]["at"], index[i]["role"], index[i]["content"], ctx.tz) for i in chunk.message_ids
            )
            world_id = msgs[0]["world_id"]
            try:
                summary = summarize(ctx, "chunk", material, ctx.cfg.chunk_max_chars, world_id)
            except LLMHardFailure as exc:
                # Later buckets wait: chunks are append-only and ordered by watermark.
                result.failures[conv_id] = str(exc)
                break
            with ctx.store.begin() as conn:
                upsert(
                    conn,
                    temporal_day_chunks,
                    [
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
                            "seq": 0,
                        }
                    ],
                    keys=["conversation_id", "cst_date", "bucket", "seq"],
                    update=[],
                )
            result.chunks_written += 1
    return result


def closed_bucket_chunks(conn, world_id: str | None, day: date, now: datetime) -> list[dict]:
    """Chunks of ``day`` in buckets already closed at ``now``."""
    q = select(temporal_day_chunks).where(temporal_day_chunks.c.cst_date == day)
    if world_id is not None:
        q = q.where(temporal_day_chunks.c.world_id == world_id)
    rows = (
        conn.execute(q.order_by(temporal_day_chunks.c.bucket, temporal_day_chunks.c.conversation_id)).mappings().all()
    )
    return [dict(r) for r in rows if bucket_end(r["bucket"]) <= now]


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
