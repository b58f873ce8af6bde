"""Seed 003 deep sleep (03:00 CST, partition D): three rounds in order over every world's active
semantic memory (contradiction + expiry, split, dedupe-merge), message 1 built once per batch and
sent byte-identical in every round, message 1.5 the cumulative change log in the seed's text, the
size bands, one JSON log per round (files, never the database), and the day's snapshot. Day D works on
the set as of D (D-1's snapshot plus D's light-sleep writes and what `remember` wrote on D or
before): a day done before is reused; run again where later places are done, the world is first
put back to before D's deep sleep (sleep/order.py). A world's changes, its snapshot and its state
record commit in one transaction."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Date, and_, delete, func, insert, literal, select

from memory_pipeline.lib.ids import path_segment
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.llm.at_once import each_world
from memory_pipeline.lib.text import short_hash
from memory_pipeline.lib.timeutil import day_bounds
from memory_pipeline.sleep import prompts
from memory_pipeline.sleep.context import LoopResult, SleepContext, memory_loop, worlds_at_once
from memory_pipeline.sleep.light import system_for
from memory_pipeline.sleep.logic import (
    DEEP_TOOLS,
    ROUNDS,
    Change,
    ChangeLog,
    Memory,
    MemoryState,
    MemoryStatus,
    Rules,
    SizeBand,
    Stage,
    message_one,
    render_changes,
    size_band,
)
from memory_pipeline.sleep.memory import Provenance, load_self_layer, write_changes
from memory_pipeline.sleep.order import DAY_ROW
from memory_pipeline.sleep.runs import ANSWERS_CUT, StageRun
from memory_pipeline.sleep.tables import semantic_memories, semantic_memory_snapshots, sleep_runs

log = logging.getLogger(__name__)


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
    error: str | None = None  # the round a failure interrupted: what failed (nothing of the attempt is written)
    cut: int = 0  # answers the provider cut at the output limit (finish_reason length)


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
    restored: int = 0  # worlds put back to before this day's deep sleep first (later places were done)
    stale_days: list[date] = field(default_factory=list)  # days whose later records those restores made stale
    rounds: dict[str, list[RoundRecord]] = field(default_factory=dict)  # world -> records
    log_files: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # world -> why (over the 300k limit)
    empty: list[str] = field(default_factory=list)  # worlds with no memory as of the day: no call
    # Worlds whose record was built from an answer the provider cut (the next run asks them again).
    worlds_truncated: list[str] = field(default_factory=list)
    worlds_at_once: int = 0  # the threads that asked the model (memory.sleep.worlds_at_once; one on SQLite)


@dataclass
class _Asked:
    """One world's deep sleep: decided before the run asks, its rounds' records and writes after."""

    state: MemoryState
    memories: list[Memory]  # the world's active set as of the day, before any round
    system: str
    band: SizeBand
    fp: str
    records: list[RoundRecord] = field(default_factory=list)
    writes: list[tuple[Provenance, list[Change]]] = field(default_factory=list)


def _batches(memories: Sequence[Memory], band: SizeBand) -> list[tuple[str | None, list[Memory]]]:
    if band != SizeBand.BATCHED:
        return [(None, list(memories))]
    by_type: dict[str, list[Memory]] = {}
    for m in memories:
        by_type.setdefault(m.type, []).append(m)
    return [(t, by_type[t]) for t in sorted(by_type)]


def _worlds_of(conn: Any, day: date, previous: dict[str, Any]) -> list[str]:
    """Worlds with a memory of ``day`` or before (active or not: a restore may bring one back), and
    those with a record of this day (a world with nothing left as of it gets its empty snapshot)."""
    q = select(semantic_memories.c.world_id).where(semantic_memories.c.created_day <= day).distinct()
    return sorted(set(conn.execute(q).scalars()) | (set(previous) - {DAY_ROW}))


def run_deep_sleep(ctx: SleepContext, day: date, world_ids: Sequence[str] | None = None) -> DeepResult:
    out = DeepResult()
    with ctx.store.connect() as conn:
        run = StageRun.open(conn, ctx, Stage.DEEP, day, world_ids)
        worlds = _worlds_of(conn, day, run.previous)
        due = list(worlds)  # every world this place has (a filtered run leaves the others due)
        if world_ids is not None:
            worlds = [w for w in worlds if w in set(world_ids)]
        todo = [w for w in worlds if not run.reusable(w)]
        active = run.prepare(conn, todo)
        taken = run.taken_ids(conn, todo)
        blocks, pinned = load_self_layer(conn, todo, ctx.cfg.pinned_top)
        last_out = _last_outputs(conn, day)
    cfg = ctx.cfg
    ones = {w: message_one(active.get(w, []), ctx.tz) for w in todo}
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
    worlds_seen = list(worlds)
    asked: dict[str, _Asked] = {}
    for world in worlds:
        memories = active.get(world, [])
        if world in todo and not memories and world not in run.previous:
            worlds_seen.remove(world)  # nothing as of this day: no snapshot, no record
            continue
        if world in too_big:
            # No snapshot for a refused day: one left by an earlier done run would read as done.
            def unsnap(conn: Any, world: str = world) -> None:
                s = semantic_memory_snapshots.c
                conn.execute(delete(semantic_memory_snapshots).where(s.day == day, s.world_id == world))

            out.restored += world in run.ahead
            run.refused(world, out.refused[world], too_big[world], unsnap)
            continue
        out.worlds += 1
        if world not in todo:
            out.reused += 1  # done with this model and prompt: its snapshot stands
            continue
        out.restored += world in run.ahead
        fp = short_hash([prompts.PROMPT_VERSION, ctx.llm.model, ones[world]], length=32)
        state = MemoryState(world, memories, salt=f"deep:{day}", taken=taken.get(world, ()))
        if not memories or (fp == last_out.get(world) and not ctx.force):
            out.reused += 1  # nothing new since the previous day's deep sleep (or nothing at all): no call
            if not memories:
                out.empty.append(world)
            _commit(run, state, day, fp, fp, [], [], reused=True)
            continue
        band = size_band(len(ones[world]), cfg.deep_warn_chars, cfg.deep_batch_chars, cfg.deep_refuse_chars)
        if band == SizeBand.WARN:
            log.warning(  # the thresholds as configured (memory.sleep.deep_warn_chars, deep_batch_chars)
                "deep sleep %s: world %s: active memory JSON is %s characters (warn band %s..%s)",
                day,
                world,
                len(ones[world]),
                cfg.deep_warn_chars,
                cfg.deep_batch_chars,
                extra={"size_band": band, "chars": len(ones[world])},  # a caller running many nights may count them
            )
            out.warned.append(world)
        if band == SizeBand.BATCHED:
            out.batched.append(world)
        asked[world] = _Asked(state, list(memories), system_for(ctx, blocks, pinned, world), band, fp)

    def ask(world: str, llm: LLMClient) -> _Asked:
        """The world's rounds, in a thread of its own when worlds run at once (its own client)."""
        a = asked[world]
        wctx = replace(ctx, llm=llm)
        for batch_type, batch in _batches(a.memories, a.band):
            _run_batch(wctx, day, a.state, a.system, batch, batch_type, end_of_day, a.records, a.writes)
        return a

    def failed(world: str, exc: BaseException) -> None:
        # Nothing of the attempt is written; its round log is, so an operator sees what happened.
        if isinstance(exc, Exception):
            a = asked[world]
            out.log_files += write_round_logs(ctx.cfg.logs(), day, world, a.records, f"{type(exc).__name__}: {exc}")
            run.failed(world, exc, {"rounds_run": len(a.records), "changes_not_written": len(a.state.changes)})

    def write(world: str, a: _Asked) -> None:
        out.rounds[world] = a.records
        out.llm_calls += sum(r.llm_calls for r in a.records)
        out.changes += sum(r.applied for r in a.records)
        out.rejected += sum(len(r.rejected) for r in a.records)
        cut = sum(r.cut for r in a.records)
        if cut:
            out.worlds_truncated.append(world)
        # From a cut answer: no output fingerprint, so the next day's deep sleep does not take this
        # set as consolidated already (and this record is asked again: StageRun.reusable).
        whole = short_hash([prompts.PROMPT_VERSION, ctx.llm.model, message_one(a.state.active(), ctx.tz)], length=32)
        out_fp = None if cut else whole
        _commit(run, a.state, day, a.fp, out_fp, a.records, a.writes)
        out.log_files += write_round_logs(ctx.cfg.logs(), day, world, a.records)

    out.worlds_at_once = each_world(ctx.llm, list(asked), worlds_at_once(ctx), ask, write, failed)
    refused = {w: {"refused": r} for w, r in out.refused.items()}
    run.finish(out.worlds, refused, worlds_seen if world_ids is None else None, due)
    out.snapshot_rows = run.snapshot_rows
    out.stale_days = sorted(run.stale_days)
    return out


def _commit(
    run: StageRun,
    state: MemoryState,
    day: date,
    fp: str,
    out_fp: str | None,
    records: list[RoundRecord],
    writes: list[tuple[Provenance, list[Change]]],
    reused: bool = False,
) -> None:
    """The world's changes, its snapshot of the day (its set after them) and its state record, in one
    transaction (with the world's restore, when later places were done)."""
    active = state.active()
    written = 0
    cut = sum(r.cut for r in records)

    def write(conn: Any) -> None:
        nonlocal written
        for prov, changes in writes:
            write_changes(conn, changes, prov)
        written = write_snapshot(conn, state.world_id, day)

    record = run.record(
        state.world_id,
        input_fp=fp,
        input_chars=sum(r.input_chars for r in records),
        llm_calls=sum(r.llm_calls for r in records),
        tool_calls=sum(r.tool_calls for r in records),
        applied=sum(r.applied for r in records),
        rejected=sum(len(r.rejected) for r in records),
        detail={
            "output_fp": out_fp,
            "reused": reused,
            "rounds": len(records),
            **({ANSWERS_CUT: cut} if cut else {}),
        },
    )
    run.commit(state.world_id, record, write, active=active, taken=state.taken)
    run.snapshot_rows += written


def write_snapshot(conn: Connection, world: str, day: date) -> int:
    """The world's snapshot of ``day`` (replacing one written before): its active memories of that day
    or before as the store holds them in the caller's transaction, after the day's changes, copied
    inside the database (a year's run writes over a million rows; none goes through Python). The
    rows written."""
    s, m = semantic_memory_snapshots.c, semantic_memories.c
    conn.execute(delete(semantic_memory_snapshots).where(s.day == day, s.world_id == world))
    live = select(
        literal(day, Date).label("day"), m.world_id, m.memory_id, m.type, m.content, m.source_sessions, m.observed_at
    ).where(m.world_id == world, m.status == MemoryStatus.ACTIVE, m.created_day <= day)
    names = ["day", "world_id", "memory_id", "type", "content", "source_sessions", "observed_at"]
    return int(conn.execute(insert(semantic_memory_snapshots).from_select(names, live)).rowcount)


def _last_outputs(conn: Connection, day: date) -> dict[str, str | None]:
    """Each world's active-set fingerprint after its newest earlier deep sleep (one record per world
    read, whatever the history's length: a run over many days asks this every day)."""
    r = sleep_runs.c
    earlier = (r.stage == str(Stage.DEEP), r.day < day, r.world_id != DAY_ROW)
    newest = select(r.world_id, func.max(r.day).label("day")).where(*earlier).group_by(r.world_id).subquery()
    q = select(r.world_id, r.detail).join(newest, and_(r.world_id == newest.c.world_id, r.day == newest.c.day))
    return {w: (detail or {}).get("output_fp") for w, detail in conn.execute(q.where(*earlier))}


def refusal(world: str, chars: int, limit: int) -> str:
    return (
        f"world {world}: active memory JSON is {chars} characters, over the {limit} limit "
        f"(seed: > 300k 报错拒绝); refused before any call, nothing written"
    )


def _run_batch(
    ctx: SleepContext,
    day: date,
    state: MemoryState,
    system: str,
    batch: list[Memory],
    batch_type: str | None,
    end_of_day: Any,
    out: list[RoundRecord],
    writes: list[tuple[Provenance, list[Change]]],
) -> None:
    """The three rounds over one batch: a RoundRecord each in ``out`` (also the round a failure
    interrupts, with its error) and the round's changes, to write, in ``writes``."""
    one = message_one(batch, ctx.tz)  # built once: every round sends these exact bytes
    changes = ChangeLog(frozenset(m.id for m in batch))
    rules = Rules(Stage.DEEP, DEEP_TOOLS, end_of_day)
    for index, round_ in enumerate(ROUNDS, start=1):
        prior = changes.count
        one_five = render_changes(changes, ctx.tz)
        msgs = [{"role": "user", "content": one}]
        if one_five:
            msgs.append({"role": "user", "content": one_five})
        # Message 2 (the program's pre-filter) is empty in this version, so it is not sent.
        msgs.append({"role": "user", "content": prompts.deep_message_three(round_)})
        active_count = len(batch) - len(changes.processed) + len(changes.new)
        loop = LoopResult()
        error = None
        try:
            memory_loop(
                ctx,
                state,
                rules,
                task=f"deep_sleep:{round_}",
                system=system,
                messages=msgs,
                tools=prompts.tools(DEEP_TOOLS),
                on_change=changes.record,
                result=loop,
            )
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
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
                    error=error,
                    cut=loop.cut,
                )
            )
        writes.append((Provenance(Stage.DEEP, day, str(round_)), list(loop.changes)))


def write_round_logs(
    folder: Path, day: date, world: str, records: list[RoundRecord], failure: str | None = None
) -> list[str]:
    """``deep_sleep_{day}_{round_index}_{round}.json`` per round under ``<log dir>/<world>/``: the
    day, round, active count, prior change count, tool calls, summary and change-log snapshot
    (with the batch type when batched). Files only, for troubleshooting; never the database. With
    ``failure`` (the attempt failed: nothing of it committed), each file says so, and the round
    the failure interrupted carries its error."""
    target = folder / path_segment(world)  # one folder per world, whatever its id holds
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for index, round_ in enumerate(ROUNDS, start=1):
        mine = [r for r in records if r.round_index == index]
        if not mine:
            continue
        entries: list[dict[str, Any]] = [
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
                "error": r.error,
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
        doc |= {"committed": failure is None, "failure": failure}
        path = target / f"deep_sleep_{day.isoformat()}_{index}_{round_}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=2), encoding="utf-8")
        tmp.replace(path)
        written.append(str(path))
    return written
