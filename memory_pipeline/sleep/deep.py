"""Seed 003 deep sleep (03:00 CST, partition D): three rounds in order over every world's active
semantic memory (contradiction + expiry, split, dedupe-merge), message 1 built once per batch and
sent byte-identical in every round, message 1.5 the cumulative change log in the seed's text, the
size bands, one JSON log per round (files, never the database), and the day's snapshot."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, update

from memory_pipeline.lib.text import short_hash
from memory_pipeline.lib.timeutil import day_bounds, utcnow
from memory_pipeline.sleep import prompts
from memory_pipeline.sleep.context import SleepContext, StageFailure, memory_loop
from memory_pipeline.sleep.light import DAY_ROW, _day_row, _previous, record_runs, system_for
from memory_pipeline.sleep.logic import (
    DEEP_TOOLS,
    ROUNDS,
    ChangeLog,
    Memory,
    MemoryState,
    Rules,
    SizeBand,
    Stage,
    message_one,
    render_changes,
    size_band,
)
from memory_pipeline.sleep.memory import Provenance, load_active, load_self_layer, taken_ids, worlds_with_memories
from memory_pipeline.sleep.tables import semantic_memory_snapshots, sleep_runs

log = logging.getLogger(__name__)
REFUSED = "refused"  # a world's sleep_runs status when deep sleep refused it (over the size limit)


@dataclass
class RoundRecord:
    round_index: int
    round: str
    batch_type: str | None
    active_count: int
    prior_changes: int
    llm_calls: int
    tool_calls: int
    applied: int
    rejected: list[dict[str, Any]]
    summary: str
    change_log: str
    message_one_chars: int
    message_one_sha: str
    input_chars: int


@dataclass
class DeepResult:
    worlds: int = 0
    reused: int = 0
    warned: list[str] = field(default_factory=list)
    batched: list[str] = field(default_factory=list)
    llm_calls: int = 0
    changes: int = 0
    rejected: int = 0
    snapshot_rows: int = 0
    marked_stale: list[str] = field(default_factory=list)
    rounds: dict[str, list[RoundRecord]] = field(default_factory=dict)  # world -> records
    log_files: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # world -> why (over the 300k limit)
    empty: list[str] = field(default_factory=list)  # worlds with no memory as of the day: no call


def _batches(memories: Sequence[Memory], band: SizeBand) -> list[tuple[str | None, list[Memory]]]:
    if band != SizeBand.BATCHED:
        return [(None, list(memories))]
    by_type: dict[str, list[Memory]] = {}
    for m in memories:
        by_type.setdefault(m.type, []).append(m)
    return [(t, by_type[t]) for t in sorted(by_type)]


def check_order(conn: Any, day: date) -> None:
    """Day D needs D's light sleep, and D-1's deep sleep unless D is the first deep-sleep day."""
    rows = conn.execute(
        select(sleep_runs.c.stage, sleep_runs.c.day, sleep_runs.c.status).where(sleep_runs.c.world_id == DAY_ROW)
    ).all()
    light = {d for s, d, st in rows if s == Stage.LIGHT and st == "done"}
    deep = {d: st for s, d, st in rows if s == Stage.DEEP}
    if day not in light:
        raise StageFailure(f"deep sleep {day}: light sleep of {day} has not run (run it first: days go in order)")
    earlier = [d for d in deep if d < day]
    prev = day - timedelta(days=1)
    if earlier and deep.get(prev) != "done":
        state = deep.get(prev, "missing")
        raise StageFailure(
            f"deep sleep {day}: deep sleep of {prev} is {state} (day N's deep sleep needs day N-1's; "
            f"run {prev} first, or backfill the range in order)"
        )


def run_deep_sleep(ctx: SleepContext, day: date, world_ids: Sequence[str] | None = None) -> DeepResult:
    out = DeepResult()
    with ctx.store.connect() as conn:
        check_order(conn, day)
        worlds = worlds_with_memories(conn)
        if world_ids is not None:
            worlds = [w for w in worlds if w in set(world_ids)]
        active = load_active(conn, worlds, upto_day=day)
        taken = taken_ids(conn, worlds)
        blocks, pinned = load_self_layer(conn, worlds, ctx.cfg.pinned_top)
        previous = _previous(conn, Stage.DEEP, day)
        last_out = _last_outputs(conn, day)
    cfg = ctx.cfg
    ones = {w: message_one(active.get(w, []), ctx.tz) for w in worlds}
    # The size check is per world (seed: > 300k 报错拒绝): an oversized world is refused before any
    # call and writes nothing (no change, no snapshot row), its record says so; the others sleep.
    too_big = {
        w: len(m)
        for w, m in ones.items()
        if size_band(len(m), cfg.deep_warn_chars, cfg.deep_batch_chars, cfg.deep_refuse_chars) == SizeBand.REFUSED
    }
    for w, n in sorted(too_big.items()):
        reason = refusal(w, n, cfg.deep_refuse_chars)
        log.error("deep sleep %s: %s", day, reason)
        out.refused[w] = reason
    end_of_day = day_bounds(day, ctx.tz)[1]
    records = [_refused_row(day, w, n, out.refused[w]) for w, n in sorted(too_big.items())]
    for world in worlds:
        if world in too_big:
            continue
        out.worlds += 1
        memories = active.get(world, [])
        if not memories:  # every memory of the world is from a later day: nothing to ask about
            out.empty.append(world)
            records.append(_state_row(day, world, "", "", [], empty=True))
            continue
        fp = short_hash([prompts.PROMPT_VERSION, ones[world]], length=32)
        prev = previous.get(world)
        unchanged = fp == last_out.get(world) or (prev and prev["detail"].get("output_fp") == fp)
        if unchanged and not ctx.force:
            out.reused += 1  # consolidated already and nothing new since: no call
            records.append(_state_row(day, world, fp, fp, [], reused=True))
            continue
        band = size_band(len(ones[world]), cfg.deep_warn_chars, cfg.deep_batch_chars, cfg.deep_refuse_chars)
        if band == SizeBand.WARN:
            log.warning(
                "deep sleep %s: world %s: active memory JSON is %s characters (10k..100k)", day, world, len(ones[world])
            )
            out.warned.append(world)
        if band == SizeBand.BATCHED:
            out.batched.append(world)
        system = system_for(ctx, blocks, pinned, world)
        state = MemoryState(world, memories, salt=f"deep:{day}", taken=taken.get(world, ()))
        world_records: list[RoundRecord] = []
        for batch_type, batch in _batches(memories, band):
            world_records += _run_batch(ctx, day, state, system, batch, batch_type, end_of_day)
        out.rounds[world] = world_records
        out.llm_calls += sum(r.llm_calls for r in world_records)
        out.changes += sum(r.applied for r in world_records)
        out.rejected += sum(len(r.rejected) for r in world_records)
        out.log_files += write_round_logs(ctx.cfg.logs(), day, world, world_records)
        out_fp = short_hash([prompts.PROMPT_VERSION, message_one(state.active(), ctx.tz)], length=32)
        records.append(_state_row(day, world, fp, out_fp, world_records))
    # The snapshot of every world (also the unchanged ones), then the state records, in one transaction.
    with ctx.store.connect() as conn:
        now_active = load_active(conn, worlds, upto_day=day)
    snap = [
        {
            "day": day,
            "world_id": w,
            "memory_id": m.id,
            "type": m.type,
            "content": m.content,
            "source_sessions": list(m.source_sessions),
            "observed_at": m.observed_at,
        }
        for w in worlds
        if w not in too_big
        for m in now_active.get(w, [])
    ]
    records.append(_day_row(Stage.DEEP, day, out.worlds, {w: {"refused": r} for w, r in out.refused.items()}))
    with ctx.store.begin() as conn:
        conn.execute(delete(semantic_memory_snapshots).where(semantic_memory_snapshots.c.day == day))
        if snap:
            conn.execute(semantic_memory_snapshots.insert(), snap)
        record_runs(conn, records, worlds if world_ids is None else None)
        # Rebuilding D makes every later deep-sleep day stale: it ran on a set D no longer had.
        later = select(sleep_runs.c.day).where(
            sleep_runs.c.stage == str(Stage.DEEP),
            sleep_runs.c.day > day,
            sleep_runs.c.status == "done",
            sleep_runs.c.world_id == DAY_ROW,
        )
        out.marked_stale = sorted(d.isoformat() for d in conn.execute(later).scalars())
        if out.marked_stale:
            conn.execute(
                update(sleep_runs)
                .where(sleep_runs.c.stage == str(Stage.DEEP), sleep_runs.c.day > day)
                .values(status="stale")
            )
    out.snapshot_rows = len(snap)
    return out


def _last_outputs(conn: Any, day: date) -> dict[str, str]:
    """Each world's active-set fingerprint after its newest earlier deep sleep."""
    q = (
        select(sleep_runs.c.world_id, sleep_runs.c.day, sleep_runs.c.detail)
        .where(sleep_runs.c.stage == str(Stage.DEEP), sleep_runs.c.day < day, sleep_runs.c.world_id != DAY_ROW)
        .order_by(sleep_runs.c.day)
    )
    return {w: (detail or {}).get("output_fp") for w, _d, detail in conn.execute(q)}


def refusal(world: str, chars: int, limit: int) -> str:
    return (
        f"world {world}: active memory JSON is {chars} characters, over the {limit} limit "
        f"(seed: > 300k 报错拒绝); refused before any call, nothing written"
    )


def _refused_row(day: date, world: str, chars: int, reason: str) -> dict[str, Any]:
    row = _state_row(day, world, "", "", [])
    row |= {"status": REFUSED, "input_chars": chars, "detail": {"refused": reason, "message_one_chars": chars}}
    return row


def _state_row(
    day: date,
    world: str,
    fp: str,
    out_fp: str,
    records: list[RoundRecord],
    reused: bool = False,
    empty: bool = False,
) -> dict[str, Any]:
    return {
        "stage": str(Stage.DEEP),
        "day": day,
        "world_id": world,
        "status": "done",
        "input_fp": fp,
        "sessions": 0,
        "sessions_truncated": 0,
        "input_chars": sum(r.input_chars for r in records),
        "llm_calls": sum(r.llm_calls for r in records),
        "tool_calls": sum(r.tool_calls for r in records),
        "applied": sum(r.applied for r in records),
        "rejected": sum(len(r.rejected) for r in records),
        "created": 0,
        "detail": {"output_fp": out_fp, "reused": reused, "rounds": len(records)}
        | ({"empty": "no active memory as of this day: not asked"} if empty else {}),
        "finished_at": utcnow(),
    }


def _run_batch(
    ctx: SleepContext,
    day: date,
    state: MemoryState,
    system: str,
    batch: list[Memory],
    batch_type: str | None,
    end_of_day: Any,
) -> list[RoundRecord]:
    one = message_one(batch, ctx.tz)  # built once: every round sends these exact bytes
    changes = ChangeLog(frozenset(m.id for m in batch))
    rules = Rules(Stage.DEEP, DEEP_TOOLS, end_of_day)
    out = []
    for index, round_ in enumerate(ROUNDS, start=1):
        prior = changes.count
        one_five = render_changes(changes, ctx.tz)
        msgs = [{"role": "user", "content": one}]
        if one_five:
            msgs.append({"role": "user", "content": one_five})
        # Message 2 (the program's pre-filter) is empty in this version, so it is not sent.
        msgs.append({"role": "user", "content": prompts.deep_message_three(round_)})
        active_count = len(batch) - len(changes.processed) + len(changes.new)
        loop = memory_loop(
            ctx,
            state,
            rules,
            Provenance(Stage.DEEP, day, str(round_)),
            task=f"deep_sleep:{round_}",
            system=system,
            messages=msgs,
            tools=prompts.tools(DEEP_TOOLS),
            on_change=changes.record,
        )
        out.append(
            RoundRecord(
                round_index=index,
                round=str(round_),
                batch_type=batch_type,
                active_count=active_count,
                prior_changes=prior,
                llm_calls=loop.llm_calls,
                tool_calls=loop.tool_calls,
                applied=len(loop.changes),
                rejected=loop.rejected,
                summary=loop.text,
                change_log=render_changes(changes, ctx.tz),
                message_one_chars=len(one),
                message_one_sha=short_hash([one], length=64),
                input_chars=len(system) + sum(len(m["content"]) for m in msgs),
            )
        )
    return out


def write_round_logs(folder: Path, day: date, world: str, records: list[RoundRecord]) -> list[str]:
    """``deep_sleep_{day}_{round_index}_{round}.json`` per round under ``<log dir>/<world>/``: the
    day, round, active count, prior change count, tool calls, summary and change-log snapshot
    (with the batch type when batched). Files only, for troubleshooting; never the database."""
    target = folder / world
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for index, round_ in enumerate(ROUNDS, start=1):
        mine = [r for r in records if r.round_index == index]
        if not mine:
            continue
        entries = [
            {
                "day": day.isoformat(),
                "world_id": world,
                "round": str(round_),
                "round_index": index,
                "batch_type": r.batch_type,
                "active_count": r.active_count,
                "prior_changes": r.prior_changes,
                "tool_calls": r.tool_calls,
                "applied": r.applied,
                "rejected": r.rejected,
                "summary": r.summary,
                "change_log": r.change_log,
                "message_one_chars": r.message_one_chars,
                "message_one_sha256": r.message_one_sha,
                "input_chars": r.input_chars,
            }
            for r in mine
        ]
        doc = (
            entries[0]
            if len(entries) == 1 and entries[0]["batch_type"] is None
            else {
                "day": day.isoformat(),
                "world_id": world,
                "round": str(round_),
                "round_index": index,
                "active_count": sum(e["active_count"] for e in entries),
                "prior_changes": sum(e["prior_changes"] for e in entries),
                "tool_calls": sum(e["tool_calls"] for e in entries),
                "summary": " | ".join(e["summary"] for e in entries if e["summary"]),
                "change_log": "\n\n".join(e["change_log"] for e in entries if e["change_log"]),
                "batches": entries,
            }
        )
        path = target / f"deep_sleep_{day.isoformat()}_{index}_{round_}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=2), encoding="utf-8")
        tmp.replace(path)
        written.append(str(path))
    return written
