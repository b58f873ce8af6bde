"""Seed 003 semantic memory snapshots: the active set of each world after a day's deep sleep, and
the diff between any two days (what was created, deprecated, merged, modified). Reads only.

A snapshot outlives the run that wrote it: after a rebuild of its day (or of an earlier one)
restored semantic memory, the snapshot still shows what that undone run left until the day's deep
sleep is done again. A diff says so for each side whose deep-sleep record is not done (``stale``,
or ``failed``: the rebuild's re-run failed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from memory_pipeline.lib.store import Store
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.memory import memories_by_id
from memory_pipeline.sleep.order import DAY_ROW, RunStatus
from memory_pipeline.sleep.tables import semantic_memories, semantic_memory_versions, sleep_runs
from memory_pipeline.sleep.tables import semantic_memory_snapshots as snaps

# A failed stage record's detail key: when the done run it replaced (stale since) had finished; for
# deep sleep, when the day's snapshot still in the store was written.
LAST_DONE_AT = "last_done_at"


@dataclass(frozen=True)
class StaleSnapshot:
    """A side of a diff whose snapshot no longer stands: the world's deep-sleep record of ``day`` is
    ``status`` (stale: a rebuild restored semantic memory to before it and it has not run since;
    failed: the rebuild's re-run of it failed). The snapshot is still the one the last done deep
    sleep of the day wrote (finished at ``written_at``, when known). ``restored_at``: the newest
    restore of the world since; ``failure``: the newest failed attempt of the world's stages since
    (where the re-run stopped: this day's deep sleep, or a place before it)."""

    world_id: str
    day: date
    status: str
    written_at: datetime | None = None
    restored_at: datetime | None = None
    failure: FailedAttempt | None = None


@dataclass(frozen=True)
class FailedAttempt:
    stage: str
    day: date
    at: datetime
    error: str
    world_id: str = ""  # the world whose attempt failed (DAY_ROW: the day's record did not say)


@dataclass
class SnapshotDiff:
    world_id: str
    before: date
    after: date
    created: list[str] = field(default_factory=list)
    deprecated: list[str] = field(default_factory=list)
    merged: dict[str, str] = field(default_factory=dict)  # id -> merged into
    modified: list[str] = field(default_factory=list)
    stale: list[StaleSnapshot] = field(default_factory=list)  # sides that are not the day's current snapshot


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


def _instant(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def stale_sides(conn: Connection, world_id: str, days: Sequence[date]) -> list[StaleSnapshot]:
    """The days among ``days`` whose snapshot of ``world_id`` was written by a deep sleep that no
    longer stands (its record stale or failed while the snapshot rows are still there)."""
    out: list[StaleSnapshot] = []
    r, v = sleep_runs.c, semantic_memory_versions.c
    for day in sorted(set(days)):
        row = (
            conn.execute(
                select(r.status, r.finished_at, r.detail).where(
                    r.stage == str(Stage.DEEP), r.day == day, r.world_id == world_id
                )
            )
            .mappings()
            .first()
        )
        if row is None or row["status"] not in (RunStatus.STALE, RunStatus.FAILED):
            continue
        if not conn.execute(
            select(snaps.c.day).where(snaps.c.day == day, snaps.c.world_id == world_id).limit(1)
        ).first():
            continue  # no snapshot rows: nothing to mistake for the day's
        detail = row["detail"] if isinstance(row["detail"], dict) else {}
        # A stale record keeps the finish of its done run; a failed one that replaced it keeps it in detail.
        written = row["finished_at"] if row["status"] == RunStatus.STALE else _instant(detail.get(LAST_DONE_AT))
        restored = select(func.max(v.at)).where(
            v.world_id == world_id, v.stage == str(Stage.REBUILD), v.day.is_not(None), v.day <= day
        )
        if written is not None:
            restored = restored.where(v.at > written)
        out.append(
            StaleSnapshot(
                world_id,
                day,
                str(row["status"]),
                written_at=written,
                restored_at=conn.execute(restored).scalar(),
                failure=_last_failure(conn, world_id, day, written),
            )
        )
    return out


def _last_failure(conn: Connection, world_id: str, day: date, since: datetime | None) -> FailedAttempt | None:
    """The newest failed attempt recorded for ``world_id`` at ``day`` or before (after ``since``), or
    for the day's own record (``DAY_ROW``): a re-run that failed for another world stopped every
    world's places after it too."""
    r = sleep_runs.c
    q = select(r.stage, r.day, r.detail, r.world_id).where(
        r.world_id.in_([world_id, DAY_ROW]), r.status == str(RunStatus.FAILED), r.day <= day
    )
    found: list[FailedAttempt] = []
    for stage, at_day, detail, who in conn.execute(q):
        attempt = detail.get("failed_attempt") if isinstance(detail, dict) else None
        at = _instant(attempt.get("at")) if isinstance(attempt, dict) else None
        if attempt is None or at is None or (since is not None and at <= since):
            continue
        # the day record notes which world's attempt failed (StageRun.failed)
        failed_world = str(attempt.get("world") or who) if who == DAY_ROW else who
        found.append(FailedAttempt(stage, at_day, at, str(attempt.get("error") or ""), failed_world))
    own = [f for f in found if f.world_id == world_id]  # the world's own failure says most
    return max(own or found, key=lambda f: f.at, default=None)


def diff(store: Store, world_id: str, before: date, after: date) -> SnapshotDiff:
    """What changed between two days' snapshots of a world; SnapshotMissing when a side has none.
    ``stale`` names the sides whose snapshot a rebuild has undone (the diff is then of those)."""
    _check_sides(store, world_id, [before, after])
    a, b = snapshot(store, world_id, before), snapshot(store, world_id, after)
    out = SnapshotDiff(world_id, before, after, created=sorted(set(b) - set(a)))
    gone = sorted(set(a) - set(b))
    with store.connect() as conn:
        live = memories_by_id(conn, gone)
        out.stale = stale_sides(conn, world_id, [before, after])
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
