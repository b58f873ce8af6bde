"""Seed 003 semantic memory snapshots: the active set of each world after a day's deep sleep, and
the diff between any two days (what was created, deprecated, merged, modified). Reads only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

from sqlalchemy import select

from memory_pipeline.lib.store import Store
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.memory import memories_by_id
from memory_pipeline.sleep.order import DAY_ROW
from memory_pipeline.sleep.tables import semantic_memories, sleep_runs
from memory_pipeline.sleep.tables import semantic_memory_snapshots as snaps


@dataclass
class SnapshotDiff:
    world_id: str
    before: date
    after: date
    created: list[str] = field(default_factory=list)
    deprecated: list[str] = field(default_factory=list)
    merged: dict[str, str] = field(default_factory=dict)  # id -> merged into
    modified: list[str] = field(default_factory=list)


def snapshot(store: Store, world_id: str, day: date) -> dict[str, dict[str, object]]:
    with store.connect() as conn:
        rows = conn.execute(select(snaps).where(snaps.c.world_id == world_id, snaps.c.day == day)).mappings()
        return {r["memory_id"]: dict(r) for r in rows}


class SnapshotMissing(LookupError):
    """A side of a diff has no snapshot to compare: it names the day or the world."""


def _check_sides(store: Store, world_id: str, days: Sequence[date]) -> None:
    """Each day has a snapshot (its deep sleep ran), the world has semantic memory, and deep sleep
    did not refuse it on either day: otherwise a diff would report everything (or nothing) changed."""
    with store.connect() as conn:
        known = (
            conn.execute(
                select(semantic_memories.c.memory_id).where(semantic_memories.c.world_id == world_id).limit(1)
            ).first()
            or conn.execute(select(snaps.c.day).where(snaps.c.world_id == world_id).limit(1)).first()
        )
        if not known:
            raise SnapshotMissing(f"unknown world {world_id!r}: it has no semantic memory")
        for day in days:
            runs: dict[str, str] = dict(
                conn.execute(
                    select(sleep_runs.c.world_id, sleep_runs.c.status).where(
                        sleep_runs.c.stage == str(Stage.DEEP),
                        sleep_runs.c.day == day,
                        sleep_runs.c.world_id.in_([DAY_ROW, world_id]),
                    )
                )
                .tuples()
                .all()
            )
            if DAY_ROW not in runs and not conn.execute(select(snaps.c.day).where(snaps.c.day == day).limit(1)).first():
                raise SnapshotMissing(f"no snapshot of {day}: deep sleep has not run that day")
            if runs.get(world_id) == "refused":
                raise SnapshotMissing(
                    f"world {world_id!r} has no snapshot of {day}: deep sleep refused it that day (see sleep status)"
                )


def diff(store: Store, world_id: str, before: date, after: date) -> SnapshotDiff:
    """What changed between two days' snapshots of a world; SnapshotMissing when a side has none."""
    _check_sides(store, world_id, [before, after])
    a, b = snapshot(store, world_id, before), snapshot(store, world_id, after)
    out = SnapshotDiff(world_id, before, after, created=sorted(set(b) - set(a)))
    gone = sorted(set(a) - set(b))
    with store.connect() as conn:
        live = memories_by_id(conn, gone)
    for mid in gone:
        m = live.get(mid)
        if m is not None and m.merged_into:
            out.merged[mid] = m.merged_into
        else:
            out.deprecated.append(mid)
    out.modified = sorted(
        mid
        for mid in set(a) & set(b)
        if (a[mid]["content"], a[mid]["type"], a[mid]["source_sessions"])
        != (b[mid]["content"], b[mid]["type"], b[mid]["source_sessions"])
    )
    return out
