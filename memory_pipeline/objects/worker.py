"""Seed 001 §3, §5: jobs, the one lease per world, batch after batch (compact / organize / deep),
rotation, failures, blocking and the automatic-creation rules. Core I/O, no Dagster.

A job is created by ``enqueue`` (memory_organize: explicit) or by the automatic rules (threshold,
hourly, nightly). ``run_worker`` advances every runnable job batch by batch within its run (it
never waits for the next tick). Each batch holds the world's lease (the platform lease table,
asset ``objects_worker``, partition = world): one valid lease at a time, worker timeout + 60 s."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select, update
from sqlalchemy.exc import IntegrityError

from memory_pipeline.lib import ids
from memory_pipeline.lib.llm import LLMRequest
from memory_pipeline.lib.llm.client import LLMHardFailure
from memory_pipeline.lib.store import leases, upsert
from memory_pipeline.lib.store.tables import conversations, messages
from memory_pipeline.lib.store.tables import worlds as worlds_table
from memory_pipeline.lib.text import short_hash
from memory_pipeline.objects import graph, logic, offline_rules, prompts, timeline
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.graph import LEASE_ASSET, Claim, EventPage
from memory_pipeline.objects.logic import EventState, JobMode, JobOrigin, JobStatus, SubmissionError
from memory_pipeline.objects.tables import (
    objects_attachments,
    objects_event_state,
    objects_failures,
    objects_jobs,
    objects_objects,
    objects_worlds,
)

ACTIVE_JOB = (JobStatus.QUEUED, JobStatus.RUNNING)


class RequestError(ValueError):
    """memory_organize refused its arguments (the message names the field); nothing written."""


# --- enqueue (memory_organize) ---------------------------------------------------------------------
def _job_receipt(row: Any, **extra: Any) -> dict[str, Any]:
    return {
        "job_id": row["job_id"],
        "world_id": row["world_id"],
        "mode": row["mode"],
        "origin": row["origin"],
        "scope": row["scope"],
        "retry_blocked": row["retry_blocked"],
        "status": row["status"],
        "created_at": row["created_at"].isoformat(),
        **extra,
    }


def check_request(
    world: Any, mode: Any, scope: Any, retry_blocked: Any, token: Any
) -> tuple[str, JobMode, str, bool, str | None]:
    problem = ids.validate_id(world)
    if problem:
        raise RequestError(f"world: {problem}")
    try:
        jmode = JobMode(mode)
    except ValueError:
        raise RequestError(f"mode: {mode!r} is not a mode ({', '.join(JobMode)})") from None
    if not isinstance(scope, str) or len(scope) > logic.PROGRESS_MAX_CHARS or "\x00" in scope:
        raise RequestError(f"scope: must be a string of at most {logic.PROGRESS_MAX_CHARS:,} characters")
    if not isinstance(retry_blocked, bool):
        raise RequestError(f"retry_blocked: expected true or false, got {type(retry_blocked).__name__}")
    if token is not None and (not isinstance(token, str) or not 8 <= len(token) <= 128 or not ids.is_id(token)):
        raise RequestError(f"token: must be 8-128 characters of {ids.ID_ALPHABET}")
    return str(world), jmode, scope, retry_blocked, token


def enqueue(
    octx: ObjectsContext,
    world: Any,
    mode: Any,
    scope: Any = "",
    retry_blocked: Any = False,
    token: Any = None,
    *,
    origin: JobOrigin = JobOrigin.EXPLICIT,
    local_day: date | None = None,
) -> dict[str, Any]:
    """memory_organize(mode, scope, retry_blocked): an enqueue receipt at once. ``scope`` is a goal
    and search hint for the model, never a filter. A replayed token returns the original receipt
    and does nothing (in particular it never releases blocked events again)."""
    world, jmode, scope, retry_blocked, token = check_request(world, mode, scope, retry_blocked, token)
    with octx.store.begin() as conn:
        old = _by_token(conn, token)
        if old is not None:
            return _job_receipt(old, replayed=True, released_blocked=0)
        return _create_job(conn, octx, world, jmode, scope, retry_blocked, token, origin, local_day)


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
) -> dict[str, Any]:
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
    return _job_receipt(row, replayed=False, released_blocked=released)


# The world's own memory requests are recorded in one conversation per world on this platform.
REQUEST_PLATFORM = "memory"
REQUEST_SOURCE = "memory_organize"


def request_conversation_id(world: str) -> str:
    cid = f"memory-requests#{world}"
    return cid if len(cid) <= ids.MAX_ID_CHARS else f"memory-requests#{short_hash([world], 32)}"


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
        update=[],
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
            source=f"{REQUEST_SOURCE}: jobs {', '.join(str(j) for j in jobs)}",
        )
    )
    return event_id


def organize_now(
    octx: ObjectsContext,
    world: Any,
    scope: Any = "",
    token: Any = None,
    retry_blocked: Any = False,
    mode: Any = JobMode.ORGANIZE,
) -> list[dict[str, Any]]:
    """ "Organize now": compact first, then organize (or deep review: ``mode``). The world's raw
    events not yet in the hot timeline enter it, then two explicit jobs are created with the
    request event in one transaction; the second waits for the compact job
    (``logic.waits_for_compact``). A replayed token returns the original receipts and records
    nothing."""
    world, then, scope, retry_blocked, token = check_request(world, mode, scope, retry_blocked, token)
    if then is JobMode.COMPACT:
        raise RequestError("mode: organize now compacts first, then organizes or reviews: organize | deep")
    compact_token = f"compact.{short_hash([token], 40)}" if token else None

    def replay() -> list[dict[str, Any]] | None:
        with octx.store.connect() as conn:
            old, first = _by_token(conn, token), _by_token(conn, compact_token)
        if old is None:
            return None  # (a token first used by a plain request has no compact job: its receipt alone)
        return [_job_receipt(r, replayed=True, released_blocked=0) for r in (first, old) if r is not None]

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
) -> list[dict[str, Any]]:
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


def set_flags(octx: ObjectsContext, world: str, *, busy: bool | None = None, stopped: bool | None = None) -> None:
    """The agent runtime marks its world busy or stopped: no batch is claimed meanwhile."""
    values = {k: v for k, v in {"busy": busy, "stopped": stopped}.items() if v is not None}
    with octx.store.begin() as conn:
        timeline.ensure_worlds(conn, [world])
        if values:
            conn.execute(update(objects_worlds).where(objects_worlds.c.world_id == world).values(**values))


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


def enqueue_threshold(octx: ObjectsContext) -> list[dict[str, Any]]:
    return [enqueue(octx, w, JobMode.COMPACT, origin=JobOrigin.THRESHOLD) for w in threshold_worlds(octx)]


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


def enqueue_hourly(octx: ObjectsContext) -> list[dict[str, Any]]:
    return [enqueue(octx, w, JobMode.ORGANIZE, origin=JobOrigin.HOURLY) for w in hourly_worlds(octx)]


def deep_worlds(octx: ObjectsContext) -> list[tuple[str, date]]:
    """Worlds whose nightly deep review is due now (logic.deep_due), not in flight."""
    now = octx.now()
    local_now = now.astimezone(octx.tz)
    w, c, m = objects_worlds.c, conversations.c, messages.c
    with octx.store.connect() as conn:
        flags = conn.execute(select(w.world_id, w.last_deep_date)).all()
        last = dict(
            conn.execute(
                select(c.world_id, func.max(m.at))
                .join(messages, m.conversation_id == c.conversation_id)
                .group_by(c.world_id)
            ).all()
        )
    skip = _in_flight(octx, JobMode.DEEP)
    due = []
    for world, last_date in flags:
        at = last.get(world)
        if world not in skip and logic.deep_due(local_now, last_date, at.astimezone(octx.tz) if at else None):
            due.append((world, local_now.date()))
    return due


def enqueue_deep(octx: ObjectsContext) -> list[dict[str, Any]]:
    out = []
    for world, day in deep_worlds(octx):
        with octx.store.begin() as conn:
            conn.execute(update(objects_worlds).where(objects_worlds.c.world_id == world).values(last_deep_date=day))
        out.append(enqueue(octx, world, JobMode.DEEP, origin=JobOrigin.NIGHTLY, local_day=day))
    return out


# --- the worker -------------------------------------------------------------------------------------
@dataclass
class WorkerReport:
    batches: int = 0
    committed: int = 0
    failures: int = 0
    model_calls: int = 0
    jobs_done: int = 0
    jobs_failed: int = 0
    blocked_events: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    zero_progress_continue: int = 0
    truncated_answers: int = 0  # answers cut at max_tokens (the next call asked for more)
    lease_busy: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def release_stale(octx: ObjectsContext) -> int:
    """Jobs found ``running`` whose world lease is gone or expired are released for a new claim."""
    from memory_pipeline.lib.store.tables import partition_leases

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
        return _order(octx, conn, world, modes)


def _order(
    octx: ObjectsContext, conn: Connection, world: str, modes: Sequence[JobMode] | None
) -> tuple[list[logic.JobView], datetime | None]:
    j = objects_jobs.c
    q = select(j.job_id, j.mode, j.origin, j.created_at, j.last_claimed_at, j.not_before).where(
        j.world_id == world, j.status.in_(list(ACTIVE_JOB))
    )
    rows = conn.execute(q).all()
    # Every unfinished job of the world takes part (a compact job holds back the organize request
    # after it even in a run of other modes); only ``modes`` are returned.
    views = [
        logic.JobView(r.job_id, JobOrigin(r.origin), r.created_at, r.last_claimed_at, r.not_before, JobMode(r.mode))
        for r in rows
    ]
    mine = [v for v in views if not modes or v.mode in modes]
    later = min((v.not_before for v in mine if v.not_before and v.not_before > octx.now()), default=None)
    return [v for v in logic.rotation_order(views, octx.now()) if v in mine], later


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


def _flags(conn: Connection, world: str) -> tuple[bool, bool]:
    w = objects_worlds.c
    row = conn.execute(select(w.busy, w.stopped).where(w.world_id == world)).first()
    return (bool(row.busy), bool(row.stopped)) if row else (False, False)


def run_worker(
    octx: ObjectsContext,
    worlds: Sequence[str] | None = None,
    max_batches: int | None = None,
    max_wait: float = 120.0,
    modes: Sequence[JobMode] | None = None,
) -> WorkerReport:
    """Advance every runnable job, batch after batch, rotating by least-recent claim, until no job
    is runnable (or ``max_batches``). A job backing off is waited for (at most ``max_wait`` s)."""
    report = WorkerReport()
    release_stale(octx)
    limit = max_batches if max_batches is not None else octx.cfg.max_batches_per_run
    for world in _worlds_with_jobs(octx, worlds, modes):
        while report.batches < limit:
            turn = _turn(octx, report, world, modes=modes)
            if turn.result == "stopped":
                break
            if turn.result == "idle":
                if turn.later is None:
                    break
                wait = (turn.later - octx.now()).total_seconds()
                if wait > max_wait:
                    break
                (octx.sleep or time.sleep)(max(0.0, wait))
                continue
            if turn.result == "lease_busy":
                report.lease_busy.append(world)
                break
    return report


@dataclass
class Turn:
    """What one turn of a world did: 'stopped' (busy or stopped), 'idle' (no job runnable now;
    ``later``: when a backing-off one is), 'lease_busy', or the batch's 'committed', 'done',
    'failed'."""

    result: str
    later: datetime | None = None


def _take_job(octx: ObjectsContext, conn: Connection, job_id: int) -> dict[str, Any]:
    j = objects_jobs.c
    return dict(
        conn.execute(
            update(objects_jobs)
            .where(j.job_id == job_id)
            .values(status=JobStatus.RUNNING, last_claimed_at=octx.now(), claims=j.claims + 1)
            .returning(*objects_jobs.c)
        )
        .mappings()
        .one()
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
    the batch's buffered ledger rows (``finish``): nothing is left to do under it then."""

    world: str
    holder: str
    released: bool = False

    def finish(self, octx: ObjectsContext) -> Callable[[Connection], None]:
        release = graph.lease_releaser(self.world, self.holder)

        def run(conn: Connection) -> None:
            octx.llm.write_pending(conn)
            release(conn)

        return run

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
) -> Turn:
    """One turn of ``world``: in one transaction its flags, the next job by rotation (or
    ``job_id``), the lease, the claim and, for organize, the page and related objects; then the
    batch, whose commit (or failure) is the second transaction. The offline model's ledger rows
    wait for that transaction: it is free, so nothing is lost that costs anything to redo."""
    lease = BatchLease(world, "", released=True)  # nothing taken yet
    buffering, octx.llm.buffering = octx.llm.buffering, True
    try:
        with octx.store.begin() as conn:
            if job_id is None:
                busy, stopped = _flags(conn, world)
                if busy or stopped:
                    return Turn("stopped")
                order, later = _order(octx, conn, world, modes)
                if not order:
                    return Turn("idle", later)
                job_id = order[0].job_id
            holder = f"job{job_id}-{uuid.uuid4().hex[:12]}"
            ttl = timedelta(seconds=octx.cfg.lease_seconds)
            if leases.try_acquire(octx.store, LEASE_ASSET, world, holder, ttl, now=octx.now(), conn=conn) is not None:
                return Turn("lease_busy")
            lease = BatchLease(world, holder)
            job = _take_job(octx, conn, job_id)
            mode = JobMode(job["mode"])
            page = _claim_page(octx, conn, job) if mode is JobMode.ORGANIZE else None
        report.batches += 1
        try:
            if mode is JobMode.COMPACT:
                done = _compact_batch(octx, job, lease, report)
            elif mode is JobMode.ORGANIZE:
                done = page is None or _organize_batch(octx, job, lease, report, page)
            else:
                done = _deep_batch(octx, job, lease, report)
        except (BatchFailed, SubmissionError, LLMHardFailure) as exc:
            _failed(octx, job, str(exc), report)
            return Turn("failed")
        if done:
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
        if not lease.released:
            leases.release(octx.store, LEASE_ASSET, world, lease.holder)


def _failed(octx: ObjectsContext, job: dict[str, Any], error: str, report: WorkerReport) -> None:
    """A failed claim: counted, with backoff; the 5th consecutive failure of the same batch ends
    the job, blocking only that batch's events (originals and checkpoints kept). A threshold job
    that ends so suppresses automatic creation for an hour."""
    report.failures += 1
    report.errors.append(error)
    with octx.store.begin() as conn:
        octx.llm.write_pending(conn)  # the failed batch's calls are accounted with its failure
        _record_failure(octx, conn, job, error, report)
    octx.llm.clear_pending()


def _record_failure(
    octx: ObjectsContext, conn: Connection, job: dict[str, Any], error: str, report: WorkerReport
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
    if n < logic.MAX_CONSECUTIVE_FAILURES:
        wait = logic.backoff_seconds(octx.cfg.retry_backoff_seconds, n)
        conn.execute(
            update(objects_jobs)
            .where(j.job_id == job["job_id"])
            .values(
                consecutive_failures=n,
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
    report.jobs_failed += 1
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
    above the model's limit or the context left (``LLMClient.output_limit``)."""

    rounds: int = 0
    output_tokens: int = logic.OUTPUT_TOKENS_DEFAULT


def _complete(octx: ObjectsContext, req: LLMRequest, report: WorkerReport, budget: ModelBudget) -> tuple[str, Any]:
    while True:
        if budget.rounds >= logic.MAX_MODEL_ROUNDS:
            raise BatchFailed(f"no submission within {logic.MAX_MODEL_ROUNDS} model rounds")
        budget.rounds += 1
        cap = octx.llm.output_limit(req)
        tokens = budget.output_tokens if cap is None else min(budget.output_tokens, cap)
        if tokens <= 0:
            raise BatchFailed(f"{req.task}: the prompt leaves no room in the model's context for an answer")
        report.model_calls += 1
        result = octx.llm.complete(replace(req, max_tokens=tokens))
        if not result.truncated:
            break
        report.truncated_answers += 1
        grown = logic.grown_output_tokens(tokens, cap)
        if grown is None:
            raise BatchFailed(
                f"{req.task}: the answer was cut at {tokens:,} output tokens, the most this model and the "
                "context left allow"
            )
        budget.output_tokens = grown
    call = prompts.parse_tool_call(result.text, result.tool_calls)
    if call is None:
        raise BatchFailed(f"{req.task}: the model answered without a tool call or JSON object")
    return call


# --- compact ----------------------------------------------------------------------------------------
def _compact_batch(octx: ObjectsContext, job: dict[str, Any], lease: BatchLease, report: WorkerReport) -> bool:
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
        return True
    size = logic.COMPACT_BATCH_MAX
    for _ in range(job["consecutive_failures"]):
        size = logic.shrink(size)
    batch = timeline.next_batch(octx, world, end, size, whole_range=not threshold)
    if not batch.nodes:
        return True  # nothing left to merge in the range
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
    name, args = _complete(octx, req, report, ModelBudget())
    if name and name != offline_rules.SUBMIT_COMPACT:
        raise SubmissionError(name, "compact has one tool, submit_compact; any other (an object write) is refused")
    summary = logic.check_compact_submission(args, batch.ids, batch.chars)
    token = f"compact-{uuid.uuid4().hex}"
    release = lease.finish(octx)

    def finish(conn: Connection) -> None:  # in the commit's transaction: the job's count, the lease
        conn.execute(
            update(objects_jobs)
            .where(objects_jobs.c.job_id == job["job_id"])
            .values(consecutive_failures=0, batches_done=objects_jobs.c.batches_done + 1, not_before=None, error=None)
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
    return False


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

    @property
    def text(self) -> str:
        return str(self.event["content"] or "")[self.start : self.stop]


def _claim_page(octx: ObjectsContext, conn: Connection, job: dict[str, Any]) -> ClaimedPage | None:
    """The next page of the next queued event (explicit first, then by occurrence) and what goes
    with it: three reads in the claim's transaction."""
    world = job["world_id"]
    s, w = objects_event_state.c, objects_worlds.c
    row = (
        conn.execute(
            select(objects_event_state, messages.c.content, w.graph_revision)
            .join(messages, messages.c.message_id == s.event_id)
            .join(objects_worlds, w.world_id == s.world_id)
            .where(s.world_id == world, s.state.in_(list(logic.QUEUED_STATES)))
            .order_by(s.explicit.desc(), s.occurred_at, s.event_id)
            .limit(1)
        )
        .mappings()
        .first()
    )
    if row is None:
        return None
    ev = dict(row)
    text = ev["content"] or ""
    budget = octx.cfg.transfer_budget_bytes
    start = ev["page_cursor"]
    stop = min(len(text), start + logic.page_chars(budget, job["consecutive_failures"]))
    left = budget - len(text[start:stop].encode())
    core, core_read = graph.core_for_batch(conn, world, left)
    left -= len(json.dumps(core, ensure_ascii=False).encode())
    related = _related(conn, world, ev["event_id"], text[start:stop], left)
    return ClaimedPage(ev, start, stop, int(ev["graph_revision"]), related, core, core_read)


def object_doc(r: Any) -> dict[str, Any]:
    doc = {k: r[k] for k in ("object_id", "type", "name", "aliases", "summary", "body", "cues", "status")}
    doc["id"] = doc.pop("object_id")
    if r["type"] == "credential":
        doc.update(purpose=r["purpose"], reference=r["reference"])
    return doc


def related_objects(octx: ObjectsContext, world: str, event_id: str, text: str, budget: int) -> list[dict[str, Any]]:
    """Objects already attached to the event, then objects the page names (name or alias), then
    ``project:daily``, within ``budget`` bytes."""
    with octx.store.connect() as conn:
        return _related(conn, world, event_id, text, budget)


def _related(conn: Connection, world: str, event_id: str, text: str, budget: int) -> list[dict[str, Any]]:
    """``related_objects`` on a connection: two queries (the world's names with whether each is
    attached to the event, then the wanted objects' rows)."""
    o, a = objects_objects.c, objects_attachments.c
    low = text.lower()
    attached_q = (
        select(a.object_id).where(a.world_id == world, a.event_id == event_id, a.object_id == o.object_id).exists()
    )
    names = conn.execute(select(o.object_id, o.name, o.aliases, attached_q).where(o.world_id == world)).all()
    wanted = sorted(oid for oid, _, _, attached in names if attached)
    for oid, name, aliases, attached in names:
        if not attached and any(n and n.lower() in low for n in [name, *(aliases or [])]):
            wanted.append(oid)
    if logic.BUILTIN_DAILY not in wanted:
        wanted.append(logic.BUILTIN_DAILY)
    rows = conn.execute(select(objects_objects).where(o.world_id == world, o.object_id.in_(wanted))).mappings().all()
    by_id = {r["object_id"]: object_doc(r) for r in rows}
    return [dict(x) for x in logic.fit_objects([by_id[i] for i in wanted if i in by_id], budget)]


def _organize_batch(
    octx: ObjectsContext, job: dict[str, Any], lease: BatchLease, report: WorkerReport, claimed: ClaimedPage
) -> bool:
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
        finish=lease.finish(octx),
        core_read=dict(claimed.core_read),
    )
    notes: list[str] = []

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

    return _rounds(
        octx,
        claim,
        lease,
        report,
        lambda: LLMRequest(
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
                notes=notes,
                scope=job["scope"] or "",
                core=claimed.core,
            ),
            prompt_version=prompts.ORGANIZE_VERSION,
            world_id=world,
            tools=[*prompts.READ_TOOLS, prompts.SUBMIT_GRAPH_TOOL],
            offline_answer=answer,
        ),
        notes,
    )


def _rounds(
    octx: ObjectsContext, claim: Claim, lease: BatchLease, report: WorkerReport, build: Any, notes: list[str]
) -> bool:
    """At most 16 model rounds and 3 field-level corrections per batch; read tools add to what the
    batch has read (so their objects may be updated)."""
    from memory_pipeline.objects import recall

    corrections = 0
    budget = ModelBudget()
    while True:
        name, args = _complete(octx, build(), report, budget)
        if name == "memory_find" and isinstance(args, dict):
            found = recall.find(octx.store, claim.world_id, str(args.get("query", "")))
            notes.append(f"memory_find {args.get('query')!r}: {[f['id'] for f in found]}")
            continue
        if name == "memory_read" and isinstance(args, dict):
            doc = recall.read(octx.store, claim.world_id, str(args.get("id", "")))
            if doc is not None:
                claim.read_ids.add(doc["id"])
            notes.append(f"memory_read {args.get('id')!r}: {doc}")
            continue
        if name in ("memory_list", "memory_evidence") and isinstance(args, dict):
            notes.append(_look(octx, claim.world_id, name, args))
            continue
        try:
            receipt = graph.commit(octx, claim, args)
        except graph.LeaseLost:
            raise
        except SubmissionError as exc:
            corrections += 1
            if corrections > logic.MAX_FIELD_CORRECTIONS:
                raise
            notes.append(f"refused: {exc}")
            continue
        if not receipt.get("replayed"):
            lease.committed(octx)
        outcome = receipt.get("outcome")
        if outcome:
            report.outcomes[outcome] = report.outcomes.get(outcome, 0) + 1
        report.zero_progress_continue += int(bool(receipt.get("zero_progress_continue")))
        return False


def _look(octx: ObjectsContext, world: str, name: str, args: dict[str, Any]) -> str:
    """memory_list / memory_evidence for the model: what they return, or why they refused, as a
    note for its next round (a bad argument is the model's to correct, not a failed batch). Neither
    counts as reading an object's dossier: only memory_read allows rewriting it."""
    from memory_pipeline.objects import recall

    offset = args.get("offset", 0)
    try:
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise recall.RecallError("offset: must be an integer")
        if name == "memory_list":
            return f"memory_list {args.get('type')!r}: {recall.list_objects(octx.store, world, str(args.get('type')), offset)}"
        oid = str(args.get("id", ""))
        return f"memory_evidence {oid!r}: {recall.evidence(octx.store, world, oid, offset)}"
    except recall.RecallError as exc:
        return f"{name} refused: {exc}"


# --- deep review ------------------------------------------------------------------------------------------
def _deep_batch(octx: ObjectsContext, job: dict[str, Any], lease: BatchLease, report: WorkerReport) -> bool:
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
        return True
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
        docs = [object_doc(r) for r in rows]
        left = octx.cfg.transfer_budget_bytes - len(json.dumps(docs, ensure_ascii=False, default=str).encode())
        core, core_read = graph.core_for_batch(conn, world, left)
    present = [i for i in batch_ids if i in {d["id"] for d in docs}]
    token = f"deep-{uuid.uuid4().hex}"
    claim = Claim(
        world,
        job["job_id"],
        JobMode.DEEP,
        lease.holder,
        revision,
        set(present),
        deep_ids=batch_ids,
        finish=lease.finish(octx),
        core_read=core_read,
    )
    notes: list[str] = []
    return _rounds(
        octx,
        claim,
        lease,
        report,
        lambda: LLMRequest(
            task="objects_deep",
            system=prompts.DEEP_SYSTEM,
            user=prompts.deep_user(
                token=token, revision=revision, objects=docs, notes=notes, scope=job["scope"] or "", core=core
            ),
            prompt_version=prompts.DEEP_VERSION,
            world_id=world,
            tools=[*prompts.READ_TOOLS, prompts.SUBMIT_GRAPH_TOOL],
            offline_answer=lambda _r: offline_rules.deep(token=token, graph_revision=revision, object_ids=batch_ids),
        ),
        notes,
    )


def requeue_days(octx: ObjectsContext, days: Sequence[date], worlds: Sequence[str] | None = None) -> dict[str, Any]:
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
