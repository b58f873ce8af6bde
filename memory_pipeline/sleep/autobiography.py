"""Seed 003 self autobiography (04:00 CST, after deep sleep). Phase A (conditional): from the
active experience / imprint memories observed in the 7 CST days ending on D and the existing
narratives, append 0..N narratives (never from raw conversation). Phase B (always): refresh
``self_blocks.autobiography_summary`` (updated_by = autobiography_cron)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from sqlalchemy import select

from memory_pipeline.lib.store import upsert
from memory_pipeline.lib.text import short_hash
from memory_pipeline.lib.timeutil import day_bounds, utcnow
from memory_pipeline.sleep import prompts
from memory_pipeline.sleep.context import SleepContext, tool_loop
from memory_pipeline.sleep.light import _day_row, _previous, record_runs, system_for
from memory_pipeline.sleep.logic import MemoryStatus, Stage
from memory_pipeline.sleep.memory import load_self_layer
from memory_pipeline.sleep.narrative import Narrative, NarrativeChange, NarrativeState, summary
from memory_pipeline.sleep.tables import autobiographical_memories, self_blocks, semantic_memories

SUMMARY_BLOCK = "autobiography_summary"
AUTO_TYPES = ("experience", "imprint")


@dataclass
class AutoResult:
    worlds: int = 0
    narratives_created: int = 0
    narratives_deprecated: int = 0
    rejected: int = 0
    reused: int = 0
    llm_calls: int = 0
    summaries_written: int = 0
    per_world: dict[str, dict[str, Any]] = field(default_factory=dict)


def narrative_from_row(row: Any) -> Narrative:
    return Narrative(
        row["memory_id"],
        row["world_id"],
        row["narrative"],
        row["significance"],
        row["kind"],
        row["period"],
        list(row["source_memory_ids"] or []),
        row["created_day"],
        row["status"],
        row["reason"],
        row["deprecated_day"],
    )


def write_narratives(conn: Any, changes: list[NarrativeChange]) -> None:
    now = utcnow()
    new = [c.narrative for c in changes if c.op == "create"]
    if new:
        conn.execute(
            autobiographical_memories.insert(),
            [
                {
                    "memory_id": n.id,
                    "world_id": n.world_id,
                    "narrative": n.narrative,
                    "significance": n.significance,
                    "kind": n.kind,
                    "period": n.period,
                    "source_memory_ids": n.source_memory_ids,
                    "status": n.status,
                    "reason": n.reason,
                    "created_day": n.created_day,
                    "created_at": now,
                    "updated_at": now,
                }
                for n in new
            ],
        )
    gone = [c.narrative for c in changes if c.op in ("deprecate", "restore")]
    if gone:
        upsert(
            conn,
            autobiographical_memories,
            [
                {
                    "memory_id": n.id,
                    "world_id": n.world_id,
                    "narrative": n.narrative,
                    "significance": n.significance,
                    "kind": n.kind,
                    "period": n.period,
                    "source_memory_ids": n.source_memory_ids,
                    "status": n.status,
                    "reason": n.reason,
                    "created_day": n.created_day,
                    "deprecated_day": n.deprecated_day,
                    "updated_at": now,
                }
                for n in gone
            ],
            keys=["memory_id"],
            update=["status", "reason", "deprecated_day", "updated_at"],
        )


def run_autobiography(ctx: SleepContext, day: date, world_ids: Sequence[str] | None = None) -> AutoResult:
    out = AutoResult()
    start = day_bounds(day - timedelta(days=ctx.cfg.autobiography_window_days - 1), ctx.tz)[0]
    end = day_bounds(day, ctx.tz)[1]
    with ctx.store.connect() as conn:
        recent: dict[str, list[dict[str, Any]]] = defaultdict(list)
        q = (
            select(semantic_memories)
            .where(semantic_memories.c.status == MemoryStatus.ACTIVE, semantic_memories.c.type.in_(AUTO_TYPES))
            .where(semantic_memories.c.observed_at >= start, semantic_memories.c.observed_at < end)
            .order_by(semantic_memories.c.world_id, semantic_memories.c.observed_at, semantic_memories.c.memory_id)
        )
        for r in conn.execute(q).mappings():
            recent[r["world_id"]].append(
                {
                    "id": r["memory_id"],
                    "type": r["type"],
                    "content": r["content"],
                    "observed_at": r["observed_at"].astimezone(ctx.tz).isoformat(timespec="seconds"),
                }
            )
        narratives: dict[str, list[Narrative]] = defaultdict(list)
        for r in conn.execute(
            select(autobiographical_memories).order_by(
                autobiographical_memories.c.created_day, autobiographical_memories.c.memory_id
            )
        ).mappings():
            narratives[r["world_id"]].append(narrative_from_row(r))
        worlds = sorted(set(recent) | set(narratives))
        if world_ids is not None:
            worlds = [w for w in worlds if w in set(world_ids)]
        blocks, pinned = load_self_layer(conn, worlds, ctx.cfg.pinned_top)
        previous = _previous(conn, Stage.AUTOBIOGRAPHY, day)
    records = []
    summaries = []
    for world in worlds:
        out.worlds += 1
        mems = recent.get(world, [])
        state = NarrativeState(world, day, narratives.get(world, []), [m["id"] for m in mems])
        m1 = "# 近 7 日 experience / imprint 语义记忆\n" + "\n".join(
            json.dumps(m, ensure_ascii=False, sort_keys=True) for m in mems
        )
        fp = short_hash([prompts.PROMPT_VERSION, m1], length=32)
        prev = previous.get(world)
        created = deprecated = rejected = calls = 0
        text = ""
        rejected_calls: list[dict[str, Any]] = []  # each refused call and its error, as light and deep record them
        if mems and not (prev and prev["input_fp"] == fp and prev["status"] == "done" and not ctx.force):
            existing = [
                {
                    "id": n.id,
                    "kind": n.kind,
                    "significance": n.significance,
                    "narrative": n.narrative,
                    "source_memory_ids": n.source_memory_ids,
                }
                for n in state.items.values()
                if n.status == "active"
            ]
            m2 = "# 已有自传记忆（active）\n" + (
                "\n".join(json.dumps(e, ensure_ascii=False, sort_keys=True) for e in existing) or "（无）"
            )
            loop = tool_loop(
                ctx,
                task="autobiography",
                world_id=world,
                system=system_for(ctx, blocks, pinned, world),
                messages=[{"role": "user", "content": c} for c in (m1, m2, prompts.AUTO_INSTRUCTIONS)],
                tools=[prompts.AUTO_SCHEMAS[n] for n in prompts.AUTO_TOOLS],
                apply=state.apply,
                writer=write_narratives,
                describe=lambda c: f"{c.op} {c.narrative.id}",
            )
            created = sum(1 for c in loop.changes if c.op == "create")
            deprecated = sum(1 for c in loop.changes if c.op == "deprecate")
            rejected, calls, text, rejected_calls = len(loop.rejected), loop.llm_calls, loop.text, loop.rejected
        elif mems:
            out.reused += 1
        # Phase B, always (also with 0 narratives created).
        block = summary(
            list(state.items.values()), day, ctx.cfg.autobiography_recent_days, ctx.cfg.autobiography_summary_max_chars
        )
        summaries.append(
            {
                "world_id": world,
                "name": SUMMARY_BLOCK,
                "content": block,
                "updated_by": str(Stage.AUTOBIOGRAPHY),
                "updated_at": utcnow(),
            }
        )
        out.narratives_created += created
        out.narratives_deprecated += deprecated
        out.rejected += rejected
        out.llm_calls += calls
        out.per_world[world] = {
            "memories": len(mems),
            "narratives_created": created,
            "deprecated": deprecated,
            "rejected": rejected,
        }
        records.append(
            {
                "stage": str(Stage.AUTOBIOGRAPHY),
                "day": day,
                "world_id": world,
                "status": "done",
                "input_fp": fp,
                "sessions": 0,
                "sessions_truncated": 0,
                "input_chars": len(m1),
                "llm_calls": calls,
                "tool_calls": created + deprecated + rejected,
                "applied": created + deprecated,
                "rejected": rejected,
                "created": created,
                "detail": {"narratives_created": created, "reply": text[:500], "rejected_calls": rejected_calls},
                "finished_at": utcnow(),
            }
        )
    records.append(_day_row(Stage.AUTOBIOGRAPHY, day, out.worlds, out.per_world))
    with ctx.store.begin() as conn:
        if summaries:
            upsert(conn, self_blocks, summaries, keys=["world_id", "name"])
        record_runs(conn, records, worlds if world_ids is None else None)
    out.summaries_written = len(summaries)
    return out


def narratives(store: Any, world_id: str, include_deprecated: bool = False) -> list[Narrative]:
    """Recall's read of a world's autobiographical memory (no model call), oldest first."""
    q = select(autobiographical_memories).where(autobiographical_memories.c.world_id == world_id)
    if not include_deprecated:
        q = q.where(autobiographical_memories.c.status == "active")
    with store.connect() as conn:
        rows = conn.execute(q.order_by(autobiographical_memories.c.created_day, autobiographical_memories.c.memory_id))
        return [narrative_from_row(r) for r in rows.mappings()]
