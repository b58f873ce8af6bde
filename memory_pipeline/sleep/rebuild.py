"""Seed 003 rebuild of one day from scratch (an operator's recovery action, no Dagster).

``restore(store, D)`` puts semantic memory back as it was before the sleep of D (with no other
write since, the snapshot of D-1), undoing what light sleep, deep sleep and earlier rebuilds did for
D and every later day: each memory they changed takes its state from before (reactivated or
reverted), each memory they created is deprecated. Narratives the autobiography wrote for D or
later are deprecated, those it deprecated are active again. Nothing is deleted: every change is a
version row (stage ``sleep_rebuild``, day D) whose reason says why. The stage records of D and
later turn ``stale``, so none of those days is reused: the caller re-runs D's light sleep, deep
sleep and autobiography, then every later day in order (``memory-pipeline sleep rebuild D
--through LAST`` does both; without ``--through`` the later days stay stale, their checks fail,
until ``sleep backfill`` runs them). One transaction: all of it or nothing."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date

from sqlalchemy import select, update

from memory_pipeline.lib.store import Store
from memory_pipeline.sleep.logic import (
    SLEEP_WRITERS,
    MemoryStatus,
    Op,
    Stage,
    VersionRow,
    restore_changes,
)
from memory_pipeline.sleep.memory import Provenance, memories_by_id, write_changes
from memory_pipeline.sleep.tables import (
    autobiographical_memories,
    semantic_memories,
    semantic_memory_snapshots,
    semantic_memory_versions,
    sleep_runs,
)


@dataclass
class RestoreResult:
    day: date
    reactivated: int = 0
    reverted: int = 0
    deprecated: int = 0
    narratives_deprecated: int = 0
    narratives_reactivated: int = 0
    stale_days: list[date] = field(default_factory=list)  # days with a stage record made stale
    # Per world with a snapshot of D-1: the restored active set against it (ids only there / only live).
    snapshot_day: date | None = None
    missing_from_live: dict[str, list[str]] = field(default_factory=dict)
    added_since: dict[str, list[str]] = field(default_factory=dict)


def restore(store: Store, day: date) -> RestoreResult:
    from memory_pipeline.sleep.autobiography import narrative_from_row, write_narratives
    from memory_pipeline.sleep.narrative import restore_narratives

    out = RestoreResult(day)
    v = semantic_memory_versions.c
    with store.begin() as conn:
        touched = select(v.memory_id).where(v.stage.in_([str(s) for s in SLEEP_WRITERS]), v.day >= day).distinct()
        ids = list(conn.execute(touched).scalars())
        current = memories_by_id(conn, ids)
        versions: dict[str, list[VersionRow]] = defaultdict(list)
        if current:
            q = (
                select(v.memory_id, v.stage, v.day, v.type, v.content, v.source_sessions)
                .add_columns(v.observed_at, v.status, v.merged_into, v.reason)
                .where(v.memory_id.in_(list(current)))
                .order_by(v.version_id)
            )
            for mid, *rest in conn.execute(q):
                versions[mid].append(VersionRow(*rest))
        changes = restore_changes(current, versions, day)
        write_changes(conn, changes, Provenance(Stage.REBUILD, day))
        for c in changes:
            if c.op == Op.DEPRECATE:
                out.deprecated += 1
            elif c.memory.status == MemoryStatus.ACTIVE and current[c.memory.id].status != MemoryStatus.ACTIVE:
                out.reactivated += 1
            else:
                out.reverted += 1

        rows = conn.execute(
            select(autobiographical_memories).where(
                (autobiographical_memories.c.created_day >= day) | (autobiographical_memories.c.deprecated_day >= day)
            )
        ).mappings()
        narrative_changes = restore_narratives([narrative_from_row(r) for r in rows], day)
        write_narratives(conn, narrative_changes)
        out.narratives_deprecated = sum(1 for c in narrative_changes if c.op == "deprecate")
        out.narratives_reactivated = sum(1 for c in narrative_changes if c.op == "restore")

        stale = select(sleep_runs.c.day).where(sleep_runs.c.day >= day, sleep_runs.c.status == "done").distinct()
        out.stale_days = sorted(conn.execute(stale).scalars())
        conn.execute(update(sleep_runs).where(sleep_runs.c.day >= day).values(status="stale"))

        out.snapshot_day = conn.execute(
            select(semantic_memory_snapshots.c.day)
            .where(semantic_memory_snapshots.c.day < day)
            .order_by(semantic_memory_snapshots.c.day.desc())
        ).scalar()
        if out.snapshot_day is not None:
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
    return out
