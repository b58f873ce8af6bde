"""Seed 001 §5 memory_status: counts per state, the earliest 20 unfinished records, the events
never organized (oversized), the current worker error, the failure history, jobs, projection lag,
and per-day completeness (a day with a blocked, unfinished or oversized event is ``partial``,
never complete). Read-only, grouped queries.

:func:`status` takes ``tz``: every time in it (``occurred_at``, a failure's ``at``,
``worker_error_at``, ``auto_suppressed_until``) in that zone, to the second, ISO, as operators and
agents read every time (the memory server, the command line); None keeps them as stored (datetimes)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, TypedDict, cast
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, RowMapping, func, select

from memory_pipeline.lib.store import Store
from memory_pipeline.objects import logic
from memory_pipeline.objects.projection import lagging_objects
from memory_pipeline.objects.tables import (
    objects_event_state,
    objects_failures,
    objects_jobs,
    objects_objects,
    objects_projection,
    objects_worlds,
)

UNFINISHED = [
    logic.EventState.HOT,
    logic.EventState.PENDING,
    logic.EventState.IN_PROGRESS,
    logic.EventState.BLOCKED,
]
NOT_ORGANIZED = list(logic.NOT_ORGANIZED_STATES)


class RangeStatus(TypedDict):
    """Whether every day of a range is complete, and each day's status (by ISO date)."""

    status: str
    days: dict[str, str]


class UnfinishedEvent(TypedDict):
    event_id: str
    world_id: str
    state: str
    occurred_at: datetime | str
    page_cursor: int
    chars: int
    progress: str


class NotOrganizedEvent(TypedDict):
    event_id: str
    world_id: str
    state: str
    occurred_at: datetime | str
    chars: int
    reason: str


class JobCount(TypedDict):
    mode: str
    status: str
    count: int


class FailureRecord(TypedDict):
    """One row of the failure history (`objects_failures`), newest first in a status."""

    world_id: str
    job_id: int
    mode: str
    batch: str
    error: str
    at: datetime | str


class WorldState(TypedDict):
    world_id: str
    graph_revision: int
    worker_error: str | None
    worker_error_at: datetime | str | None
    auto_suppressed_until: datetime | str | None
    busy: bool
    stopped: bool


class ProjectionError(TypedDict):
    world_id: str
    object_id: str
    error: str


class ProjectionLag(TypedDict):
    behind: int
    missing: int
    differing: int
    errors: list[ProjectionError]


class Status(TypedDict):
    """memory_status: its times as stored (datetimes), or with ``tz`` in that zone (ISO strings)."""

    states: dict[str, int]
    earliest_unfinished: list[UnfinishedEvent]
    not_organized: list[NotOrganizedEvent]
    jobs: list[JobCount]
    failures: list[FailureRecord]
    worlds: list[WorldState]
    projection: ProjectionLag
    complete: bool


def state_counts(store: Store, world: str | None = None) -> dict[str, int]:
    s = objects_event_state.c
    q = select(s.state, func.count()).group_by(s.state)
    if world:
        q = q.where(s.world_id == world)
    with store.connect() as conn:
        return {st: int(n) for st, n in conn.execute(q).all()}


def day_counts(store: Store, first: date, last: date, world: str | None = None) -> dict[date, dict[str, int]]:
    s = objects_event_state.c
    q = (
        select(s.event_day, s.state, func.count())
        .where(s.event_day >= first, s.event_day <= last)
        .group_by(s.event_day, s.state)
    )
    if world:
        q = q.where(s.world_id == world)
    out: dict[date, dict[str, int]] = {}
    with store.connect() as conn:
        for d, st, n in conn.execute(q).all():
            out.setdefault(d, {})[st] = int(n)
    return out


def range_status(store: Store, first: date, last: date, today: date, world: str | None = None) -> RangeStatus:
    """complete only when every event of every day in the range is linked/archive_only."""
    days = day_counts(store, first, last, world)
    per_day = {d.isoformat(): str(logic.day_status(c, open_day=d >= today)) for d, c in sorted(days.items())}
    statuses = set(per_day.values())
    overall = (
        logic.DayStatus.COMPLETE if statuses <= {logic.DayStatus.COMPLETE} and per_day else logic.DayStatus.PARTIAL
    )
    if not per_day:
        overall = logic.DayStatus.EMPTY
    return {"status": str(overall), "days": per_day}


def _zoned(r: RowMapping, tz: ZoneInfo | None) -> dict[str, Any]:
    """A row as a dict, its times in ``tz`` to the second (None: as stored)."""
    if tz is None:
        return dict(r)
    return {k: logic.shown_at(v, tz) if isinstance(v, datetime) else v for k, v in r.items()}


def status(store: Store, world: str | None = None, *, tz: ZoneInfo | None = None) -> Status:
    """memory_status (of ``world``, or every world); ``tz``: its times in that zone, to the second."""
    s, j, f, w = objects_event_state.c, objects_jobs.c, objects_failures.c, objects_worlds.c
    with store.connect() as conn:
        q = (
            select(s.event_id, s.world_id, s.state, s.occurred_at, s.page_cursor, s.chars, s.progress)
            .where(s.state.in_([str(x) for x in UNFINISHED]))
            .order_by(s.occurred_at, s.event_id)
            .limit(logic.STATUS_EARLIEST)
        )
        # Oversized events never become organized: listed apart, so they never hide as finished
        # and never crowd the earliest unfinished (which a run can still finish).
        nq = (
            select(s.event_id, s.world_id, s.state, s.occurred_at, s.chars, s.reason)
            .where(s.state.in_([str(x) for x in NOT_ORGANIZED]))
            .order_by(s.occurred_at, s.event_id)
            .limit(logic.STATUS_EARLIEST)
        )
        jq = select(j.mode, j.status, func.count()).group_by(j.mode, j.status)
        fq = (
            select(f.world_id, f.job_id, f.mode, f.batch, f.error, f.at)
            .order_by(f.at.desc(), f.failure_id.desc())
            .limit(20)
        )
        wq = select(
            w.world_id, w.graph_revision, w.worker_error, w.worker_error_at, w.auto_suppressed_until, w.busy, w.stopped
        )
        if world:
            q, nq, jq, fq, wq = (
                x.where(c == world)
                for x, c in ((q, s.world_id), (nq, s.world_id), (jq, j.world_id), (fq, f.world_id), (wq, w.world_id))
            )
        # The rows hold the columns each query selects (SQLAlchemy's rows are untyped).
        earliest = [cast(UnfinishedEvent, _zoned(r._mapping, tz)) for r in conn.execute(q).all()]
        not_organized = [cast(NotOrganizedEvent, _zoned(r._mapping, tz)) for r in conn.execute(nq).all()]
        jobs: list[JobCount] = [{"mode": m, "status": st, "count": int(n)} for m, st, n in conn.execute(jq).all()]
        failures = [cast(FailureRecord, _zoned(r._mapping, tz)) for r in conn.execute(fq).all()]
        worlds = [cast(WorldState, _zoned(r._mapping, tz)) for r in conn.execute(wq).all()]
        lag = _projection_lag(conn, world)
    counts = state_counts(store, world)
    return {
        "states": counts,
        "earliest_unfinished": earliest,
        "not_organized": not_organized,
        "jobs": jobs,
        "failures": failures,
        "worlds": worlds,
        "projection": lag,
        "complete": not any(counts.get(x, 0) for x in UNFINISHED + NOT_ORGANIZED),
    }


def _projection_lag(conn: Connection, world: str | None) -> ProjectionLag:
    """Objects whose files are being (re)written (``behind``: never projected, older than the
    store, missing or edited on disk, or failed), of them the files the last check found
    ``missing`` or ``differing``, and the errors (objects and core documents)."""
    o, p = objects_objects.c, objects_projection.c
    joined, lagging = lagging_objects()
    q = select(func.count()).select_from(joined).where(lagging)
    dq = select(p.drift, func.count()).where(p.drift.is_not(None)).group_by(p.drift)
    eq = select(p.world_id, p.object_id, p.error).where(p.error.is_not(None)).limit(20)
    if world:
        q, dq, eq = q.where(o.world_id == world), dq.where(p.world_id == world), eq.where(p.world_id == world)
    drift = {k: int(n) for k, n in conn.execute(dq).all()}
    return {
        "behind": int(conn.execute(q).scalar() or 0),
        "missing": drift.get("missing", 0),
        "differing": drift.get("differs", 0),
        "errors": [cast(ProjectionError, dict(r._mapping)) for r in conn.execute(eq).all()],  # an untyped row
    }


def day_changes(store: Store) -> dict[date, datetime]:
    """The newest change of each CST day's events (intake, queueing, outcome): a day partition
    materialized before it is stale (late data reaches the day's outcomes without a rebuild)."""
    s = objects_event_state.c
    with store.connect() as conn:
        return dict(conn.execute(select(s.event_day, func.max(s.updated_at)).group_by(s.event_day)).tuples().all())
