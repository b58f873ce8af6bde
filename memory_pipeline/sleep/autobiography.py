"""Seed 003 self autobiography (04:00 CST, after deep sleep). Phase A (conditional): from the
active experience / imprint memories observed in the 7 CST days ending on D and the existing
narratives, append 0..N narratives (never from raw conversation). Phase B (always): refresh
``self_blocks.autobiography_summary`` (updated_by = autobiography_cron). The memories are those as of D;
a day done before is reused (its narratives and summary stand); a world's narratives, summary and
state record commit in one transaction, and the record keeps the summary as it was before, what a
rebuild of D puts back (sleep/order.py)."""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import select

from memory_pipeline.lib.store import Store, upsert
from memory_pipeline.lib.text import short_hash
from memory_pipeline.lib.timeutil import day_bounds, utcnow
from memory_pipeline.sleep import prompts
from memory_pipeline.sleep.context import LoopResult, SleepContext, all_refused, tool_loop
from memory_pipeline.sleep.light import system_for
from memory_pipeline.sleep.logic import Memory, Stage
from memory_pipeline.sleep.memory import load_self_layer
from memory_pipeline.sleep.narrative import Narrative, NarrativeChange, NarrativeState, summary
from memory_pipeline.sleep.order import DAY_ROW
from memory_pipeline.sleep.rebuild import SUMMARY_BEFORE, SUMMARY_BLOCK
from memory_pipeline.sleep.runs import ALL_REFUSED, ANSWERS_CUT, StageRun
from memory_pipeline.sleep.tables import autobiographical_memories, self_blocks, semantic_memories

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
    restored: int = 0  # worlds put back to before this day's autobiography first (later places were done)
    stale_days: list[date] = field(default_factory=list)  # days whose later records those restores made stale
    per_world: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Worlds whose record was built from an answer the provider cut (the next run asks them again).
    worlds_truncated: list[str] = field(default_factory=list)
    worlds_all_refused: list[str] = field(default_factory=list)  # as light sleep's


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


def _worlds_of(conn: Any, day: date, previous: dict[str, Any]) -> list[str]:
    """Worlds with a memory or a narrative of ``day`` or before, or a record of this day."""
    q = select(semantic_memories.c.world_id).where(semantic_memories.c.created_day <= day)
    n = select(autobiographical_memories.c.world_id).where(autobiographical_memories.c.created_day <= day)
    found = set(conn.execute(q.union(n)).scalars())
    return sorted(found | (set(previous) - {DAY_ROW}))


def _recent(memories: Sequence[Memory], start: datetime, end: datetime, tz: Any) -> list[dict[str, Any]]:
    """The window's experience / imprint memories, oldest first, as phase A is shown them."""
    picked = sorted(
        (m for m in memories if m.type in AUTO_TYPES and start <= m.observed_at < end),
        key=lambda m: (m.observed_at, m.id),
    )
    return [
        {
            "id": m.id,
            "type": m.type,
            "content": m.content,
            "observed_at": m.observed_at.astimezone(tz).isoformat(timespec="seconds"),
        }
        for m in picked
    ]


def recent_memories_message(mems: list[dict[str, Any]]) -> str:
    """The autobiography call's message 1: the recent experience / imprint memories (``_recent``)."""
    return "# 近 7 日 experience / imprint 语义记忆\n" + "\n".join(
        json.dumps(m, ensure_ascii=False, sort_keys=True) for m in mems
    )


def narratives_message(state: NarrativeState) -> str:
    """Message 2: the world's active narratives."""
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
    return "# 已有自传记忆（active）\n" + (
        "\n".join(json.dumps(e, ensure_ascii=False, sort_keys=True) for e in existing) or "（无）"
    )


def run_autobiography(ctx: SleepContext, day: date, world_ids: Sequence[str] | None = None) -> AutoResult:
    out = AutoResult()
    start = day_bounds(day - timedelta(days=ctx.cfg.autobiography_window_days - 1), ctx.tz)[0]
    end = day_bounds(day, ctx.tz)[1]
    with ctx.store.connect() as conn:
        run = StageRun.open(conn, ctx, Stage.AUTOBIOGRAPHY, day, world_ids)
        worlds = _worlds_of(conn, day, run.previous)
        due = list(worlds)  # every world this place has (a filtered run leaves the others due)
        if world_ids is not None:
            worlds = [w for w in worlds if w in set(world_ids)]
        todo = [w for w in worlds if not run.reusable(w)]
        active = run.prepare(conn, todo)
        narratives: dict[str, list[Narrative]] = defaultdict(list)
        for r in conn.execute(
            select(autobiographical_memories)
            .where(autobiographical_memories.c.world_id.in_(todo))
            .order_by(autobiographical_memories.c.created_day, autobiographical_memories.c.memory_id)
        ).mappings():
            narratives[r["world_id"]].append(narrative_from_row(r))
        blocks, pinned = load_self_layer(conn, todo, ctx.cfg.pinned_top)
        current = {
            w: {"content": c, "updated_by": by}
            for w, c, by in conn.execute(
                select(self_blocks.c.world_id, self_blocks.c.content, self_blocks.c.updated_by).where(
                    self_blocks.c.name == SUMMARY_BLOCK, self_blocks.c.world_id.in_(todo)
                )
            )
        }
    worlds_seen = list(worlds)
    for world in worlds:
        if world not in todo:
            out.worlds += 1
            out.reused += 1  # done with this model and prompt: its narratives and summary stand
            continue
        plan = run.plans.get(world)
        undone = {c.narrative.id: copy.deepcopy(c.narrative) for c in plan.narratives} if plan else {}
        items = [undone.get(n.id, n) for n in narratives.get(world, [])]  # as of this day
        mems = _recent(active.get(world, []), start, end, ctx.tz)
        if not mems and not items:
            worlds_seen.remove(world)  # nothing as of this day (a record it had goes)
            continue
        out.worlds += 1
        state = NarrativeState(world, day, items, [m["id"] for m in mems])
        m1 = recent_memories_message(mems)
        fp = short_hash([prompts.PROMPT_VERSION, m1], length=32)
        loop = LoopResult()
        if mems:
            m2 = narratives_message(state)
            try:
                tool_loop(
                    ctx,
                    task="autobiography",
                    world_id=world,
                    system=system_for(ctx, blocks, pinned, world),
                    messages=[{"role": "user", "content": c} for c in (m1, m2, prompts.AUTO_INSTRUCTIONS)],
                    tools=[prompts.AUTO_SCHEMAS[n] for n in prompts.AUTO_TOOLS],
                    apply=state.apply,
                    describe=lambda c: f"{c.op} {c.narrative.id}",
                    result=loop,
                )
            except Exception as exc:
                run.failed(world, exc, {"llm_calls": loop.llm_calls, "changes_not_written": len(loop.changes)})
                raise
        created = sum(1 for c in loop.changes if c.op == "create")
        deprecated = sum(1 for c in loop.changes if c.op == "deprecate")
        rejected = len(loop.rejected)
        # Phase B, always (also with 0 narratives created).
        block = summary(
            list(state.items.values()), day, ctx.cfg.autobiography_recent_days, ctx.cfg.autobiography_summary_max_chars
        )
        before = plan.summary if plan is not None and plan.summary is not None else current.get(world, {})
        out.narratives_created += created
        out.narratives_deprecated += deprecated
        out.rejected += rejected
        out.llm_calls += loop.llm_calls
        out.restored += world in run.ahead
        out.per_world[world] = {
            "memories": len(mems),
            "narratives_created": created,
            "deprecated": deprecated,
            "rejected": rejected,
        }
        if loop.cut:
            out.worlds_truncated.append(world)
        refused = all_refused(loop)
        if refused:
            out.worlds_all_refused.append(world)
        record = run.record(
            world,
            # from a cut answer, or one whose every call was refused: no fingerprint (asked again)
            input_fp=None if loop.cut or refused else fp,
            input_chars=len(m1),
            llm_calls=loop.llm_calls,
            tool_calls=loop.tool_calls,
            applied=created + deprecated,
            rejected=rejected,
            created=created,
            detail={
                "narratives_created": created,
                "reply": loop.text[:500],
                "rejected_calls": loop.rejected,  # each refused call and its error, as light and deep record them
                SUMMARY_BEFORE: before or None,
                **({ANSWERS_CUT: loop.cut} if loop.cut else {}),
                **({ALL_REFUSED: True} if refused else {}),
            },
        )
        row = {
            "world_id": world,
            "name": SUMMARY_BLOCK,
            "content": block,
            "updated_by": str(Stage.AUTOBIOGRAPHY),
            "updated_at": utcnow(),
        }

        def write(conn: Any, changes: list[Any] = loop.changes, row: dict[str, Any] = row) -> None:
            write_narratives(conn, changes)
            upsert(conn, self_blocks, [row], keys=["world_id", "name"])

        run.commit(world, record, write, active=active.get(world, []))  # it writes no semantic memory
        out.summaries_written += 1
    run.finish(out.worlds, out.per_world, worlds_seen if world_ids is None else None, due)
    out.stale_days = sorted(run.stale_days)
    return out


def narratives(store: Store, world_id: str, include_deprecated: bool = False) -> list[Narrative]:
    """Recall's read of a world's autobiographical memory (no model call), oldest first."""
    q = select(autobiographical_memories).where(autobiographical_memories.c.world_id == world_id)
    if not include_deprecated:
        q = q.where(autobiographical_memories.c.status == "active")
    with store.connect() as conn:
        rows = conn.execute(q.order_by(autobiographical_memories.c.created_day, autobiographical_memories.c.memory_id))
        return [narrative_from_row(r) for r in rows.mappings()]
