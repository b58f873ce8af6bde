"""Seed 003 range runs: each world's active memories carried from one place to the next.

Every stage reads each of its worlds' whole active set at its place (deep sleep's message 1 is all
of it), so a year's catch-up read the same growing sets over a thousand times: a quarter of its
time went to reading and decoding rows it had itself just written. A range run (``sleep_stages``)
keeps, after a world's commit, the set that commit left, and the ids the world has used; the next
place takes it after one check against the store, with no content read.

The check is exact: the store's (memory id, version) pairs of the world's active memories as of the
place, against the carried ones. Every change of a memory (a stage's update, deprecate or merge, a
restore) raises its version, and the memory tool's delete removes its row, so any write the run did
not make itself since it kept the set (``remember``, a delete, a failed stage's unwritten change)
shows as a difference, and the world is read from the store as before. The ids are checked by their
count (the store's rows of the world, any status): ids are only ever added or deleted, never
renamed, and a missing one would only risk a new id colliding with it, which the primary key refuses."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date

from sqlalchemy import String, and_, case, cast, func, select
from sqlalchemy.engine import Connection

from memory_pipeline.sleep.logic import Memory, MemoryStatus
from memory_pipeline.sleep.memory import load_active, taken_ids
from memory_pipeline.sleep.tables import semantic_memories


@dataclass
class ActiveCarry:
    """One range run's carried sets, by world. A set is handed out once (``active``): the stage that
    takes it changes its memories in place, and only its commit (``keep``) carries it again."""

    sets: dict[str, list[Memory]] = field(default_factory=dict)
    taken: dict[str, set[str]] = field(default_factory=dict)
    taken_ok: set[str] = field(default_factory=set)  # worlds whose carried ids the last check confirmed
    hits: int = 0  # sets handed out from the carry
    misses: int = 0  # sets read from the store (none carried, or the check found a difference)

    def keep(self, world: str, active: Iterable[Memory], taken: set[str] | None = None) -> None:
        """After ``world``'s commit: its active set as that commit left it (and every id it has)."""
        self.sets[world] = sorted(active, key=lambda m: m.id)
        if taken is not None:
            self.taken[world] = set(taken)

    def active(self, conn: Connection, worlds: Sequence[str], day: date) -> dict[str, list[Memory]]:
        """``load_active(conn, worlds, upto_day=day)``, from the carry where the store agrees."""
        carried = [w for w in worlds if w in self.sets or w in self.taken]
        checks = _checks(conn, carried, day) if carried else {}
        out: dict[str, list[Memory]] = {}
        self.taken_ok = set()
        for w in carried:
            rows, pairs = checks.get(w, (0, frozenset()))
            if w in self.taken and len(self.taken[w]) == rows:
                self.taken_ok.add(w)
            mems = self.sets.pop(w, None)
            if mems is not None and pairs == {f"{m.id}:{m.version}" for m in mems}:
                out[w] = mems
        missing = [w for w in worlds if w not in out]
        self.hits += len(out)
        self.misses += len(missing)
        if missing:
            out |= load_active(conn, missing, upto_day=day)
        return {w: out[w] for w in worlds if out.get(w)}

    def taken_ids(self, conn: Connection, worlds: Sequence[str]) -> dict[str, set[str]]:
        """``taken_ids(conn, worlds)``: the carried ids where the last ``active`` check confirmed them."""
        out = {w: self.taken[w] for w in worlds if w in self.taken_ok}
        rest = [w for w in worlds if w not in out]
        if rest:
            out |= taken_ids(conn, rest)
        return out


def _checks(conn: Connection, worlds: Sequence[str], day: date) -> dict[str, tuple[int, frozenset[str]]]:
    """Per world, in one query: its rows of any status (the ids it has used), and the ``id:version``
    of its active memories of ``day`` or before (ids never hold ``:`` or ``,``: lib/ids)."""
    m = semantic_memories.c
    live = and_(m.status == MemoryStatus.ACTIVE, m.created_day <= day)
    pair = case((live, m.memory_id + ":" + cast(m.version, String)), else_=None)
    q = (
        select(m.world_id, func.count(), func.aggregate_strings(pair, ","))
        .where(m.world_id.in_(list(worlds)))
        .group_by(m.world_id)
    )
    return {w: (int(n), frozenset(s.split(",")) if s else frozenset()) for w, n, s in conn.execute(q).all()}
