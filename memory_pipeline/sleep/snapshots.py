"""Seed 003 semantic memory snapshots: the active set of each world after a day's deep sleep, and
the diff between any two days (what was created, deprecated, merged, modified). Reads only."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from sqlalchemy import select

from memory_pipeline.lib.store import Store
from memory_pipeline.sleep.memory import memories_by_id
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


def diff(store: Store, world_id: str, before: date, after: date) -> SnapshotDiff:
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
