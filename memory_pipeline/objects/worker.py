"""Seed 001 §3, §5: jobs, the one lease per world, batch after batch (compact / organize / deep),
rotation, failures, blocking and the automatic-creation rules. Core I/O, no Dagster.

A job is created by ``enqueue`` (memory_organize: explicit) or by the automatic rules (threshold,
hourly, nightly). ``run_worker`` advances every runnable job batch by batch within its run (it
never waits for the next tick). Each batch holds the world's lease (the platform lease table,
asset ``objects_worker``, partition = world): one valid lease at a time, worker timeout + 60 s."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, fields, replace
from datetime import date, datetime, timedelta
from typing import Any, NotRequired, TypedDict
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, bindparam, case, delete, func, select, text, update
from sqlalchemy.exc import IntegrityError

from memory_pipeline.events.ingest import RESERVED_CONVERSATION_PREFIX
from memory_pipeline.lib import ids
from memory_pipeline.lib.llm import LLMRequest, LLMResult
from memory_pipeline.lib.llm.client import LLMHardFailure, LLMProviderDown
from memory_pipeline.lib.store import Store, leases, upsert
from memory_pipeline.lib.store.requests import RequestConflict
from memory_pipeline.lib.store.tables import conversations, messages, partition_leases
from memory_pipeline.lib.store.tables import worlds as worlds_table
from memory_pipeline.lib.text import short_hash
from memory_pipeline.objects import graph, logic, offline_rules, prompts, timeline
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.graph import LEASE_ASSET, Claim, EventPage
from memory_pipeline.objects.logic import EventState, JobMode, JobOrigin, JobStatus, SubmissionError
from memory_pipeline.objects.tables import (
    QUEUE_PREDICATE,
    objects_attachments,
    objects_core,
    objects_event_state,
    objects_failures,
    objects_jobs,
    objects_objects,
    objects_worlds,
)

log = logging.getLogger(__name__)

ACTIVE_JOB = (JobStatus.QUEUED, JobStatus.RUNNING)


class RequestError(ValueError):
    """memory_organize refused its arguments (the message names the field); nothing written."""


# What a worker run stopped by the provider's breaker leaves (the end of its one line).
LEFT_FOR_NEXT_RUN = "the batch it refused was handed back untouched; the jobs not done stay queued for the next run"


class ProviderStopped(LLMProviderDown):
    """The provider's breaker refused a batch's call: the batch was handed back untouched (its job
    queued as it was, no failed claim) and the run stopped at once, leaving every other world's
    jobs queued. ``report``: what the run did before; ``world``: where it stopped."""

    def __init__(self, down: LLMProviderDown, report: WorkerReport, world: str):
        super().__init__(str(down))
        self.report = report
        self.world = world


# --- enqueue (memory_organize) ---------------------------------------------------------------------
class Receipt(TypedDict):
    """An enqueue receipt: the job as created (or as first created, ``replayed``) and how many
    blocked events the request released; an organize-now receipt names its request event.
    ``created_at``: in the context's zone, to the second (the first answer's form on a replay)."""

    job_id: int
    world_id: str
    mode: str
    origin: str
    scope: str
    retry_blocked: bool
    status: str
    created_at: str
    replayed: bool
    released_blocked: int
    request_event_id: NotRequired[str]


class Rebuild(TypedDict):
    """requeue_days: the worlds whose events went back to the queue, and their jobs' receipts."""

    worlds: list[str]
    jobs: list[Receipt]


def _job_receipt(row: Mapping[str, Any], tz: ZoneInfo, *, replayed: bool, released_blocked: int) -> Receipt:
    """The job's receipt, built from its row: a replay answers the first receipt's very form (its
    ``created_at`` in ``tz``, the context's zone, to the second, as every operator and agent time)."""
    return {
        "job_id": row["job_id"],
        "world_id": row["world_id"],
        "mode": row["mode"],
        "origin": row["origin"],
        "scope": row["scope"],
        "retry_blocked": row["retry_blocked"],
        "status": row["status"],
        "created_at": row["created_at"].astimezone(tz).isoformat(timespec="seconds"),
        "replayed": replayed,
        "released_blocked": released_blocked,
    }


def check_request(
    world: object, mode: object, scope: object, retry_blocked: object, token: object
) -> tuple[str, JobMode, str, bool, str | None]:
    problem = ids.validate_id(world)
    if problem:
        raise RequestError(f"world: {problem}")
    if not isinstance(mode, str) or mode not in set(JobMode):
        raise RequestError(f"mode: {mode!r} is not a mode ({', '.join(JobMode)})")
    jmode = JobMode(mode)
    if not isinstance(scope, str) or len(scope) > logic.PROGRESS_MAX_CHARS or "\x00" in scope:
        raise RequestError(f"scope: must be a string of at most {logic.PROGRESS_MAX_CHARS:,} characters")
    if not isinstance(retry_blocked, bool):
        raise RequestError(f"retry_blocked: expected true or false, got {type(retry_blocked).__name__}")
    if token is not None and (not isinstance(token, str) or not 8 <= len(token) <= 128 or not ids.is_id(token)):
        raise RequestError(f"token: must be 8-128 characters of {ids.ID_ALPHABET}")
    return str(world), jmode, scope, retry_blocked, token


def enqueue(
    octx: ObjectsContext,
    world: object,
    mode: object,
    scope: object = "",
    retry_blocked: object = False,
    token: object = None,
    *,
    origin: JobOrigin = JobOrigin.EXPLICIT,
    local_day: date | None = None,
) -> Receipt:
    """memory_organize(mode, scope, retry_blocked): an enqueue receipt at once. ``scope`` is a goal
    and search hint for the model, never a filter. A replayed token returns the original receipt
    and does nothing (in particular it never releases blocked events again)."""
    world, jmode, scope, retry_blocked, token = check_request(world, mode, scope, retry_blocked, token)
    with octx.store.begin() as conn:
        old = _by_token(conn, token)
        if old is not None:
            if old["world_id"] != world:  # tokens are unique across worlds: never another world's receipt
                raise logic.SubmissionError("token", "already used by another world's request; use a new token")
            _same_request(old, token, jmode, scope, retry_blocked)
            return _job_receipt(old, octx.tz, replayed=True, released_blocked=0)
        return _create_job(conn, octx, world, jmode, scope, retry_blocked, token, origin, local_day)


def _same_request(old: Any, token: Any, mode: JobMode, scope: str, retry_blocked: bool) -> None:
    """A replayed token repeats its request; the same token with another mode, scope or
    retry_blocked is another request under a reused id: refused, never the first one's receipt."""
    if (old["mode"], old["scope"] or "", bool(old["retry_blocked"])) != (str(mode), scope, retry_blocked):
        raise RequestConflict(str(token))


def _by_token(conn: Any, token: str | None) -> Any:
    if token is None:
        return None
    return conn.execute(select(objects_jobs).where(objects_jobs.c.request_token == token)).mappings().first()


def _create_job(
    conn: Any,
    octx: ObjectsContext,
    world: str,
    jmode: JobMode,
    scope: str,
    retry_blocked: bool,
    token: str | None,
    origin: JobOrigin,
    local_day: date | None = None,
) -> Receipt:
    now = octx.now()
    j = objects_jobs.c
    timeline.ensure_worlds(conn, [world])
    graph.ensure_daily(conn, world, now)
    released = 0
    if retry_blocked:
        released = conn.execute(
            update(objects_event_state)
            .where(objects_event_state.c.world_id == world, objects_event_state.c.state == EventState.BLOCKED)
            .values(state=EventState.PENDING, explicit=True, queued_at=now, updated_at=now)
        ).rowcount
    job_id = conn.execute(
        objects_jobs.insert()
        .values(
            world_id=world,
            mode=str(jmode),
            origin=str(origin),
            scope=scope,
            retry_blocked=retry_blocked,
            request_token=token,
            status=JobStatus.QUEUED,
            created_at=now,
            local_date=local_day,
            claims=0,
            batches_done=0,
            consecutive_failures=0,
            inventory_pos=0,
        )
        .returning(j.job_id)
    ).scalar_one()
    row = conn.execute(select(objects_jobs).where(j.job_id == job_id)).mappings().one()
    return _job_receipt(row, octx.tz, replayed=False, released_blocked=released)


# The world's own memory requests are recorded in one conversation per world on this platform.
REQUEST_PLATFORM = "memory"
REQUEST_SOURCE = "memory_organize"


def request_conversation_id(world: str) -> str:
    cid = f"{RESERVED_CONVERSATION_PREFIX}{world}"
    return cid if len(cid) <= ids.MAX_ID_CHARS else f"{RESERVED_CONVERSATION_PREFIX}{short_hash([world], 32)}"


def _record_request(conn: Any, octx: ObjectsContext, world: str, arguments: dict[str, Any], jobs: list[int]) -> str:
    """The request is itself an event (seed 001 §2): one raw message, appended like any other (the
    raw table is append-only), an assistant turn calling ``memory_organize``. Its conversation is
    flagged ``debug``, which every domain (this one included) leaves out of memory content: the
    request stays in the raw events, readable by id and time, and never comes back as material to
    summarize or organize (no back-flow)."""
    now = octx.now()
    cid = request_conversation_id(world)
    upsert(conn, worlds_table, [{"world_id": world, "name": world, "created_at": now}], keys=["world_id"], update=[])
    upsert(
        conn,
        conversations,
        [
            {
                "conversation_id": cid,
                "world_id": world,
                "platform": REQUEST_PLATFORM,
                "debug": True,
                "title": "memory requests",
                "created_at": now,
                "updated_at": now,
            }
        ],
        keys=["conversation_id"],
        update=["updated_at"],  # a new message in it: what recall's index watches (recall.search)
    )
    # Ingest refuses the reserved ids; a row stored before it did may belong to another world or
    # be organized (not debug): the request would then be that world's memory material.
    owner = conn.execute(
        select(conversations.c.world_id, conversations.c.platform, conversations.c.debug).where(
            conversations.c.conversation_id == cid
        )
    ).one()
    if tuple(owner) != (world, REQUEST_PLATFORM, True):
        raise RequestError(
            f"world: the request conversation {cid!r} is stored with (world, platform, debug) {tuple(owner)}, "
            f"not ({world!r}, {REQUEST_PLATFORM!r}, True): nothing recorded"
        )
    event_id = f"memory-request#{uuid.uuid4().hex}"
    said = ", then ".join(f"{m}" for m in arguments["modes"])
    conn.execute(
        messages.insert().values(
            message_id=event_id,
            conversation_id=cid,
            role="assistant",
            content=f"memory_organize: {said} now" + (f" (scope: {arguments['scope']})" if arguments["scope"] else ""),
            tool_calls=[{"name": REQUEST_SOURCE, "arguments": arguments}],
            at=now,
            ingested_at=now,
            source=_request_source(jobs),
        )
    )
    return event_id


def _request_source(jobs: list[int]) -> str:
    return f"{REQUEST_SOURCE}: jobs {', '.join(str(j) for j in jobs)}"


def _request_event(conn: Any, compact: Any, then: Any) -> str | None:
    """The request event that created an organize-now pair (its source names both jobs)."""
    found: str | None = conn.execute(
        select(messages.c.message_id).where(
            messages.c.conversation_id == request_conversation_id(then["world_id"]),
            messages.c.source == _request_source([compact["job_id"], then["job_id"]]),
        )
    ).scalar_one_or_none()
    return found


def organize_now(
    octx: ObjectsContext,
    world: object,
    scope: object = "",
    token: object = None,
    retry_blocked: object = False,
    mode: object = JobMode.ORGANIZE,
) -> list[Receipt]:
    """ "Organize now": compact first, then organize (or deep review: ``mode``). The world's raw
    events not yet in the hot timeline enter it, then two explicit jobs are created with the
    request event in one transaction; the second waits for the compact job
    (``logic.waits_for_compact``). A replayed token returns the original receipts and records
    nothing."""
    world, then, scope, retry_blocked, token = check_request(world, mode, scope, retry_blocked, token)
    if then is JobMode.COMPACT:
        raise RequestError("mode: organize now compacts first, then organizes or reviews: organize | deep")
    compact_token = f"compact.{short_hash([token], 40)}" if token else None

    def replay() -> list[Receipt] | None:
        with octx.store.connect() as conn:
            old, first = _by_token(conn, token), _by_token(conn, compact_token)
            event_id = None if old is None or first is None else _request_event(conn, first, old)
        if old is None:
            return None  # (a token first used by a plain request has no compact job: its receipt alone)
        _same_request(old, token, then, scope, retry_blocked)
        again = [_job_receipt(r, octx.tz, replayed=True, released_blocked=0) for r in (first, old) if r is not None]
        # the first answer named its request event: so does its replay
        return again if event_id is None else [{**r, "request_event_id": event_id} for r in again]

    if (again := replay()) is not None:
        return again
    # Before the jobs exist: the compact job fixes its range at its first batch, over what is hot.
    timeline.intake(octx, [world])
    try:
        return _organize_now_jobs(octx, world, then, scope, token, compact_token, retry_blocked)
    except IntegrityError:
        again = replay()  # the same token sent twice at once: the other one was first
        if again is None:
            raise
        return again


def _organize_now_jobs(
    octx: ObjectsContext,
    world: str,
    then: JobMode,
    scope: str,
    token: str | None,
    compact_token: str | None,
    retry_blocked: bool,
) -> list[Receipt]:
    with octx.store.begin() as conn:
        compact = _create_job(conn, octx, world, JobMode.COMPACT, scope, False, compact_token, JobOrigin.EXPLICIT)
        organize = _create_job(conn, octx, world, then, scope, retry_blocked, token, JobOrigin.EXPLICIT)
        arguments = {
            "world": world,
            "modes": [str(JobMode.COMPACT), str(then)],
            "scope": scope,
            "retry_blocked": retry_blocked,
            "token": token,
        }
        event_id = _record_request(conn, octx, world, arguments, [compact["job_id"], organize["job_id"]])
    return [{**compact, "request_event_id": event_id}, {**organize, "request_event_id": event_id}]


def set_flags(
    octx: ObjectsContext, world: str, *, busy: bool | None = None, stopped: bool | None = None
) -> tuple[bool, bool]:
    """The agent runtime marks its world busy or stopped: no batch is claimed meanwhile. The flags
    as stored afterwards (busy, stopped): a flag not given is left as it was."""
    values = {k: v for k, v in {"busy": busy, "stopped": stopped}.items() if v is not None}
    w = objects_worlds.c
    with octx.store.begin() as conn:
        timeline.ensure_worlds(conn, [world])
        if values:
            conn.execute(update(objects_worlds).where(w.world_id == world).values(**values))
        row = conn.execute(select(w.busy, w.stopped).where(w.world_id == world)).one()
    return bool(row.busy), bool(row.stopped)


# --- automatic creation ---------------------------------------------------------------------------
def _suppressed(octx: ObjectsContext) -> set[str]:
    w = objects_worlds.c
    with octx.store.connect() as conn:
        return set(conn.execute(select(w.world_id).where(w.auto_suppressed_until > octx.now())).scalars())


def _in_flight(octx: ObjectsContext, mode: JobMode, origins: Sequence[JobOrigin] | None = None) -> set[str]:
    j = objects_jobs.c
    q = select(j.world_id).where(j.mode == mode, j.status.in_(list(ACTIVE_JOB))).distinct()
    if origins:
        q = q.where(j.origin.in_([str(o) for o in origins]))
    with octx.store.connect() as conn:
        return set(conn.execute(q).scalars())


def threshold_worlds(octx: ObjectsContext, include_unseen: bool = False) -> list[str]:
    """Worlds whose hot timeline passed the threshold, not in cooldown, no compact job in flight.
    ``include_unseen``: count raw events not yet brought into the timeline (the sensor's view)."""
    est = timeline.hot_estimates(octx)
    if include_unseen:
        for w, t in timeline.unseen_estimates(octx).items():
            est[w] = est.get(w, 0) + t
    over = [w for w, t in est.items() if t > octx.cfg.compact_threshold_tokens]
    skip = _suppressed(octx) | _in_flight(octx, JobMode.COMPACT)
    return sorted(w for w in over if w not in skip)


def enqueue_threshold(octx: ObjectsContext, worlds: Sequence[str] | None = None) -> list[Receipt]:
    """A threshold compact job for each world past its threshold (of ``worlds``, when given)."""
    return [
        enqueue(octx, w, JobMode.COMPACT, origin=JobOrigin.THRESHOLD)
        for w in threshold_worlds(octx)
        if worlds is None or w in worlds
    ]


def pending_counts(octx: ObjectsContext) -> dict[str, int]:
    s = objects_event_state.c
    with octx.store.connect() as conn:
        rows = conn.execute(
            select(s.world_id, func.count()).where(s.state.in_(list(logic.QUEUED_STATES))).group_by(s.world_id)
        ).all()
    return {w: int(n) for w, n in rows}


def hourly_worlds(octx: ObjectsContext) -> list[str]:
    """Worlds with pending events and no hourly organize job in flight (an empty queue: none)."""
    skip = _suppressed(octx) | _in_flight(octx, JobMode.ORGANIZE, [JobOrigin.HOURLY])
    return sorted(w for w, n in pending_counts(octx).items() if n and w not in skip)


def enqueue_hourly(octx: ObjectsContext, worlds: Sequence[str] | None = None) -> list[Receipt]:
    """An hourly organize job for each world with pending events (of ``worlds``, when given)."""
    return [
        enqueue(octx, w, JobMode.ORGANIZE, origin=JobOrigin.HOURLY)
        for w in hourly_worlds(octx)
        if worlds is None or w in worlds
    ]


def _deep_due(octx: ObjectsContext) -> list[tuple[str, date]]:
    """Worlds whose nightly deep review is due now (logic.deep_due) and not in flight."""
    now = octx.now()
    local_now = now.astimezone(octx.tz)
    w, c, m = objects_worlds.c, conversations.c, messages.c
    with octx.store.connect() as conn:
        flags = conn.execute(select(w.world_id, w.last_deep_date)).all()
        last: dict[str, datetime] = dict(
            conn.execute(
                select(c.world_id, func.max(m.at))
                .join(messages, m.conversation_id == c.conversation_id)
                .group_by(c.world_id)
            )
            .tuples()
            .all()
        )
    skip = _in_flight(octx, JobMode.DEEP)
    due = []
    for world, last_date in flags:
        at = last.get(world)
        if world not in skip and logic.deep_due(local_now, last_date, at.astimezone(octx.tz) if at else None):
            due.append((world, local_now.date()))
    return due


def deep_queued(octx: ObjectsContext) -> list[tuple[str, date]]:
    """Worlds with a deep review job not yet run to its end (queued, or left by a run that met the
    world's lease busy and gave up waiting), with the date it reviews (today for an explicit one)."""
    j = objects_jobs.c
    today = octx.now().astimezone(octx.tz).date()
    with octx.store.connect() as conn:
        rows = conn.execute(
            select(j.world_id, func.min(j.local_date))
            .where(j.mode == JobMode.DEEP, j.status.in_(list(ACTIVE_JOB)))
            .group_by(j.world_id)
        ).all()
    return sorted((world, day or today) for world, day in rows)


def deep_worlds(octx: ObjectsContext) -> list[tuple[str, date]]:
    """The worlds a deep review run is for now: those due tonight, and those whose deep job is
    still queued (asked again until it has run: a run that found the world's lease busy, say with
    another run compacting, leaves it queued)."""
    return sorted(_deep_due(octx) + deep_queued(octx))  # disjoint: a due world has no deep job in flight


def enqueue_deep(octx: ObjectsContext) -> list[Receipt]:
    out = []
    for world, day in _deep_due(octx):
        with octx.store.begin() as conn:
            conn.execute(update(objects_worlds).where(objects_worlds.c.world_id == world).values(last_deep_date=day))
        out.append(enqueue(octx, world, JobMode.DEEP, origin=JobOrigin.NIGHTLY, local_day=day))
    return out


# --- the worker -------------------------------------------------------------------------------------
@dataclass
class WorkerReport:
    batches: int = 0
    committed: int = 0  # batches whose commit wrote something (a replayed receipt is not counted)
    failures: int = 0
    model_calls: int = 0
    jobs_done: int = 0
    jobs_failed: int = 0
    blocked_events: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)  # of the batches committed
    # Claimed batches that committed nothing new: every failed claim, and a submission that only
    # replayed an earlier receipt. Each is a failed claim of its batch, so the 5th in a row ends it.
    zero_progress_batches: int = 0
    corrections: int = 0  # refused tool calls sent back to the model as their results
    truncated_answers: int = 0  # answers cut at max_tokens (the next call asked for more)
    lease_busy: list[str] = field(default_factory=list)  # worlds skipped: another run held the lease
    not_claimed: list[str] = field(default_factory=list)  # worlds skipped: the agent is busy or stopped
    # What failed, as an operator reads it: "<world> <mode> job <id>[ batch <batch>]: <error>" per
    # failed claim, the jobs that ended failed, the events blocked.
    errors: list[str] = field(default_factory=list)
    failed_jobs: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    worlds_at_once: int = 1  # the run's threads, each advancing one world at a time

    def add(self, other: WorkerReport) -> None:
        """``other``'s counts and lists added to these (a run's threads, each with a report of its own)."""
        for f in fields(self):
            if f.name == "worlds_at_once":  # the run's, not a thread's count
                continue
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, dict):
                for key, n in theirs.items():
                    mine[key] = mine.get(key, 0) + n
            else:
                setattr(self, f.name, mine + theirs)

    @property
    def ok(self) -> bool:
        """Everything this run claimed succeeded: no failed claim (so no job ended failed and no
        event was blocked). A world skipped (lease busy, agent busy or stopped) is no failure."""
        return self.failures == 0


def release_stale(octx: ObjectsContext) -> int:
    """Jobs found ``running`` whose world lease is gone or expired are released for a new claim."""
    j, t = objects_jobs.c, partition_leases.c
    with octx.store.begin() as conn:
        live = set(conn.execute(select(t.partition).where(t.asset == LEASE_ASSET, t.expires_at > octx.now())).scalars())
        q = update(objects_jobs).where(j.status == JobStatus.RUNNING)
        if live:
            q = q.where(j.world_id.not_in(sorted(live)))
        return conn.execute(q.values(status=JobStatus.QUEUED)).rowcount


def _runnable(
    octx: ObjectsContext, world: str, modes: Sequence[JobMode] | None = None
) -> tuple[list[logic.JobView], datetime | None]:
    with octx.store.connect() as conn:
        mine, later, _ = _order(octx, conn, world, modes)
    return mine, later


def _order(
    octx: ObjectsContext, conn: Connection, world: str, modes: Sequence[JobMode] | None
) -> tuple[list[logic.JobView], datetime | None, list[logic.JobView]]:
    """The world's runnable jobs of ``modes`` in rotation order, when the next one backing off is
    due, and the rotation of every runnable job of the world."""
    j = objects_jobs.c
    q = select(j.job_id, j.mode, j.origin, j.created_at, j.last_claimed_at, j.not_before).where(
        j.world_id == world, j.status.in_(list(ACTIVE_JOB))
    )
    return _rotation(octx, conn.execute(q).all(), modes)


def _rotation(
    octx: ObjectsContext, rows: Sequence[Any], modes: Sequence[JobMode] | None
) -> tuple[list[logic.JobView], datetime | None, list[logic.JobView]]:
    """``_order`` of the job rows read (job_id, mode, origin, created_at, last_claimed_at,
    not_before)."""
    # Every unfinished job of the world takes part (a compact job holds back the organize request
    # after it even in a run of other modes); only ``modes`` are returned.
    views = [
        logic.JobView(r.job_id, JobOrigin(r.origin), r.created_at, r.last_claimed_at, r.not_before, JobMode(r.mode))
        for r in rows
    ]
    mine = [v for v in views if not modes or v.mode in modes]
    later = min((v.not_before for v in mine if v.not_before and v.not_before > octx.now()), default=None)
    rotation = logic.rotation_order(views, octx.now())
    return [v for v in rotation if v in mine], later, rotation


def _worlds_with_jobs(
    octx: ObjectsContext, worlds: Sequence[str] | None, modes: Sequence[JobMode] | None = None
) -> list[str]:
    j = objects_jobs.c
    q = select(j.world_id).where(j.status.in_(list(ACTIVE_JOB))).distinct()
    if modes:
        q = q.where(j.mode.in_([str(m) for m in modes]))
    if worlds:
        q = q.where(j.world_id.in_(list(worlds)))
    with octx.store.connect() as conn:
        return sorted(conn.execute(q).scalars())


@dataclass
class ClaimView:
    """What a turn decides on, read in one statement: the world's flags, who has reserved its next
    turn, and its runnable jobs in rotation order (``_order``)."""

    busy: bool
    stopped: bool
    reserved: str | None
    order: list[logic.JobView]
    later: datetime | None
    rotation: list[logic.JobView]


def _claim_view(
    octx: ObjectsContext, conn: Connection, world: str, modes: Sequence[JobMode] | None
) -> ClaimView | None:
    """``_flags``, the next-turn reservation ``_yields`` reads and ``_order``, as one statement (the
    world's row with its unfinished jobs); None when the world has no row (then the three apart)."""
    rows = conn.execute(_CLAIM_VIEW, {"world": world, "now": octx.now()}).all()
    if not rows:
        return None
    order, later, rotation = _rotation(octx, [r for r in rows if r.job_id is not None], modes)
    first = rows[0]
    return ClaimView(bool(first.busy), bool(first.stopped), first.reserved, order, later, rotation)


def _flags(conn: Connection, world: str) -> tuple[bool, bool]:
    w = objects_worlds.c
    row = conn.execute(select(w.busy, w.stopped).where(w.world_id == world)).first()
    return (bool(row.busy), bool(row.stopped)) if row else (False, False)


# A run waiting for a world's lease reserves the world's next turn (a lease of its own in the
# platform lease table, renewed while it waits): a run of other modes that would take the lease
# for a job the rotation puts after the reserved one yields instead. So runs of different modes
# (a compaction run, an organize run, the nightly deep review) take turns on one world, batch by
# batch, by least-recent claim, and none starves another.
NEXT_TURN_ASSET = "objects_worker_next"
# A turn's reads and claim, built once with bound parameters (see graph._LEASE_CHECK): the claim
# view (the world's flags, its next-turn reservation and unfinished jobs), the job taken, the page.
_W, _J, _T, _S = objects_worlds.c, objects_jobs.c, partition_leases.c, objects_event_state.c
_CLAIM_VIEW = (
    select(
        _W.busy,
        _W.stopped,
        select(_T.holder)
        .where(_T.asset == NEXT_TURN_ASSET, _T.partition == bindparam("world"), _T.expires_at > bindparam("now"))
        .scalar_subquery()
        .label("reserved"),
        _J.job_id,
        _J.mode,
        _J.origin,
        _J.created_at,
        _J.last_claimed_at,
        _J.not_before,
    )
    .select_from(objects_worlds.outerjoin(objects_jobs, (_J.world_id == _W.world_id) & _J.status.in_(list(ACTIVE_JOB))))
    .where(_W.world_id == bindparam("world"))
)
_TAKE_JOB = (
    update(objects_jobs)
    .where(_J.job_id == bindparam("job"))
    .values(status=JobStatus.RUNNING, last_claimed_at=bindparam("now"), claims=_J.claims + 1)
    .returning(*objects_jobs.c)
)
# The next event picked from the queue's own rows first, then joined to its text: ordering the
# join instead read every queued event's text to keep one (2 ms a claim at 500 queued events).
# With it, the ids of the objects attached to the event, one string (an id holds no newline):
# the related objects start with them, and the commit's outcome rule asks whether there is one.
_A = objects_attachments.c
_NEXT_PAGE = (
    select(
        objects_event_state,
        messages.c.content,
        _W.graph_revision,
        select(func.aggregate_strings(_A.object_id, "\n"))
        .where(_A.world_id == _S.world_id, _A.event_id == _S.event_id)
        .scalar_subquery()
        .label("attached_ids"),
    )
    .join(messages, messages.c.message_id == _S.event_id)
    .join(objects_worlds, _W.world_id == _S.world_id)
    .where(
        _S.event_id
        == select(_S.event_id)
        .where(_S.world_id == bindparam("world"), text(QUEUE_PREDICATE))
        .order_by(_S.explicit.desc(), _S.occurred_at, _S.event_id)
        .limit(1)
        .scalar_subquery()
    )
)

# The worlds whose next turn a run of this process has reserved, as (runner, world): only those
# have a reservation to give up when the run takes the world's lease (no DELETE per batch).
_reserved: set[tuple[str, str]] = set()
NEXT_TURN_TTL = timedelta(seconds=10)
LEASE_POLL_SECONDS = 0.5


def run_worker(
    octx: ObjectsContext,
    worlds: Sequence[str] | None = None,
    max_batches: int | None = None,
    max_wait: float = 120.0,
    modes: Sequence[JobMode] | None = None,
) -> WorkerReport:
    """Advance every runnable job, batch after batch, rotating by least-recent claim, until no job
    is runnable (or ``max_batches``). A job backing off is waited for (at most ``max_wait`` s); so
    is a world whose lease another run holds (at most ``max_wait`` s without a turn, its next turn
    reserved meanwhile), other worlds going first. A world still busy then is reported in
    ``lease_busy`` and its jobs stay queued for a later run. Up to ``worlds_at_once`` worlds are
    advanced at once (``_RunShare``), one on SQLite."""
    if max_batches is not None:
        problem = logic.int_problem(max_batches)
        if problem:
            raise ValueError(f"max_batches: {problem}")
    report = WorkerReport()
    release_stale(octx)
    limit = max_batches if max_batches is not None else octx.cfg.max_batches_per_run
    runner = uuid.uuid4().hex[:12]
    share = _RunShare(deque(_worlds_with_jobs(octx, worlds, modes)), limit)
    at_once = report.worlds_at_once = max(1, min(worlds_at_once(octx), len(share.queue)))
    try:
        if at_once <= 1:
            _work(octx, share, report, modes, max_wait, runner)
        else:
            _work_at_once(octx, share, report, modes, max_wait, runner, at_once)
    finally:
        _unreserve(octx, runner)
    return report


def worlds_at_once(octx: ObjectsContext) -> int:
    """How many worlds a run advances at once: ``worlds_at_once``, or one on SQLite (a second
    writer would only wait on the first's lock, or fail a read-then-write transaction on it)."""
    return 1 if octx.store.dialect == "sqlite" else octx.cfg.worlds_at_once


@dataclass
class _RunShare:
    """What a run's threads share: the worlds still to advance (``queue``; a world is in it or in one
    thread's hands, never both, so one run never holds a world twice), since when each waits for a
    turn another run holds, and the batches taken (a turn takes one before it runs and gives it back
    when it ran none, so ``limit`` holds across threads). ``halted``: a thread stopped the run (the
    provider's breaker, an error, an interruption); the others stop after their batch."""

    queue: deque[str]
    limit: int
    taken: int = 0
    waiting: dict[str, datetime] = field(default_factory=dict)
    halted: bool = False
    stop: BaseException | None = None  # the first thread's stop, raised once every thread is done
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> bool:
        with self.lock:
            if self.taken >= self.limit or self.halted:
                return False
            self.taken += 1
            return True

    def give_back(self) -> None:
        with self.lock:
            self.taken -= 1

    def room(self) -> bool:
        """Another batch may be taken after the one running (for a commit's claim of the next)."""
        return self.taken < self.limit and not self.halted

    def halt(self, stop: BaseException | None = None) -> None:
        with self.lock:
            self.halted = True
            self.stop = self.stop or stop


def _work(
    octx: ObjectsContext,
    share: _RunShare,
    report: WorkerReport,
    modes: Sequence[JobMode] | None,
    max_wait: float,
    runner: str,
) -> None:
    """One thread of a run: the next world of the queue, advanced until it has nothing runnable (a
    world whose lease another run holds goes back to the queue's end), until the queue is empty,
    the run's batches are taken or the run is halted."""
    while True:
        with share.lock:
            if not share.queue or not share.room():
                return
            world = share.queue.popleft()
        try:
            result, ran = _advance(octx, report, world, modes, share, max_wait, runner)
        except LLMProviderDown as exc:  # the breaker is open: every other world would be refused too
            raise ProviderStopped(exc, report, world) from None
        if result == "stopped":
            report.not_claimed.append(world)
        if result != "lease_busy":
            with share.lock:
                share.waiting.pop(world, None)
            continue
        with share.lock:
            since = octx.now() if ran or world not in share.waiting else share.waiting[world]
            share.waiting[world] = since
            if (octx.now() - since).total_seconds() >= max_wait:
                report.lease_busy.append(world)
                continue
            share.queue.append(world)
            idle = all(w in share.waiting for w in share.queue)  # nothing else to do meanwhile
        if idle:
            (octx.sleep or time.sleep)(LEASE_POLL_SECONDS)


def _work_at_once(
    octx: ObjectsContext,
    share: _RunShare,
    report: WorkerReport,
    modes: Sequence[JobMode] | None,
    max_wait: float,
    runner: str,
    at_once: int,
) -> None:
    """``at_once`` threads of ``_work``: this one and ``at_once - 1`` more, each with a model client
    of its own (``LLMClient.fork``) and a report of its own, added to ``report`` when all are done.
    A thread's stop (the provider's breaker, an error) halts the others after their batch and is
    raised here then, a provider stop with the whole run's report. An interruption of this thread
    (a run terminated) ends its batch as a run of one world at a time does; the others finish
    theirs and stop."""
    others: list[tuple[threading.Thread, WorkerReport, ObjectsContext]] = []

    def work(tctx: ObjectsContext, trep: WorkerReport) -> None:
        try:
            _work(tctx, share, trep, modes, max_wait, runner)
        except Exception as exc:  # noqa: BLE001 - raised in the run's thread once the others are done
            share.halt(exc)

    for i in range(1, at_once):
        tctx = replace(octx, llm=octx.llm.fork())
        trep = WorkerReport()
        thread = threading.Thread(target=work, args=(tctx, trep), name=f"objects-{runner}-{i}", daemon=True)
        others.append((thread, trep, tctx))
        thread.start()
    mine = WorkerReport()
    try:
        work(octx, mine)
    except BaseException:
        share.halt()
        raise
    finally:
        for thread, trep, tctx in others:
            thread.join()
            report.add(trep)
            octx.llm.stats.add(tctx.llm.stats)
        report.add(mine)
    if isinstance(share.stop, ProviderStopped):
        raise ProviderStopped(share.stop, report, share.stop.world)
    if share.stop is not None:
        raise share.stop


# A run's connection between the transactions of one world's batches: taken again from the pool
# (the pool's liveness ping) only after a longer pause, as around a provider's model call.
CONNECTION_IDLE_SECONDS = 1.0


class RunStore(Store):
    """The store of one world's batches in a run: ``begin`` runs each transaction on one held
    connection, while it has been idle at most ``CONNECTION_IDLE_SECONDS`` (the pool pings a
    connection it hands out: one round trip a transaction, half a batch's round trips but for the
    statements); after a longer pause, an invalidated connection or inside another transaction of
    it, a connection from the pool as before. Everything else is the store's. ``close`` gives the
    held connection back."""

    def __init__(self, store: Store):
        # the store's own engine and pool (Store(url) would make another for a URL spelled otherwise)
        self.url, self.engine = store.url, store.engine
        self._held: Connection | None = None
        self._idle_since = 0.0

    @contextmanager
    def _on_held(self) -> Iterator[Connection]:
        conn = self._held
        if conn is not None and (
            conn.closed or conn.invalidated or time.monotonic() - self._idle_since > CONNECTION_IDLE_SECONDS
        ):
            conn.close()
            conn = self._held = None
        if conn is None:
            conn = self._held = super().connect()
        try:
            with conn.begin():
                yield conn
        finally:
            self._idle_since = time.monotonic()

    def begin(self) -> AbstractContextManager[Connection]:
        held = self._held
        if held is not None and not held.closed and held.in_transaction():
            return super().begin()  # a transaction opened inside one of the held connection's
        return self._on_held()

    def close(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None


def _advance(
    octx: ObjectsContext,
    report: WorkerReport,
    world: str,
    modes: Sequence[JobMode] | None,
    share: _RunShare,
    max_wait: float,
    runner: str,
) -> tuple[str, int]:
    """Batches of ``world`` until none is runnable: how it ended ('stopped', 'idle', 'lease_busy',
    'limit') and how many batches ran."""
    ran = 0
    known = WorldObjects()  # the world's objects, read again only where they changed
    chain = NextClaim(runner, modes, share.room)
    held = RunStore(octx.store)
    octx = replace(octx, store=held)
    try:
        while share.take():
            before = report.batches
            try:
                turn = _turn(octx, report, world, modes=modes, runner=runner, known=known, chain=chain)
            finally:
                if report.batches == before:  # no batch ran
                    share.give_back()
            if turn.result in ("stopped", "lease_busy"):
                return turn.result, ran
            if turn.result == "idle":
                if turn.later is None:
                    return "idle", ran
                wait = (turn.later - octx.now()).total_seconds()
                if wait > max_wait:
                    return "idle", ran
                (octx.sleep or time.sleep)(max(0.0, wait))
                continue
            ran += 1
        return "limit", ran
    finally:
        try:
            chain.hand_back(octx)  # a batch claimed by the last commit and never run (the run stops)
        finally:
            held.close()


def _yields(
    octx: ObjectsContext,
    conn: Connection,
    world: str,
    rotation: list[logic.JobView],
    job_id: int,
    runner: str,
    holder: str | None = None,
    *,
    read: bool = True,
) -> bool:
    """Another run has reserved the world's next turn for a job the rotation puts before ``job_id``
    (``holder``: the reservation already read, with ``read=False``)."""
    t = partition_leases.c
    if read:
        holder = conn.execute(
            select(t.holder).where(t.asset == NEXT_TURN_ASSET, t.partition == world, t.expires_at > octx.now())
        ).scalar()
    wanted, _, other = (holder or "").partition("@")
    if not holder or other == runner or not wanted.isdigit():
        return False
    order = [v.job_id for v in rotation]
    return int(wanted) in order and order.index(int(wanted)) < order.index(job_id)


def _reserve(octx: ObjectsContext, conn: Connection, world: str, job_id: int, runner: str) -> None:
    """Reserve the world's next turn for ``job_id`` (unless another run holds it), renewing ours."""
    t = partition_leases.c
    mine = f"{job_id}@{runner}"
    conn.execute(
        delete(partition_leases).where(
            t.asset == NEXT_TURN_ASSET, t.partition == world, t.holder.endswith(f"@{runner}"), t.holder != mine
        )
    )
    leases.try_acquire(octx.store, NEXT_TURN_ASSET, world, mine, NEXT_TURN_TTL, now=octx.now(), conn=conn)
    _reserved.add((runner, world))


def _unreserve(octx: ObjectsContext, runner: str, world: str | None = None, conn: Connection | None = None) -> None:
    t = partition_leases.c
    q = delete(partition_leases).where(t.asset == NEXT_TURN_ASSET, t.holder.endswith(f"@{runner}"))
    if world is not None:
        q = q.where(t.partition == world)
        _reserved.discard((runner, world))
    else:
        _reserved.difference_update([r for r in list(_reserved) if r[0] == runner])  # list(): runs in threads
    if conn is not None:
        conn.execute(q)
        return
    with octx.store.begin() as own:
        own.execute(q)


@dataclass
class Turn:
    """What one turn of a world did: 'stopped' (busy or stopped), 'idle' (no job runnable now;
    ``later``: when a backing-off one is), 'lease_busy' (another run holds the world, or has
    reserved its next turn), or the batch's 'committed', 'done', 'failed'."""

    result: str
    later: datetime | None = None


def _holder(job_id: int) -> str:
    """A batch's own holder of the world's lease: each batch its own, so a commit of an earlier
    batch of the same job never passes the lease check of a later one."""
    return f"job{job_id}-{uuid.uuid4().hex[:12]}"


@dataclass
class Claimed:
    """An organize batch claimed by the commit of the batch before it (``_claim_next``): its lease
    (already the world's, renewed), its job row as claimed (``running``, with ``_before``), its
    page, and the world's objects as of that commit."""

    lease: BatchLease
    job: dict[str, Any]
    page: ClaimedPage
    known: WorldObjects


@dataclass
class NextClaim:
    """What a run's commit may claim next in its transaction, and the batch it claimed, not yet
    run (``claimed``): given back (``hand_back``) when the run stops before running it."""

    runner: str
    modes: Sequence[JobMode] | None
    room: Callable[[], bool]  # the run may take another batch: no claim past its last
    claimed: Claimed | None = None

    def hand_back(self, octx: ObjectsContext) -> None:
        """The claimed batch never ran: its lease given up and its job put back as before the
        claim (``_hand_back``: queued, its claim count and rotation place), in one transaction."""
        claimed, self.claimed = self.claimed, None
        if claimed is None:
            return
        with octx.store.begin() as conn:
            graph.lease_releaser(claimed.lease.world, claimed.lease.holder)(conn)
            _hand_back(conn, claimed.job)


# The commit's update of the job's counters (``graph._BATCH_DONE``) when it also claims the job's
# next batch: counted, failures reset, and claimed again (``_TAKE_JOB``), ``running`` throughout.
_KEEP_JOB = (
    update(objects_jobs)
    .where(_J.job_id == bindparam("job"), _J.status == JobStatus.RUNNING)
    .values(
        consecutive_failures=0,
        batches_done=_J.batches_done + 1,
        not_before=None,
        error=None,
        last_claimed_at=bindparam("now"),
        claims=_J.claims + 1,
    )
    .returning(*objects_jobs.c)
)


def _claim_next(
    octx: ObjectsContext,
    claim: graph.Claim,
    job: dict[str, Any],
    known: WorldObjects,
    chain: NextClaim,
    taken: list[Claimed],
) -> Callable[[Connection], bool]:
    """In the commit's transaction, after its writes (``graph.Claim.claim_next``): the claim a new
    turn of this run would make, made now. The world's flags, its next-turn reservation and its
    jobs are read again; when the agent is neither busy nor stopped, the rotation puts this job
    first among the run's modes, no other run has reserved the world's next turn, and the event
    queue has a next page, the job stays ``running`` (counted and claimed again in one UPDATE) and
    the lease, which the commit's check passed to the next batch's holder, stays taken. Otherwise
    that lease is given up and the commit gives the job back as usual (False)."""
    world, job_id = job["world_id"], int(job["job_id"])

    def claim_next(conn: Connection) -> bool:
        taken.clear()  # (an earlier attempt of this batch's commit rolled back)
        assert claim.pass_lease_to is not None
        holder, now = claim.pass_lease_to, octx.now()
        view = _claim_view(octx, conn, world, chain.modes)
        mine = (
            view is not None
            and not view.busy
            and not view.stopped
            and bool(view.order)
            and view.order[0].job_id == job_id
            and (view.reserved is None or view.reserved.endswith(f"@{chain.runner}"))
        )
        page = None
        objects = known.copy()
        if mine:
            objects.committed(claim.wrote)
            page = _claim_page(octx, conn, {**job, "consecutive_failures": 0}, objects)
        row = conn.execute(_KEEP_JOB, {"job": job_id, "now": now}).mappings().first() if page else None
        if row is None:
            graph.lease_releaser(world, holder)(conn)
            return False
        claimed = dict(row)
        before = {f: claimed[f] for f in _CLAIM_FIELDS}
        claimed["_before"] = before | {
            "status": JobStatus.QUEUED,
            "claims": claimed["claims"] - 1,
            "last_claimed_at": job["last_claimed_at"],
        }
        assert page is not None
        deadline = time.monotonic() + octx.cfg.worker_timeout_seconds
        lease = BatchLease(world, holder, deadline=deadline, job_id=job_id)
        taken.append(Claimed(lease, claimed, page, objects))
        return True

    return claim_next


# What a claim (and its batch's first steps) change on the job row before any model call: put back
# as it was when the provider's breaker refuses the batch (``_hand_back``).
_CLAIM_FIELDS = ("status", "claims", "last_claimed_at", "range_end_seq", "inventory", "inventory_pos")


def _take_job(octx: ObjectsContext, conn: Connection, job_id: int, seen: logic.JobView | None = None) -> dict[str, Any]:
    """The job claimed (running, one more claim, its rotation place now) with what the claim changed
    as it was before (``_CLAIM_FIELDS``). ``seen``: the job as the turn read it, whose
    ``last_claimed_at`` is the one before (the rest is what the UPDATE returns, or one less claim)."""
    j = objects_jobs.c
    before: dict[str, Any] | None = None
    if seen is None:
        before = dict(conn.execute(select(*(j[f] for f in _CLAIM_FIELDS)).where(j.job_id == job_id)).mappings().one())
    job = dict(conn.execute(_TAKE_JOB, {"job": job_id, "now": octx.now()}).mappings().one())
    if before is None:
        assert seen is not None
        before = {f: job[f] for f in _CLAIM_FIELDS}
        before.update(claims=job["claims"] - 1, last_claimed_at=seen.last_claimed_at)
    job["_before"] = before
    return job


def _hand_back(conn: Connection, job: dict[str, Any]) -> None:
    """The batch never reached the provider (its breaker refused the call): the job row as it was
    before the claim (queued, its claim count, rotation place, range or inventory), no failure
    recorded, no backoff. Nothing else of the batch was written: a batch writes only at its commit."""
    before = {**job["_before"], "status": JobStatus.QUEUED}
    conn.execute(update(objects_jobs).where(objects_jobs.c.job_id == job["job_id"]).values(**before))


def given_back(status: Any) -> Any:
    """``_give_back`` as the value of the job's status in another UPDATE of its row."""
    return case((status == JobStatus.RUNNING, JobStatus.QUEUED), else_=status)


def _give_back(conn: Connection, job_id: int) -> None:
    """A job reads ``running`` only while a batch holds the world's lease: when the batch ends
    without finishing the job (its commit, or the run interrupted), the job goes back to
    ``queued`` in the transaction that gives the lease up. A job already finished is left so."""
    j = objects_jobs.c
    conn.execute(
        update(objects_jobs).where(j.job_id == job_id, j.status == JobStatus.RUNNING).values(status=JobStatus.QUEUED)
    )


def _finish_job(octx: ObjectsContext, job_id: int, status: JobStatus, error: str | None = None) -> None:
    with octx.store.begin() as conn:
        conn.execute(
            update(objects_jobs)
            .where(objects_jobs.c.job_id == job_id)
            .values(status=status, finished_at=octx.now(), error=error)
        )


def _revision(conn: Connection, world: str) -> int:
    return int(
        conn.execute(select(objects_worlds.c.graph_revision).where(objects_worlds.c.world_id == world)).scalar_one()
    )


class BatchFailed(RuntimeError):
    pass


@dataclass
class BatchLease:
    """The world's lease for one batch. The batch's commit releases it in its own transaction, with
    the batch's buffered ledger rows (``finish``): nothing is left to do under it then.
    ``deadline``: time.monotonic() when the batch's time (the worker timeout) is up."""

    world: str
    holder: str
    released: bool = False
    deadline: float | None = None
    job_id: int | None = None  # the job this batch took (given back queued with the lease)

    def finish(
        self, octx: ObjectsContext, *, given_back: bool = False, released: bool = False
    ) -> Callable[[Connection], None]:
        """The commit's last step: the batch's ledger rows, the lease given up and the job given
        back (``given_back``: the commit's own update of the job's counters already did;
        ``released``: the commit's lease check already gave the lease up; each one statement less)."""
        release = graph.lease_releaser(self.world, self.holder)

        def run(conn: Connection) -> None:
            octx.llm.write_pending(conn)
            if not released:
                self.give_up(conn, release, job=not given_back)
            elif not given_back and self.job_id is not None:
                _give_back(conn, self.job_id)

        return run

    def give_up(
        self, conn: Connection, release: Callable[[Connection], None] | None = None, *, job: bool = True
    ) -> None:
        """The lease given up and the job given back, together."""
        (release or graph.lease_releaser(self.world, self.holder))(conn)
        if job and self.job_id is not None:
            _give_back(conn, self.job_id)

    def committed(self, octx: ObjectsContext) -> None:
        octx.llm.clear_pending()
        self.released = True


def run_batch(octx: ObjectsContext, job_id: int, report: WorkerReport, world: str | None = None) -> str:
    """Claim one batch of ``job_id`` under the world's lease and run it: 'committed', 'done',
    'failed' or 'lease_busy'."""
    if world is None:
        with octx.store.connect() as conn:
            world = conn.execute(select(objects_jobs.c.world_id).where(objects_jobs.c.job_id == job_id)).scalar_one()
    return _turn(octx, report, world, job_id=job_id).result


def _turn(
    octx: ObjectsContext,
    report: WorkerReport,
    world: str,
    *,
    modes: Sequence[JobMode] | None = None,
    job_id: int | None = None,
    runner: str | None = None,
    known: WorldObjects | None = None,
    chain: NextClaim | None = None,
) -> Turn:
    """One turn of ``world``: in one transaction its flags, the next job by rotation (or
    ``job_id``), the lease, the claim and, for organize, the page and related objects; then the
    batch, whose commit (or failure) is the second transaction. The offline model's ledger rows
    wait for that transaction: it is free, so nothing is lost that costs anything to redo. Any
    error inside the batch ends it as a failed claim (counted, backed off): a job is never left
    ``running`` by a batch that went wrong, nor by one that committed or was interrupted (the job
    is given back ``queued`` with the lease). ``chain``: this run's claims made by a commit
    (``_claim_next``): the batch the previous commit claimed (``chain.claimed``) runs without a
    claim of its own, and this batch's commit may claim the job's next one."""
    lease = BatchLease(world, "", released=True)  # nothing taken yet
    buffering, octx.llm.buffering = octx.llm.buffering, True
    partition = octx.llm.partition
    claimed = chain.claimed if chain is not None else None
    page: ClaimedPage | None = None
    try:
        if claimed is not None:
            assert chain is not None
            chain.claimed = None  # this turn's now: its lease is given up below if the batch does not commit
            lease, job, page, known = claimed.lease, claimed.job, claimed.page, claimed.known
            job_id, mode = int(job["job_id"]), JobMode.ORGANIZE
        else:
            with octx.store.begin() as conn:
                seen: logic.JobView | None = None
                if job_id is None:
                    view = _claim_view(octx, conn, world, modes)
                    apart = view is None
                    if view is None:  # no world row (jobs are created with one): read the three apart
                        busy, stopped = _flags(conn, world)
                        order, later, rotation = _order(octx, conn, world, modes)
                        view = ClaimView(busy, stopped, None, order, later, rotation)
                    if view.busy or view.stopped:
                        return Turn("stopped")
                    if not view.order:
                        return Turn("idle", view.later)
                    seen = view.order[0]
                    job_id = seen.job_id
                    if runner and _yields(octx, conn, world, view.rotation, job_id, runner, view.reserved, read=apart):
                        return Turn("lease_busy")
                holder = _holder(job_id)
                ttl = timedelta(seconds=octx.cfg.lease_seconds)
                if (
                    leases.try_acquire(octx.store, LEASE_ASSET, world, holder, ttl, now=octx.now(), conn=conn)
                    is not None
                ):
                    if runner:
                        _reserve(octx, conn, world, job_id, runner)
                    return Turn("lease_busy")
                if runner and (runner, world) in _reserved:
                    _unreserve(octx, runner, world, conn)
                lease = BatchLease(
                    world, holder, deadline=time.monotonic() + octx.cfg.worker_timeout_seconds, job_id=job_id
                )
                job = _take_job(octx, conn, job_id, seen)
                mode = JobMode(job["mode"])
                known = known or WorldObjects()
                page = _claim_page(octx, conn, job, known) if mode is JobMode.ORGANIZE else None
        # The unit of work is the job's batch: its calls' ledger rows name the job (the world is
        # their world_id), in a CLI run as in an asset's.
        octx.llm.partition = f"job {job_id}"
        report.batches += 1
        try:
            if mode is JobMode.COMPACT:
                end = _compact_batch(octx, job, lease, report)
            elif mode is JobMode.ORGANIZE:
                next_claim = chain if chain is not None and chain.room() else None
                end = "done" if page is None else _organize_batch(octx, job, lease, report, page, known, next_claim)
            else:
                end = _deep_batch(octx, job, lease, report)
        except LLMProviderDown:
            report.batches -= 1  # handed back: no batch of this run
            with octx.store.begin() as conn:
                octx.llm.write_pending(conn)
                graph.lease_releaser(world, lease.holder)(conn)
                _hand_back(conn, job)
            octx.llm.clear_pending()
            lease.released = True
            raise
        except (BatchFailed, SubmissionError, LLMHardFailure) as exc:
            # the provider failing (after the client's retries) is a failed claim that never ends
            # the job: an outage must not block events; the breaker bounds the retries instead
            outage = isinstance(exc, LLMHardFailure) and exc.provider_fault and octx.llm.breaker_failures > 0
            _failed(octx, job, str(exc), report, outage=outage)
            return Turn("failed")
        except Exception as exc:  # noqa: BLE001 - any other error: a failed claim, never a job left running
            log.exception("objects %s batch %s of job %s failed", mode, job.get("_batch", ""), job_id)
            _failed(octx, job, f"{type(exc).__name__}: {exc}", report)
            return Turn("failed")
        if end == "done":
            report.jobs_done += 1
            _finish_job(octx, job_id, JobStatus.DONE)
            return Turn("done")
        report.committed += 1
        return Turn("committed")
    finally:
        octx.llm.buffering = buffering
        if octx.llm.pending:  # rows no transaction of the batch took (an unexpected error)
            with octx.store.begin() as conn:
                octx.llm.write_pending(conn)
            octx.llm.clear_pending()
        octx.llm.partition = partition
        if not lease.released:  # no commit gave it up (job done or failed, or the run interrupted)
            with octx.store.begin() as conn:
                lease.give_up(conn)


def _failed(
    octx: ObjectsContext, job: dict[str, Any], error: str, report: WorkerReport, *, outage: bool = False
) -> None:
    """A failed claim: counted (a batch without progress), with backoff; the 5th consecutive
    failure of the same batch ends the job, blocking only that batch's events (originals and
    checkpoints kept), unless the provider failed it (``outage``: backing off, never ended). A
    threshold job that ends so suppresses automatic creation for an hour."""
    report.failures += 1
    report.zero_progress_batches += 1
    batch = f" batch {job['_batch']}" if job.get("_batch") else ""
    report.errors.append(f"{job['world_id']} {job['mode']} job {job['job_id']}{batch}: {error}")
    with octx.store.begin() as conn:
        octx.llm.write_pending(conn)  # the failed batch's calls are accounted with its failure
        _record_failure(octx, conn, job, error, report, outage=outage)
    octx.llm.clear_pending()


def _record_failure(
    octx: ObjectsContext,
    conn: Connection,
    job: dict[str, Any],
    error: str,
    report: WorkerReport,
    *,
    outage: bool = False,
) -> None:
    now = octx.now()
    n = job["consecutive_failures"] + 1
    j, w = objects_jobs.c, objects_worlds.c
    batch = job.get("_batch", "")
    conn.execute(
        objects_failures.insert().values(
            world_id=job["world_id"],
            job_id=job["job_id"],
            mode=job["mode"],
            batch=batch,
            error=error[:4000],
            at=now,
        )
    )
    conn.execute(
        update(objects_worlds)
        .where(w.world_id == job["world_id"])
        .values(worker_error=error[:4000], worker_error_at=now)
    )
    if n < logic.MAX_CONSECUTIVE_FAILURES or outage:
        wait = logic.backoff_seconds(octx.cfg.retry_backoff_seconds, min(n, logic.MAX_CONSECUTIVE_FAILURES))
        conn.execute(
            update(objects_jobs)
            .where(j.job_id == job["job_id"])
            .values(
                # An outage's failed claims never count toward the five that end the job: counted,
                # the first refusal after an outage blocked an event the model had never seen.
                consecutive_failures=job["consecutive_failures"] if outage else n,
                status=JobStatus.QUEUED,
                error=error[:4000],
                not_before=now + timedelta(seconds=wait),
            )
        )
        return
    blocked = 0
    if job["mode"] == JobMode.ORGANIZE and job.get("_event"):
        blocked = conn.execute(
            update(objects_event_state)
            .where(
                objects_event_state.c.event_id == job["_event"],
                objects_event_state.c.state.in_(list(logic.QUEUED_STATES)),
            )
            .values(state=EventState.BLOCKED, updated_at=now)
        ).rowcount
    report.blocked_events += blocked
    report.blocked += [job["_event"]] if blocked else []
    report.jobs_failed += 1
    report.failed_jobs.append(f"{job['world_id']} {job['mode']} job {job['job_id']}")
    conn.execute(
        update(objects_jobs)
        .where(j.job_id == job["job_id"])
        .values(consecutive_failures=n, status=JobStatus.FAILED, error=error[:4000], finished_at=now)
    )
    if job["origin"] == JobOrigin.THRESHOLD:
        conn.execute(
            update(objects_worlds)
            .where(w.world_id == job["world_id"])
            .values(auto_suppressed_until=now + logic.AUTO_SUPPRESS)
        )


@dataclass
class ModelBudget:
    """One batch's model calls: at most 16 rounds (a truncated answer is a round too); output
    asked for starts at 32,768 tokens and doubles after a truncated answer up to 131,072, never
    above the model's limit or the context left (``LLMClient.output_limit``). Every call ends by the
    batch's deadline (its timeout is the time left) and no round starts past it."""

    deadline: float | None = None  # time.monotonic() when the batch's time is up
    limit_seconds: int = logic.WORKER_TIMEOUT_DEFAULT_SECONDS
    rounds: int = 0
    output_tokens: int = logic.OUTPUT_TOKENS_DEFAULT

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


def _budget(octx: ObjectsContext, lease: BatchLease) -> ModelBudget:
    return ModelBudget(deadline=lease.deadline, limit_seconds=octx.cfg.worker_timeout_seconds)


def _ask(octx: ObjectsContext, req: LLMRequest, report: WorkerReport, budget: ModelBudget) -> LLMResult:
    """One round: the model's (untruncated) answer."""
    while True:
        if budget.rounds >= logic.MAX_MODEL_ROUNDS:
            raise BatchFailed(f"no submission within {logic.MAX_MODEL_ROUNDS} model rounds")
        left = budget.left()
        if left is not None and left <= 0:
            raise BatchFailed(f"{req.task}: the batch's {budget.limit_seconds} s are up; no round starts after them")
        budget.rounds += 1
        cap = octx.llm.output_limit(req)
        tokens = budget.output_tokens if cap is None else min(budget.output_tokens, cap)
        if tokens <= 0:
            raise BatchFailed(f"{req.task}: the prompt leaves no room in the model's context for an answer")
        report.model_calls += 1
        try:
            result = octx.llm.complete(replace(req, max_tokens=tokens, deadline=budget.deadline))
        except LLMProviderDown:
            report.model_calls -= 1  # refused without a request
            raise
        except LLMHardFailure as exc:
            left = budget.left()
            if left is not None and left < 1.0:  # the call was cut at the batch's deadline
                raise BatchFailed(
                    f"{req.task}: the batch's {budget.limit_seconds} s ran out during a model call: {exc}"
                ) from None
            raise
        if not result.truncated:
            return result
        report.truncated_answers += 1
        grown = logic.grown_output_tokens(tokens, cap)
        if grown is None:
            raise BatchFailed(
                f"{req.task}: the answer was cut at {tokens:,} output tokens, the most this model and the "
                "context left allow"
            )
        budget.output_tokens = grown


# --- compact ----------------------------------------------------------------------------------------
def _compact_batch(octx: ObjectsContext, job: dict[str, Any], lease: BatchLease, report: WorkerReport) -> str:
    world = job["world_id"]
    end = job["range_end_seq"]
    if end is None:
        end = timeline.range_end(octx, world)
        with octx.store.begin() as conn:
            conn.execute(update(objects_jobs).where(objects_jobs.c.job_id == job["job_id"]).values(range_end_seq=end))
    threshold = job["origin"] == JobOrigin.THRESHOLD
    if threshold and logic.threshold_done(
        timeline.hot_estimates(octx, [world]).get(world, 0), octx.cfg.compact_threshold_tokens
    ):
        return "done"
    size = logic.COMPACT_BATCH_MAX
    for _ in range(job["consecutive_failures"]):
        size = logic.shrink(size)
    batch = timeline.next_batch(octx, world, end, size, whole_range=not threshold)
    if not batch.nodes:
        return "done"  # nothing left to merge in the range
    job["_batch"] = ",".join(batch.ids)
    nodes = [(x["node_id"], x["text"]) for x in batch.nodes]
    req = LLMRequest(
        task="objects_compact",
        system=prompts.COMPACT_SYSTEM,
        user=prompts.compact_user(batch.nodes),
        prompt_version=prompts.COMPACT_VERSION,
        world_id=world,
        tools=[prompts.SUBMIT_COMPACT_TOOL],
        offline_answer=lambda _r: offline_rules.compact(nodes),
    )
    summary = _compact_rounds(octx, req, batch, lease, report)
    token = f"compact-{uuid.uuid4().hex}"
    release = lease.finish(octx, given_back=True)

    def finish(conn: Connection) -> None:  # in the commit's transaction: the job's count and give-back, the lease
        j = objects_jobs.c
        conn.execute(
            update(objects_jobs)
            .where(j.job_id == job["job_id"])
            .values(
                consecutive_failures=0,
                batches_done=j.batches_done + 1,
                not_before=None,
                error=None,
                status=given_back(j.status),
            )
        )
        release(conn)

    timeline.commit_compact(
        octx,
        batch,
        summary,
        token=token,
        job_id=job["job_id"],
        lease_check=graph.lease_checker(world, lease.holder, octx.now()),
        finish=finish,
    )
    lease.committed(octx)
    return "committed"


def _compact_rounds(
    octx: ObjectsContext, req: LLMRequest, batch: timeline.CompactBatch, lease: BatchLease, report: WorkerReport
) -> str:
    """The compact batch's model rounds (at most 16, within the batch's time) until a submission
    passes: its summary. As in organize, every tool call of an answer is answered in order; only
    submit_compact submits, and a refused submission (an object write, coverage other than the
    batch, a summary not shorter), another tool or an answer without a tool call goes back to the
    model as a correction, at most 3: the 4th fails the batch (a failed claim)."""
    budget = _budget(octx, lease)
    talk = BatchTalk(octx.cfg.transfer_budget_bytes, octx.cfg.transfer_budget_bytes)
    talk.messages.append({"role": "user", "content": req.user})
    while True:
        result = _ask(octx, replace(req, conversation=tuple(talk.messages)), report, budget)
        calls = prompts.parse_tool_calls(result.text, result.tool_calls)
        talk.messages.append(prompts.assistant_message(result.text, calls))
        if not calls:
            talk.correct(None, f"answer: no tool call; finish with {offline_rules.SUBMIT_COMPACT}", report)
        for call in calls:
            if call.name not in (offline_rules.SUBMIT_COMPACT, ""):  # "": the bare submission in a JSON answer
                talk.correct(
                    call,
                    f"tool: {call.name[:40]!r} is not a tool of this batch ({offline_rules.SUBMIT_COMPACT}); "
                    "compact only summarizes its nodes: object writes are refused during compact",
                    report,
                )
                continue
            try:
                return logic.check_compact_submission(call.arguments, batch.ids, batch.chars)
            except SubmissionError as exc:
                talk.correct(call, str(exc), report)


# --- organize -----------------------------------------------------------------------------------------
@dataclass
class ClaimedPage:
    """What an organize batch claims, read in the claim's transaction: the event (its state and
    text), the graph revision, and the related objects within the transfer budget."""

    event: dict[str, Any]
    start: int
    stop: int
    revision: int
    related: list[dict[str, Any]]
    core: list[dict[str, Any]] = field(default_factory=list)  # the core documents, read before written
    core_read: dict[str, int | None] = field(default_factory=dict)
    attached: set[str] = field(default_factory=set)  # the objects the event was attached to

    @property
    def text(self) -> str:
        return str(self.event["content"] or "")[self.start : self.stop]


def _claim_page(octx: ObjectsContext, conn: Connection, job: dict[str, Any], known: WorldObjects) -> ClaimedPage | None:
    """The next page of the next queued event (explicit first, then by occurrence) and what goes
    with it, in the claim's transaction: the page with the event's attachments, then what changed
    in the world's objects since ``known`` last read them (and its core documents when they did)."""
    world = job["world_id"]
    row = conn.execute(_NEXT_PAGE, {"world": world}).mappings().first()
    if row is None:
        return None
    ev = dict(row)
    attached = set((ev.pop("attached_ids") or "").split("\n")) - {""}
    text = ev["content"] or ""
    budget = octx.cfg.transfer_budget_bytes
    start = ev["page_cursor"]
    stop = min(len(text), start + logic.page_chars(budget, job["consecutive_failures"]))
    left = budget - len(text[start:stop].encode())
    if int(ev["graph_revision"]) != known.revision:  # else nothing changed since it was read
        known.refresh(conn, world)
    core, core_read = graph.core_documents(known.core, left)
    left -= logic.json_bytes(core)
    related = known.related(attached, text[start:stop], left)
    return ClaimedPage(ev, start, stop, int(ev["graph_revision"]), related, core, core_read, attached)


def object_doc(r: Any) -> dict[str, Any]:
    doc = {k: r[k] for k in ("object_id", "type", "name", "aliases", "summary", "body", "cues", "status")}
    doc["id"] = doc.pop("object_id")
    if r["type"] == "credential":
        doc.update(purpose=r["purpose"], reference=r["reference"])
    return doc


def related_objects(octx: ObjectsContext, world: str, event_id: str, text: str, budget: int) -> list[dict[str, Any]]:
    """Objects already attached to the event, then objects the page names (name or alias), then
    ``project:daily``, within ``budget`` bytes."""
    a = objects_attachments.c
    known = WorldObjects()
    with octx.store.connect() as conn:
        attached = set(conn.execute(select(a.object_id).where(a.world_id == world, a.event_id == event_id)).scalars())
        known.refresh(conn, world)
    return known.related(attached, text, budget)


# What changed in a world's objects since a graph revision, with the world's revision and its core
# documents' count and highest revision (one row, the world's, when nothing changed).
_C = objects_core.c
_OBJECTS_SINCE = (
    select(
        _W.graph_revision.label("world_revision"),
        select(func.count()).where(_C.world_id == _W.world_id).scalar_subquery().label("core_count"),
        select(func.max(_C.revision)).where(_C.world_id == _W.world_id).scalar_subquery().label("core_revision"),
        objects_objects,
    )
    .select_from(
        objects_worlds.outerjoin(
            objects_objects,
            (objects_objects.c.world_id == _W.world_id) & (objects_objects.c.revision > bindparam("since")),
        )
    )
    .where(_W.world_id == bindparam("world"))
)


@dataclass
class WorldObjects:
    """A world's objects as a worker run last read them: every row by id (in the order first read)
    as of graph revision ``revision``, each one's names and aliases lowercased, and the core
    documents. Every write of an object or a core document advances the world's graph revision and
    stamps the row with it (``graph.commit``, ``approve_project``, ``import_core_text``), and none is
    ever deleted: so a claim reads only the rows stamped after ``revision``, and the core documents
    only when their count or highest revision moved; nothing at all when the page's revision is
    ``revision``, as after this run's own commit, whose rows it keeps as written (``committed``).
    (A claim read the world's every name, then the wanted objects' rows and the core documents:
    three statements, and the names grow with the world.)"""

    revision: int = -1
    rows: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, list[str]] = field(default_factory=dict)
    core: dict[str, Any] = field(default_factory=dict)
    core_mark: tuple[int, int | None] | None = None

    def refresh(self, conn: Connection, world: str) -> None:
        rows = conn.execute(_OBJECTS_SINCE, {"world": world, "since": self.revision}).mappings().all()
        for r in rows:
            if r["object_id"] is not None:
                self.rows[r["object_id"]] = r
                self.labels[r["object_id"]] = [n.lower() for n in [r["name"], *(r["aliases"] or [])] if n]
        mark = (int(rows[0]["core_count"]), rows[0]["core_revision"]) if rows else None
        if rows:
            self.revision = int(rows[0]["world_revision"])
        if mark is None or mark != self.core_mark:
            self.core = {r.name: r for r in conn.execute(graph.CORE_ROWS, {"world": world}).all()}
            self.core_mark = mark

    def copy(self) -> WorldObjects:
        """A copy to bring forward inside a transaction that may still roll back (``adopt`` it once
        committed)."""
        return replace(self, rows=dict(self.rows), labels=dict(self.labels), core=dict(self.core))

    def adopt(self, other: WorldObjects) -> None:
        self.revision, self.rows, self.labels = other.revision, other.rows, other.labels
        self.core, self.core_mark = other.core, other.core_mark

    def committed(self, wrote: graph.Wrote | None) -> None:
        """This run's commit made revision ``wrote.revision`` from the one these rows are at: its
        rows are the world's objects at that revision, with no read. (A commit that wrote a core
        document, or one from another revision, leaves them to the next claim's read.)"""
        if wrote is None or wrote.core or wrote.revision != self.revision + 1:
            return
        for oid, r in wrote.objects.items():
            self.rows[oid] = r
            self.labels[oid] = [n.lower() for n in [r["name"], *(r["aliases"] or [])] if n]
        self.revision = wrote.revision

    def related(self, attached: set[str], text: str, budget: int) -> list[dict[str, Any]]:
        """The objects attached to the event, then those the page names (name or alias), then
        ``project:daily``, within ``budget`` bytes."""
        low = text.lower()
        wanted = sorted(oid for oid in attached if oid in self.rows)
        for oid, labels in self.labels.items():
            if oid not in attached and any(n in low for n in labels):
                wanted.append(oid)
        if logic.BUILTIN_DAILY not in wanted:
            wanted.append(logic.BUILTIN_DAILY)
        docs = [object_doc(self.rows[i]) for i in wanted if i in self.rows]
        return [dict(x) for x in logic.fit_objects(docs, budget)]


def _organize_batch(
    octx: ObjectsContext,
    job: dict[str, Any],
    lease: BatchLease,
    report: WorkerReport,
    claimed: ClaimedPage,
    known: WorldObjects,
    chain: NextClaim | None = None,
) -> str:
    """One organize batch: the page's model rounds until a submission commits. With ``chain``,
    the commit claims the job's next batch in its transaction when the rotation still gives this
    run the job (``_claim_next``); the claim is left in ``chain.claimed`` once committed."""
    world = job["world_id"]
    ev = claimed.event
    job["_event"] = ev["event_id"]
    start, stop, page_text, revision, related = (
        claimed.start,
        claimed.stop,
        claimed.text,
        claimed.revision,
        claimed.related,
    )
    job["_batch"] = f"{ev['event_id']}[{start}:{stop}]"
    token = f"organize-{uuid.uuid4().hex}"
    chars = len(ev["content"] or "")
    page = EventPage(ev["event_id"], chars, start, stop, page_text, ev["occurred_at"], ev["event_day"])
    claim = Claim(
        world,
        job["job_id"],
        JobMode.ORGANIZE,
        lease.holder,
        revision,
        {x["id"] for x in related},
        page=page,
        finish=lease.finish(octx, given_back=True, released=True),
        give_back=True,
        release_lease=True,
        batch=f"{job['job_id']}.{job['claims']}",
        core_read=dict(claimed.core_read),
        had_target=bool(claimed.attached),
    )
    taken: list[Claimed] = []  # the next batch the commit claimed (set by its last attempt)
    if chain is not None:
        claim.pass_lease_to = _holder(job["job_id"])
        claim.claim_next = _claim_next(octx, claim, job, known, chain, taken)
    budget = octx.cfg.transfer_budget_bytes
    sent = len(page_text.encode()) + logic.json_bytes(claimed.core) + sum(logic.json_bytes(o) for o in related)
    talk = BatchTalk(budget, budget - sent)

    def answer(_r: LLMRequest) -> tuple[str, list[dict[str, Any]]]:
        return offline_rules.organize(
            token=token,
            graph_revision=revision,
            event_id=page.event_id,
            page_text=page_text,
            page_end=stop,
            event_chars=page.chars,
            read_objects=related,
        )

    request = LLMRequest(
        task="objects_organize",
        system=prompts.ORGANIZE_SYSTEM,
        user=prompts.organize_user(
            token=token,
            revision=revision,
            event_id=page.event_id,
            occurred_at=page.occurred_at.isoformat(),
            chars=page.chars,
            start=start,
            stop=stop,
            text=page_text,
            progress=ev["progress"],
            objects=related,
            bytes_left=talk.left,
            scope=job["scope"] or "",
            core=claimed.core,
        ),
        prompt_version=prompts.ORGANIZE_VERSION,
        world_id=world,
        tools=[*prompts.READ_TOOLS, prompts.SUBMIT_GRAPH_TOOL],
        offline_answer=answer,
    )
    end = _rounds(octx, claim, lease, report, request, talk)
    if taken:  # the commit claimed the next batch, with the world's objects as of the commit
        assert chain is not None
        known.adopt(taken[0].known)
        chain.claimed = replace(taken[0], known=known)
    else:
        known.committed(claim.wrote)
    return end


@dataclass
class BatchTalk:
    """An organize or deep batch's conversation with its model after the claim: each answer, then
    the result of every tool call in it, in order (a tool message with its tool_call_id). Read-tool
    results count against the claim's transfer budget (``left`` bytes of ``budget``); refused calls
    are corrections (at most 3)."""

    budget: int
    left: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    corrections: int = 0

    def reply(self, call: prompts.ToolCall, content: dict[str, Any]) -> None:
        self.messages.append(prompts.tool_result(call, content))

    def send(self, call: prompts.ToolCall, result: Mapping[str, Any], offset: int) -> bool:
        """A read result within the bytes left (cut or refused when it does not fit): sent whole?"""
        fitted, size = logic.fit_result(result, self.left, self.budget, offset)
        self.left = max(0, self.left - size)
        self.reply(call, fitted)
        return fitted == result

    def correct(self, call: prompts.ToolCall | None, problem: str, report: WorkerReport) -> None:
        if self.corrections >= logic.MAX_FIELD_CORRECTIONS:
            raise BatchFailed(f"still refused after {logic.MAX_FIELD_CORRECTIONS} corrections: {problem}")
        self.corrections += 1
        report.corrections += 1
        note = {"refused": problem, "corrections_left": logic.MAX_FIELD_CORRECTIONS - self.corrections}
        if call is None:
            self.messages.append({"role": "user", "content": json.dumps(note, ensure_ascii=False)})
        else:
            self.reply(call, note)


def _rounds(
    octx: ObjectsContext, claim: Claim, lease: BatchLease, report: WorkerReport, request: LLMRequest, talk: BatchTalk
) -> str:
    """The batch's model rounds (at most 16, within the batch's time) until a submission commits.
    Every tool call of an answer is answered in order: a read tool with its result, the submit tool
    with its refusal (a commit ends the batch: calls after it are not run), any other tool as
    unknown. A refusal or a bad argument is a correction; the 4th fails the batch."""
    budget = _budget(octx, lease)
    talk.messages.append({"role": "user", "content": request.user})
    while True:
        result = _ask(octx, replace(request, conversation=tuple(talk.messages)), report, budget)
        calls = prompts.parse_tool_calls(result.text, result.tool_calls)
        talk.messages.append(prompts.assistant_message(result.text, calls))
        if not calls:
            talk.correct(None, f"answer: no tool call; finish with {offline_rules.SUBMIT_GRAPH}", report)
        for call in calls:
            if _one_call(octx, claim, lease, report, talk, call):
                return "committed"


def _one_call(
    octx: ObjectsContext, claim: Claim, lease: BatchLease, report: WorkerReport, talk: BatchTalk, call: prompts.ToolCall
) -> bool:
    """Answer one tool call of the batch's model; True when it committed the batch."""
    from memory_pipeline.objects import tools

    if call.name in (offline_rules.SUBMIT_GRAPH, ""):  # "": the bare submission in a JSON answer
        try:
            receipt = graph.commit(octx, claim, call.arguments, size_bytes=call.size)
        except graph.LeaseLost:
            raise
        except SubmissionError as exc:
            talk.correct(call, str(exc), report)
            return False
        if receipt.get("replayed"):  # this batch's earlier commit: nothing new
            raise BatchFailed(
                f"no progress: token {receipt['token']} was already committed (revision {receipt['revision']})"
            )
        lease.committed(octx)
        if receipt.get("outcome"):
            report.outcomes[receipt["outcome"]] = report.outcomes.get(receipt["outcome"], 0) + 1
        return True
    if call.name not in tools.BATCH_TOOL_ARGS:
        offered = ", ".join([*tools.BATCH_TOOL_ARGS, offline_rules.SUBMIT_GRAPH])
        talk.correct(call, f"tool: {call.name[:40]!r} is not a tool of this batch ({offered})", report)
        return False
    try:
        result = tools.batch_read(octx, claim.world_id, call.name, call.arguments)
    except tools.ToolError as exc:
        talk.correct(call, str(exc), report)
        return False
    offset = call.arguments.get("offset", 0) if isinstance(call.arguments, dict) else 0
    if talk.send(call, result, offset) and call.name == "memory_read":
        claim.read_ids.add(result["id"])  # only a dossier the model was sent may be rewritten
    return False


# --- deep review ------------------------------------------------------------------------------------------
def _deep_batch(octx: ObjectsContext, job: dict[str, Any], lease: BatchLease, report: WorkerReport) -> str:
    world = job["world_id"]
    o = objects_objects.c
    inventory = job["inventory"]
    if inventory is None:  # persisted at the first claim: every object, archived and unmentioned too
        with octx.store.begin() as conn:
            inventory = list(
                conn.execute(select(o.object_id).where(o.world_id == world).order_by(o.object_id)).scalars()
            )
            conn.execute(
                update(objects_jobs)
                .where(objects_jobs.c.job_id == job["job_id"])
                .values(inventory=inventory, inventory_pos=0)
            )
    pos = job["inventory_pos"] or 0
    if pos >= len(inventory):
        return "done"
    size = logic.DEEP_BATCH_MAX
    for _ in range(job["consecutive_failures"]):
        size = logic.shrink(size)
    batch_ids = inventory[pos : pos + size]
    job["_batch"] = ",".join(batch_ids)
    with octx.store.connect() as conn:
        rows = (
            conn.execute(select(objects_objects).where(o.world_id == world, o.object_id.in_(batch_ids)))
            .mappings()
            .all()
        )
        revision = _revision(conn, world)
        batch_ids, docs, core, core_read = _fit_deep_batch(octx, conn, world, batch_ids, rows)
    job["_batch"] = ",".join(batch_ids)
    present = [d["id"] for d in docs]
    token = f"deep-{uuid.uuid4().hex}"
    claim = Claim(
        world,
        job["job_id"],
        JobMode.DEEP,
        lease.holder,
        revision,
        set(present),
        deep_ids=batch_ids,
        finish=lease.finish(octx, given_back=True, released=True),
        give_back=True,
        release_lease=True,
        batch=f"{job['job_id']}.{job['claims']}",
        core_read=core_read,
    )
    budget = octx.cfg.transfer_budget_bytes
    talk = BatchTalk(budget, budget - sum(logic.json_bytes(d) for d in docs) - logic.json_bytes(core))
    request = LLMRequest(
        task="objects_deep",
        system=prompts.DEEP_SYSTEM,
        user=prompts.deep_user(
            token=token,
            revision=revision,
            objects=docs,
            bytes_left=max(0, talk.left),
            scope=job["scope"] or "",
            core=core,
        ),
        prompt_version=prompts.DEEP_VERSION,
        world_id=world,
        tools=[*prompts.READ_TOOLS, prompts.SUBMIT_GRAPH_TOOL],
        offline_answer=lambda _r: offline_rules.deep(token=token, graph_revision=revision, object_ids=batch_ids),
    )
    return _rounds(octx, claim, lease, report, request, talk)


def _fit_deep_batch(
    octx: ObjectsContext, conn: Connection, world: str, ids: list[str], rows: Sequence[Any]
) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]], dict[str, int | None]]:
    """The deep batch within the transfer budget (seed 001 §5: at most 4 objects, shrunk to what
    fits): the first object always (refused when it alone is over the budget), then the core
    documents within what is left, then the next objects of the inventory while they fit. An id
    the store no longer has costs nothing and is confirmed like the rest. (ids, dossiers, core,
    core read.)"""
    budget = octx.cfg.transfer_budget_bytes
    by_id = {r["object_id"]: object_doc(r) for r in rows}
    sizes = [logic.json_bytes(by_id[i]) if i in by_id else 0 for i in ids]
    if sizes[0] > budget:
        raise BatchFailed(
            f"deep review: {ids[0]} alone is {sizes[0]:,} bytes as sent, over the transfer budget of {budget:,} "
            "bytes (memory.objects.transfer_budget_bytes): it cannot be reviewed until the budget is raised"
        )
    core, core_read = graph.core_for_batch(conn, world, budget - sizes[0])
    taken = 1 + logic.fitting_prefix(sizes[1:], budget - sizes[0] - logic.json_bytes(core))
    return ids[:taken], [by_id[i] for i in ids[:taken] if i in by_id], core, core_read


def requeue_days(octx: ObjectsContext, days: Sequence[date], worlds: Sequence[str] | None = None) -> Rebuild:
    """Rebuild of CST days: their archived events go back to the queue as an explicit request
    that moves objects forward (attachments, objects and commits stay; a linked event keeps its
    target, so it can never turn archive_only). Hot and blocked events are left as they are."""
    s = objects_event_state.c
    now = octx.now()
    with octx.store.begin() as conn:
        q = (
            update(objects_event_state)
            .where(s.event_day.in_(list(days)), s.state.in_(list(logic.FINAL_STATES)))
            .values(state=EventState.PENDING, page_cursor=0, explicit=True, queued_at=now, updated_at=now)
            .returning(s.world_id)
        )
        if worlds:
            q = q.where(s.world_id.in_(list(worlds)))
        touched = sorted(set(conn.execute(q).scalars()))
    receipts = [
        enqueue(octx, w, JobMode.ORGANIZE, f"rebuild {', '.join(d.isoformat() for d in days)}") for w in touched
    ]
    return {"worlds": touched, "jobs": receipts}
