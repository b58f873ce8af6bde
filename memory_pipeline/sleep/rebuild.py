"""Seed 003 restore to before a place in the day order (no Dagster): the rebuild of a day.

``restore(store, D)`` (an operator's `memory-pipeline sleep rebuild D`) puts semantic memory back
as it was before the sleep of D (with no other write since, the snapshot of D-1), undoing what light
sleep, deep sleep and earlier rebuilds did for D and every later day: each memory they changed
takes its state from before (reactivated or reverted), each memory they created is deprecated.
Narratives the autobiography wrote for D or later are deprecated, those it deprecated are active
again, and ``self_blocks.autobiography_summary`` is the one the autobiography of D-1 left. Nothing
is deleted: every change is a version row (stage ``sleep_rebuild``, day D) whose reason says why.
The stage records of D and later turn ``stale``, so none of those days is reused: the caller re-runs
D's light sleep, deep sleep and autobiography, then every later day in order (``memory-pipeline sleep
rebuild D --through LAST`` does both; without ``--through`` the later days stay stale, their checks
fail, until ``sleep backfill`` or the next nightly tick runs them). One transaction: all or nothing.

A stage that runs where its place (or a later one) is already done does the same for its worlds,
from its own place (``plan_restore`` / ``write_restore``, in the stage's own transaction), and
works on the restored set (``as_of``): sleep/order.py."""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.engine import Connection

from memory_pipeline.lib.store import Store, upsert
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.sleep.logic import (
    SLEEP_WRITERS,
    Change,
    Memory,
    MemoryStatus,
    Op,
    Stage,
    VersionRow,
    restore_changes,
)
from memory_pipeline.sleep.memory import Provenance, load_active, memories_by_id, write_changes
from memory_pipeline.sleep.narrative import NarrativeChange, restore_narratives
from memory_pipeline.sleep.order import (
    DAY_ROW,
    STAGES,
    Position,
    RunStatus,
    gap_problem,
    order_problem,
    restore_provenance,
    version_position,
)
from memory_pipeline.sleep.tables import (
    autobiographical_memories,
    self_blocks,
    semantic_memories,
    semantic_memory_snapshots,
    semantic_memory_versions,
    sleep_runs,
)

SUMMARY_BLOCK = "autobiography_summary"
# An autobiography record's detail key: the summary block as it was before that run wrote it
# ({"content", "updated_by"}, or None: there was none), what a restore to before it puts back.
SUMMARY_BEFORE = "summary_before"

if TYPE_CHECKING:
    from memory_pipeline.sleep.carry import ActiveCarry


@dataclass
class WorldRestore:
    """What putting one world back to before a place writes."""

    memory: list[Change] = field(default_factory=list)
    narratives: list[NarrativeChange] = field(default_factory=list)
    summary: dict[str, Any] | None = None  # the summary block to put back ({} : remove it)


@dataclass
class RestoreResult:
    day: date
    reactivated: int = 0
    reverted: int = 0
    deprecated: int = 0
    unchanged: int = 0  # undone history, the state as it was: a row records it (a later restore reads it)
    narratives_deprecated: int = 0
    narratives_reactivated: int = 0
    stale_days: list[date] = field(default_factory=list)  # days with a stage record made stale
    # Per world with a snapshot of D-1: the restored active set against it (ids only there / only live).
    snapshot_day: date | None = None
    missing_from_live: dict[str, list[str]] = field(default_factory=dict)
    added_since: dict[str, list[str]] = field(default_factory=dict)


def _before(position: Position) -> str:
    return f"the sleep of {position.day}" if position.rank == 0 else str(position)


def plan_restore(conn: Connection, position: Position, worlds: Sequence[str] | None) -> dict[str, WorldRestore]:
    """What a restore to before ``position`` would write, by world (``worlds``; None: every world
    something is to undo for). Reads only."""
    from memory_pipeline.sleep.autobiography import narrative_from_row

    v = semantic_memory_versions.c
    day = position.day
    touched = select(v.memory_id).where(v.stage.in_([str(s) for s in SLEEP_WRITERS]), v.day >= day)
    if worlds is not None:
        touched = touched.where(v.world_id.in_(list(worlds)))
    current = memories_by_id(conn, conn.execute(touched.distinct()).scalars())
    versions: dict[str, list[VersionRow]] = defaultdict(list)
    if current:
        q = (
            select(v.memory_id, v.stage, v.day, v.type, v.content, v.source_sessions)
            .add_columns(v.observed_at, v.status, v.merged_into, v.reason, v.round)
            .where(v.memory_id.in_(list(current)))
            .order_by(v.version_id)
        )
        for mid, *rest in conn.execute(q):
            versions[mid].append(VersionRow(*rest))

    def undone(row: VersionRow) -> bool:
        at = version_position(row.stage, row.day, row.round)
        return at is not None and at >= position

    out: dict[str, WorldRestore] = defaultdict(WorldRestore)
    for c in restore_changes(current, versions, day, undone, _before(position)):
        out[c.memory.world_id].memory.append(c)
    a = autobiographical_memories.c
    nq = select(autobiographical_memories).where(or_(a.created_day >= day, a.deprecated_day >= day))
    if worlds is not None:
        nq = nq.where(a.world_id.in_(list(worlds)))
    rows = [narrative_from_row(r) for r in conn.execute(nq).mappings()]
    for nc in restore_narratives(rows, day):
        out[nc.narrative.world_id].narratives.append(nc)
    for world, before in _summaries_before(conn, day, worlds).items():
        out[world].summary = before
    return dict(out)


def _summaries_before(conn: Connection, day: date, worlds: Sequence[str] | None) -> dict[str, dict[str, Any]]:
    """Per world, the summary block before its earliest autobiography run of ``day`` or later."""
    r = sleep_runs.c
    q = select(r.world_id, r.day, r.detail).where(r.stage == str(Stage.AUTOBIOGRAPHY), r.day >= day)
    if worlds is not None:
        q = q.where(r.world_id.in_(list(worlds)))
    out: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for world, _day, detail in conn.execute(q.order_by(r.day)):
        if world in seen:
            continue
        seen.add(world)
        if isinstance(detail, dict) and SUMMARY_BEFORE in detail:  # a record from before it was kept: unchanged
            out[world] = detail[SUMMARY_BEFORE] or {}
    return out


def write_restore(conn: Connection, position: Position, plans: dict[str, WorldRestore]) -> None:
    """Write the plans: version rows, narratives, summary blocks (the caller marks what is stale)."""
    from memory_pipeline.sleep.autobiography import write_narratives

    if not plans:
        return
    day, round_ = restore_provenance(position)
    write_changes(conn, [c for p in plans.values() for c in p.memory], Provenance(Stage.REBUILD, day, round_))
    write_narratives(conn, [c for p in plans.values() for c in p.narratives])
    for world, p in plans.items():
        if p.summary is None:
            continue
        if p.summary:
            row = {"world_id": world, "name": SUMMARY_BLOCK, "updated_at": utcnow(), **p.summary}
            upsert(conn, self_blocks, [row], keys=["world_id", "name"])
        else:
            conn.execute(
                delete(self_blocks).where(self_blocks.c.world_id == world, self_blocks.c.name == SUMMARY_BLOCK)
            )


def _at_or_after(position: Position, include_own: bool) -> Any:
    r = sleep_runs.c
    same_day = [str(s) for s in STAGES[position.rank + (0 if include_own else 1) :]]
    return or_(r.day > position.day, and_(r.day == position.day, r.stage.in_(same_day)))


def mark_stale(conn: Connection, position: Position, worlds: Sequence[str] | None, include_own: bool) -> list[date]:
    """Done records after ``position`` (and at it, with ``include_own``) of ``worlds`` (None: all) and
    the day records there turn stale; returns the days touched."""
    r = sleep_runs.c
    where = [_at_or_after(position, include_own), r.status == RunStatus.DONE]
    mine = [r.world_id.in_([*worlds, DAY_ROW])] if worlds is not None else []
    days = sorted(set(conn.execute(select(r.day).where(*where, *mine)).scalars()))
    if days:
        conn.execute(update(sleep_runs).where(*where, *mine).values(status=str(RunStatus.STALE)))
    return days


def any_done_after(conn: Connection, position: Position, worlds: Sequence[str]) -> bool:
    """Whether ``worlds`` or the day records have a done record after ``position``: what
    :func:`mark_stale` (``include_own=False``) would find for any of them."""
    r = sleep_runs.c
    where = [_at_or_after(position, False), r.status == RunStatus.DONE, r.world_id.in_([*worlds, DAY_ROW])]
    return conn.execute(select(r.world_id).where(*where).limit(1)).first() is not None


def ahead(conn: Connection, position: Position, worlds: Sequence[str]) -> set[str]:
    """The worlds with a done record at ``position`` or later: a run there must restore them first."""
    if not worlds:
        return set()
    r = sleep_runs.c
    q = select(r.world_id).where(_at_or_after(position, True), r.status == RunStatus.DONE, r.world_id.in_(list(worlds)))
    return set(conn.execute(q.distinct()).scalars())


def as_of(
    conn: Connection,
    position: Position,
    worlds: Sequence[str],
    plans: dict[str, WorldRestore],
    carry: ActiveCarry | None = None,
) -> dict[str, list[Memory]]:
    """The active memories each world had before ``position``: the live set of the memories of its
    day or before (from a range run's ``carry`` where the store agrees), with the world's restore
    plan applied (where later places are done)."""
    if carry is not None:
        live = carry.active(conn, worlds, position.day)
    else:
        live = load_active(conn, worlds, upto_day=position.day)
    # Copies: a stage's state changes its memories in place, the plan must keep the restored state.
    restored = {c.memory.id: copy.deepcopy(c.memory) for p in plans.values() for c in p.memory}
    if not restored:
        return live
    later = set(
        conn.execute(
            select(semantic_memories.c.memory_id).where(
                semantic_memories.c.memory_id.in_(list(restored)), semantic_memories.c.created_day > position.day
            )
        ).scalars()
    )
    out: dict[str, list[Memory]] = {}
    for world in worlds:
        mine = {m.id: m for m in live.get(world, []) if m.id not in restored}
        for mid, m in restored.items():
            if m.world_id == world and m.status == MemoryStatus.ACTIVE and mid not in later:
                mine[mid] = m
        out[world] = [mine[k] for k in sorted(mine)]
    return out


def restore(store: Store, day: date, through: date | None = None) -> RestoreResult:
    """The operator's rebuild of ``day`` (its days re-run then up to ``through``): every world back
    to before the sleep of ``day``. Refused (StageFailure, nothing written) when ``day`` cannot run
    next (the place before it is not done), or when the re-run would leave a gap before the later
    days (``gap_problem``): the restore would have undone them for nothing."""
    from memory_pipeline.sleep.context import StageFailure
    from memory_pipeline.sleep.runs import day_statuses

    position = Position(day, 0)
    out = RestoreResult(day)
    with store.begin() as conn:
        statuses = day_statuses(conn)
        problem = order_problem(position, statuses) or gap_problem(statuses, day, through or day)
        if problem:
            raise StageFailure(
                f"rebuild of {day.isoformat()} refused: {problem}; nothing restored, nothing marked stale"
            )
        plans = plan_restore(conn, position, None)
        write_restore(conn, position, plans)
        for c in (c for p in plans.values() for c in p.memory):
            if c.op == Op.DEPRECATE:
                out.deprecated += 1
            elif c.note and "reactivated" in c.note:
                out.reactivated += 1
            elif c.note and "reverted" in c.note:
                out.reverted += 1
            else:
                out.unchanged += 1
        narratives = [c for p in plans.values() for c in p.narratives]
        out.narratives_deprecated = sum(1 for c in narratives if c.op == "deprecate")
        out.narratives_reactivated = sum(1 for c in narratives if c.op == "restore")
        out.stale_days = mark_stale(conn, position, None, include_own=True)
        _compare_with_snapshot(conn, out)
    return out


def _compare_with_snapshot(conn: Connection, out: RestoreResult) -> None:
    out.snapshot_day = conn.execute(
        select(semantic_memory_snapshots.c.day)
        .where(semantic_memory_snapshots.c.day < out.day)
        .order_by(semantic_memory_snapshots.c.day.desc())
    ).scalar()
    if out.snapshot_day is None:
        return
    snap: dict[str, set[str]] = defaultdict(set)
    for w, mid in conn.execute(
        select(semantic_memory_snapshots.c.world_id, semantic_memory_snapshots.c.memory_id).where(
            semantic_memory_snapshots.c.day == out.snapshot_day
        )
    ):
        snap[w].add(mid)
    live: dict[str, set[str]] = defaultdict(set)
    for w, mid in conn.execute(
        select(semantic_memories.c.world_id, semantic_memories.c.memory_id).where(
            semantic_memories.c.status == MemoryStatus.ACTIVE
        )
    ):
        live[w].add(mid)
    for w in sorted(set(snap) | set(live)):
        if snap[w] - live[w]:
            out.missing_from_live[w] = sorted(snap[w] - live[w])
        if live[w] - snap[w]:
            out.added_since[w] = sorted(live[w] - snap[w])
