"""Seed 001 §2, §4-5: committing a graph write (organize and deep) against the store, in one
transaction: objects (+ a version row per write), relations, attachments, core, the event's page
cursor, progress and outcome, the receipt, one graph revision. A refusal writes nothing.

Refused here (besides the pure field checks of ``logic.check_graph_write``): an expired lease, a
stale graph revision, an overwrite of an object the batch did not read, evidence outside the
claimed event, a write for an event other than the claimed one (a skipped event), a page_end past
the claimed page (a skipped unread page), the outcome rules. A token belongs to its batch: the
same submission replayed for the same batch returns the original receipt; a token of another
batch (another event, page, world or claim) is refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, NotRequired, TypedDict

from sqlalchemy import Connection, bindparam, case, delete, exists, func, select, update
from sqlalchemy.exc import IntegrityError

from memory_pipeline.lib.jsontypes import JSONObject
from memory_pipeline.lib.store import Store, requests, upsert
from memory_pipeline.lib.store.tables import partition_leases
from memory_pipeline.objects import logic
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.logic import (
    CoreAuthor,
    EventState,
    GraphWrite,
    JobStatus,
    ObjectStatus,
    ObjectType,
    Outcome,
    SubmissionError,
)
from memory_pipeline.objects.tables import (
    objects_attachments,
    objects_core,
    objects_core_versions,
    objects_event_state,
    objects_jobs,
    objects_objects,
    objects_receipts,
    objects_relations,
    objects_versions,
    objects_worlds,
)

LEASE_ASSET = "objects_worker"  # the platform lease table: one valid lease per world (agent)


@dataclass
class EventPage:
    event_id: str
    chars: int
    start: int
    stop: int
    text: str
    occurred_at: datetime
    event_day: date


@dataclass
class Claim:
    """One claimed batch: what the model was given and under which lease and revision."""

    world_id: str
    job_id: int | None
    mode: logic.JobMode
    holder: str
    graph_revision: int
    read_ids: set[str] = field(default_factory=set)
    page: EventPage | None = None
    deep_ids: list[str] = field(default_factory=list)
    # Run last inside the commit's transaction (the worker: the batch's ledger rows, the lease).
    finish: Callable[[Connection], None] | None = None
    # Which claim of its job this is (the worker: "<job id>.<claim number>"): a token it commits
    # belongs to it, so the same token sent by a later claim is not a replay.
    batch: str | None = None
    # The core documents the batch was given: name -> the revision of the version it read (None:
    # read as absent). Only these may be written, and only while unchanged since.
    core_read: dict[str, int | None] = field(default_factory=dict)
    # The commit gives the job back (``queued`` unless it ended) in its update of the job's
    # counters; the worker's ``finish`` then leaves the job alone.
    give_back: bool = False
    # Whether the claimed event had any attachment when the page was claimed (the worker reads it
    # with the page; None: the commit reads it). Only a commit under the world's lease attaches to
    # an event, and this commit checks that lease first, so the claim's answer still holds here.
    had_target: bool | None = None
    # The commit gives the world's lease up in the statement that checks it (the worker's batch
    # ends with its commit; its ``finish`` then leaves the lease alone): one statement less.
    release_lease: bool = False
    # What the last commit of this claim wrote, set in its transaction (read once it committed):
    # the graph revision it made, each object row it wrote as written, whether it wrote a core
    # document. The worker keeps its copy of the world's objects current with them.
    wrote: Wrote | None = None
    # The worker's claim of its job's next batch in the commit's transaction (``worker._claim_next``):
    # the commit's lease check passes the world's lease on to ``pass_lease_to`` (the next batch's
    # holder, renewed for a full lease) instead of giving it up, then ``claim_next`` runs in place of
    # the job's update and says whether it updated the job (claimed again) itself; when it did not,
    # it gave the passed lease up and the commit's update gives the job back as usual.
    pass_lease_to: str | None = None
    claim_next: Callable[[Connection], bool] | None = None


@dataclass
class Wrote:
    revision: int
    objects: dict[str, dict[str, Any]]
    core: bool


class LeaseLost(SubmissionError):
    pass


# A batch's statements of fixed shape, built once with bound parameters: organize is one event a
# batch, ~17 statements, and SQLAlchemy built and keyed each again every batch (0.1–0.4 ms each).
_L, _O, _A = partition_leases.c, objects_objects.c, objects_attachments.c
# The world's lease, still this batch's holder's and not expired: what every commit's check finds.
_BATCH_LEASE = (
    _L.asset == LEASE_ASSET,
    _L.partition == bindparam("world"),
    _L.holder == bindparam("b_holder"),
    _L.expires_at > bindparam("now"),
)
_LEASE_CHECK = update(partition_leases).where(*_BATCH_LEASE).values(holder=bindparam("b_holder"))
_LEASE_RELEASE = delete(partition_leases).where(
    _L.asset == LEASE_ASSET, _L.partition == bindparam("world"), _L.holder == bindparam("b_holder")
)
# The check that also gives the lease up (``Claim.release_lease``): the DELETE locks the valid row
# as the UPDATE does, and a refused commit rolls it back with the rest.
_LEASE_CHECK_RELEASE = delete(partition_leases).where(*_BATCH_LEASE)
# The check that passes the lease on to the batch the commit claims next (``Claim.pass_lease_to``):
# the same row locked, now the next batch's, for a full lease from the commit.
_LEASE_CHECK_PASS = (
    update(partition_leases)
    .where(*_BATCH_LEASE)
    .values(holder=bindparam("to_holder"), acquired_at=bindparam("now"), expires_at=bindparam("until"))
)
_OBJECTS_BY_ID = select(objects_objects).where(
    _O.world_id == bindparam("world"), _O.object_id.in_(bindparam("ids", expanding=True))
)
_REVISION_BUMP = (
    update(objects_worlds)
    .where(
        objects_worlds.c.world_id == bindparam("world"), objects_worlds.c.graph_revision == bindparam("from_revision")
    )
    .values(graph_revision=bindparam("to_revision"), worker_error=None, worker_error_at=None)
)


def _checked_and_bumped(lease_stmt: Any) -> Any:
    """PostgreSQL: a lease statement (check, check and release, check and pass on) and the revision's
    advance in one statement, data-modifying CTEs: the revision advances only where the lease
    statement found the batch's valid lease; (leased, bumped) counts. What the two statements in a
    row did, one round trip less."""
    lease = lease_stmt.returning(_L.partition).cte("lease")
    bump = _REVISION_BUMP.where(exists(select(lease.c.partition))).returning(objects_worlds.c.world_id).cte("bump")
    return select(
        select(func.count()).select_from(lease).scalar_subquery().label("leased"),
        select(func.count()).select_from(bump).scalar_subquery().label("bumped"),
    )


_CHECKED_AND_BUMPED = {
    stmt: _checked_and_bumped(stmt) for stmt in (_LEASE_CHECK, _LEASE_CHECK_RELEASE, _LEASE_CHECK_PASS)
}
_ATTACHED_ANY = (
    select(_A.object_id).where(_A.world_id == bindparam("world"), _A.event_id == bindparam("event")).limit(1)
)
CORE_ROWS = select(objects_core.c.name, objects_core.c.content, objects_core.c.revision, objects_core.c.version).where(
    objects_core.c.world_id == bindparam("world")
)

_RECEIPT = objects_receipts.insert()
_J = objects_jobs.c
# A committed batch on its job: counted, failures reset; with give_back the job leaves ``running``.
_BATCH_DONE = {
    give_back: update(objects_jobs)
    .where(_J.job_id == bindparam("job"))
    .values(
        consecutive_failures=0,
        batches_done=_J.batches_done + 1,
        not_before=None,
        error=None,
        inventory_pos=_J.inventory_pos + bindparam("advance"),
        status=case((_J.status == JobStatus.RUNNING, JobStatus.QUEUED), else_=_J.status) if give_back else _J.status,
    )
    for give_back in (False, True)
}
_DISPOSE = (
    update(objects_event_state)
    .where(objects_event_state.c.event_id == bindparam("event"))
    .values(
        page_cursor=bindparam("to_cursor"),
        progress=bindparam("to_progress"),
        reason=bindparam("to_reason"),
        state=bindparam("to_state"),
        finished_at=bindparam("to_finished_at"),
        updated_at=bindparam("at"),
    )
)


def lease_checker(
    world: str,
    holder: str,
    now: datetime,
    *,
    release: bool = False,
    pass_to: str | None = None,
    until: datetime | None = None,
) -> Callable[[Connection], None]:
    """Inside the commit's transaction: the lease is still this batch's and not expired (the
    UPDATE locks the row on PostgreSQL, so no takeover slips in before the commit). With
    ``release``, the same statement gives it up when the commit commits; with ``pass_to``, it
    becomes ``pass_to``'s (the next batch's) until ``until``."""
    stmt, params = _lease_statement(world, holder, now, release=release, pass_to=pass_to, until=until)

    def check(conn: Connection) -> None:
        if not conn.execute(stmt, params).rowcount:
            _lease_lost()

    return check


def _lease_statement(
    world: str, holder: str, now: datetime, *, release: bool, pass_to: str | None, until: datetime | None
) -> tuple[Any, dict[str, Any]]:
    stmt = _LEASE_CHECK_PASS if pass_to is not None else _LEASE_CHECK_RELEASE if release else _LEASE_CHECK
    params: dict[str, Any] = {"world": world, "b_holder": holder, "now": now}
    if pass_to is not None:
        params.update(to_holder=pass_to, until=until)
    return stmt, params


def _lease_lost() -> None:
    raise LeaseLost("lease", "expired or taken over: this batch's claim is no longer valid")


def _check_lease_and_bump(conn: Connection, claim: Claim, now: datetime, until: datetime, from_revision: int) -> bool:
    """The commit's lease statement (``lease_checker``), then the graph revision's advance from
    ``from_revision``: whether it advanced (LeaseLost first when the lease is not the batch's).
    On PostgreSQL one statement (``_checked_and_bumped``)."""
    stmt, params = _lease_statement(
        claim.world_id, claim.holder, now, release=claim.release_lease, pass_to=claim.pass_lease_to, until=until
    )
    params.update(from_revision=from_revision, to_revision=from_revision + 1)
    if conn.dialect.name == "postgresql":
        leased, bumped = conn.execute(_CHECKED_AND_BUMPED[stmt], params).one()
        if not leased:
            _lease_lost()
        return bool(bumped)
    if not conn.execute(stmt, params).rowcount:
        _lease_lost()
    return bool(conn.execute(_REVISION_BUMP, params).rowcount)


def lease_releaser(world: str, holder: str) -> Callable[[Connection], None]:
    """Inside a batch's last transaction: give the lease up (only this batch's own)."""

    def release(conn: Connection) -> None:
        conn.execute(_LEASE_RELEASE, {"world": world, "b_holder": holder})

    return release


def replayed(conn: Connection, token: Any) -> dict[str, Any] | None:
    if not isinstance(token, str):
        return None
    r = conn.execute(select(objects_receipts).where(objects_receipts.c.token == token)).mappings().first()
    return receipt_dict(r) if r is not None else None


def _replay(conn: Connection, claim: Claim, raw: Any) -> dict[str, Any] | None:
    """The original receipt when the submission's token was committed by this same batch (same
    world, mode, job and claim, and the same event page or review batch); None for a new token.
    A token another batch committed is refused: replaying it would dispose of nothing here."""
    again = replayed(conn, raw.get("token") if isinstance(raw, dict) else None)
    if again is None:
        return None
    page = claim.page
    same = (
        again["world_id"] == claim.world_id
        and again["mode"] == str(claim.mode)
        and again["job_id"] == claim.job_id
        and again.get("batch") == claim.batch
        and (
            (again["event_id"], again.get("page_start")) == (page.event_id, page.start)
            if page is not None
            else sorted(again.get("reviewed") or []) == sorted(claim.deep_ids)
        )
    )
    if same:
        return {**again, "replayed": True}
    where = ""
    if again["world_id"] == claim.world_id:  # another world's receipts are not this batch's to see
        where = f" (event {again['event_id']}, page from {again.get('page_start')})" if again["event_id"] else ""
    raise SubmissionError(
        "token",
        f"already committed by another batch{where}: a token belongs to its event and batch; send this batch's token",
    )


def receipt_dict(r: Any) -> dict[str, Any]:
    return {
        "token": r["token"],
        "world_id": r["world_id"],
        "job_id": r["job_id"],
        "mode": r["mode"],
        "revision": r["revision"],
        "event_id": r["event_id"],
        "event_day": r["event_day"].isoformat() if r["event_day"] else None,
        "outcome": r["outcome"],
        **(r["detail"] or {}),
    }


def _stored_objects(conn: Connection, world: str, ids: set[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    return {r["object_id"]: dict(r) for r in objects_by_id(conn, world, sorted(ids))}


def objects_by_id(conn: Connection, world: str, ids: list[str]) -> list[Any]:
    """The world's object rows of ``ids`` (those that exist)."""
    return list(conn.execute(_OBJECTS_BY_ID, {"world": world, "ids": ids}).mappings())


def _content(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("name", "aliases", "summary", "body", "cues", "purpose", "reference")}


def commit(octx: ObjectsContext, claim: Claim, raw: Any, *, size_bytes: int | None = None) -> dict[str, Any]:
    """Validate and commit one submission for ``claim``; returns the receipt (the original one for
    a token this batch already committed). Raises SubmissionError naming the field when refused.
    ``size_bytes``: the proposal's size as transferred (``logic.check_graph_write``)."""
    try:
        with octx.store.begin() as conn:
            return _commit_new(octx, conn, claim, raw, size_bytes)
    except (SubmissionError, IntegrityError):
        # A replay of this batch's committed submission is its original receipt, whatever else the
        # new write found wrong (a replay's revision is stale, its receipt's token taken). Looked
        # up only when the write failed (and rolled back): a new token costs no read for it.
        with octx.store.connect() as conn:
            again = _replay(conn, claim, raw)
        if again is not None:
            return again
        raise


def _commit_new(
    octx: ObjectsContext, conn: Connection, claim: Claim, raw: Any, size_bytes: int | None
) -> dict[str, Any]:
    """``commit`` of a submission whose token is not committed yet, in the caller's transaction."""
    deep = claim.mode is logic.JobMode.DEEP
    now = octx.now()
    claim.wrote = None
    write = logic.check_graph_write(raw, deep=deep, size_bytes=size_bytes)
    until = now + timedelta(seconds=octx.cfg.lease_seconds)
    # The lease checked first; the revision advances then, only from the one the write was made
    # against (a refusal below rolls it back with everything else): one statement checks and takes it.
    w = objects_worlds.c
    revision = write.graph_revision + 1
    if not _check_lease_and_bump(conn, claim, now, until, write.graph_revision):
        current = conn.execute(select(w.graph_revision).where(w.world_id == claim.world_id)).scalar_one()
        raise SubmissionError(
            "graph_revision", f"stale: written against revision {write.graph_revision}, the graph is at {current}"
        )
    touched = {o.object_id for o in write.objects} | set(write.attach)
    touched |= {r.src for r in write.relations} | {r.dst for r in write.relations} | set(write.reviewed)
    stored = _stored_objects(conn, claim.world_id, touched)
    _check_against_store(claim, write, stored)
    changed_objects, new_objects = _object_changes(write, stored)
    rel_rows = [
        {"world_id": claim.world_id, "src": r.src, "label": str(r.label), "dst": r.dst} for r in write.relations
    ]
    existing_rel = set()
    if rel_rows:
        rc = objects_relations.c
        existing_rel = set(
            conn.execute(
                select(rc.src, rc.label, rc.dst).where(
                    rc.world_id == claim.world_id, rc.src.in_(sorted({r["src"] for r in rel_rows}))
                )
            ).all()
        )
    new_rel = [r for r in rel_rows if (r["src"], r["label"], r["dst"]) not in existing_rel]
    core_changes = _core_changes(conn, claim, write)
    changed = bool(changed_objects or new_objects or new_rel or core_changes or write.archive_relations)
    had_target = False
    page = claim.page
    if page is not None:
        if claim.had_target is not None:
            had_target = claim.had_target
        else:
            had_target = (
                conn.execute(_ATTACHED_ANY, {"world": claim.world_id, "event": page.event_id}).first() is not None
            )
        logic.check_outcome(
            write,
            page_start=page.start,
            page_stop=page.stop,
            event_chars=page.chars,
            changed=changed,
            had_target=had_target,
        )
    rows = _write_objects(conn, claim.world_id, new_objects, changed_objects, stored, revision, write.token, now)
    claim.wrote = Wrote(revision, rows, bool(core_changes))
    for src, label, dst in write.archive_relations:
        rc = objects_relations.c
        done = conn.execute(
            update(objects_relations)
            .where(
                rc.world_id == claim.world_id,
                rc.src == src,
                rc.label == label,
                rc.dst == dst,
                rc.legacy.is_(True),
                rc.status == "active",
            )
            .values(status="archived", revision=revision)
        ).rowcount
        if not done:
            raise SubmissionError("archive_relations", f"no active legacy relation {src} {label!r} {dst}")
    if new_rel:
        conn.execute(
            objects_relations.insert(),
            [{**r, "legacy": False, "status": "active", "revision": revision, "created_at": now} for r in new_rel],
        )
    attach_ids = sorted(set(write.attach) | {o.object_id for o in write.objects}) if page is not None else []
    if attach_ids and page is not None:
        upsert(
            conn,
            objects_attachments,
            [
                {
                    "world_id": claim.world_id,
                    "object_id": a,
                    "event_id": page.event_id,
                    "revision": revision,
                    "created_at": now,
                }
                for a in attach_ids
            ],
            keys=["world_id", "object_id", "event_id"],
            update=[],
        )
    for c in core_changes:
        write_core(conn, claim.world_id, c.name, c.content, revision, CoreAuthor.MODEL, now, token=write.token)
    if page is not None:
        _dispose_event(conn, page, write, now)
    detail: dict[str, Any] = {
        "objects_created": sorted(o.object_id for o in new_objects),
        "objects_updated": sorted(o.object_id for o in changed_objects),
        "relations_added": len(new_rel),
        "legacy_relations_archived": len(write.archive_relations),
        "attached": attach_ids,
        "core": [c.name for c in core_changes],
        "page_start": page.start if page else None,
        "page_end": write.page_end,
        "reviewed": list(write.reviewed),
        "batch": claim.batch,
    }
    receipt = {
        "token": write.token,
        "world_id": claim.world_id,
        "job_id": claim.job_id,
        "mode": str(claim.mode),
        "revision": revision,
        "event_id": page.event_id if page else None,
        "event_day": page.event_day if page else None,
        "outcome": str(write.outcome) if write.outcome else None,
        "detail": detail,
        "created_at": now,
    }
    conn.execute(_RECEIPT, receipt)
    if claim.job_id is not None:
        # deep: the reviewed objects leave the inventory with this commit, never before
        advance = len(claim.deep_ids) if deep else 0
        if claim.claim_next is None or not claim.claim_next(conn):
            conn.execute(_BATCH_DONE[claim.give_back], {"job": claim.job_id, "advance": advance})
    if claim.finish is not None:
        claim.finish(conn)
    return {
        "token": write.token,
        "world_id": claim.world_id,
        "job_id": claim.job_id,
        "mode": str(claim.mode),
        "revision": revision,
        "event_id": page.event_id if page else None,
        "event_day": page.event_day.isoformat() if page else None,
        "outcome": str(write.outcome) if write.outcome else None,
        **detail,
    }


def _check_against_store(claim: Claim, write: GraphWrite, stored: dict[str, dict[str, Any]]) -> None:
    written = {o.object_id for o in write.objects}
    for i, o in enumerate(write.objects):
        if o.object_id in stored and o.object_id not in claim.read_ids:
            raise SubmissionError(
                f"objects[{i}].id", f"{o.object_id} exists and was not read in this batch: overwrite refused"
            )
        old = stored.get(o.object_id)
        if (
            o.type is ObjectType.PROJECT
            and o.status is ObjectStatus.ACTIVE
            and (old is None or old["status"] != "active")
        ):
            raise SubmissionError(f"objects[{i}].status", "a project becomes active only by the user's approval")
    known = set(stored) | written | {logic.BUILTIN_DAILY}
    for i, a in enumerate(write.attach):
        if a not in known:
            raise SubmissionError(f"attach[{i}]", f"{a} does not exist")
    for i, r in enumerate(write.relations):
        for end in ("src", "dst"):
            if getattr(r, end) not in known:
                raise SubmissionError(f"relations[{i}].{end}", f"{getattr(r, end)} does not exist")
    if claim.mode is logic.JobMode.DEEP:
        if sorted(set(write.reviewed)) != sorted(set(claim.deep_ids)):
            raise SubmissionError("reviewed", f"must confirm exactly the batch's objects {sorted(claim.deep_ids)}")
        for i, o in enumerate(write.objects):
            if o.object_id in stored and o.object_id not in claim.deep_ids and o.object_id not in claim.read_ids:
                raise SubmissionError(f"objects[{i}].id", "not in this review batch")
        return
    page = claim.page
    assert page is not None
    if write.event_id != page.event_id:
        raise SubmissionError("event_id", f"{write.event_id} is not the claimed event {page.event_id}: a skipped event")
    for i, e in enumerate(write.evidence):
        if e != page.event_id:
            raise SubmissionError(
                f"evidence[{i}]", f"{e} is outside the claimed event {page.event_id}: out-of-range evidence"
            )


def _object_changes(
    write: GraphWrite, stored: dict[str, dict[str, Any]]
) -> tuple[list[logic.ObjectWrite], list[logic.ObjectWrite]]:
    changed, new = [], []
    for o in write.objects:
        old = stored.get(o.object_id)
        if old is None:
            new.append(o)
        elif _content(old) != o.content() or (o.status is not None and o.status != old["status"]):
            changed.append(o)
    return changed, new


def _core_changes(conn: Connection, claim: Claim, write: GraphWrite) -> list[logic.CoreWrite]:
    """The core writes that change a document. Refused, like an unread object: an overwrite of a
    document the batch was not given, and one of a document changed since the batch read it (a
    human edit imported meanwhile is never overwritten blind)."""
    if not write.core:
        return []
    c = objects_core.c
    have = {
        r.name: r for r in conn.execute(select(c.name, c.content, c.revision).where(c.world_id == claim.world_id)).all()
    }
    for i, w in enumerate(write.core):
        current = have[w.name].revision if w.name in have else None
        if w.name not in claim.core_read:
            if current is not None:
                raise SubmissionError(
                    f"core[{i}].name", f"{w.name} exists and was not read in this batch: overwrite refused"
                )
            continue
        read = claim.core_read[w.name]
        if current != read:
            seen = f"at revision {read}" if read is not None else "as absent"
            raise SubmissionError(
                f"core[{i}].name",
                f"stale: {w.name} changed after this batch read it ({seen}; now revision {current}); "
                "submit without it: the next batch reads the current document",
            )
    return [w for w in write.core if w.name not in have or have[w.name].content != w.content]


def write_core(
    conn: Connection,
    world: str,
    name: str,
    content: str,
    revision: int,
    written_by: CoreAuthor,
    now: datetime,
    token: str | None = None,
) -> int:
    """A new version of a core document: the current row and its history row (the prior versions
    stay there). Returns the version number."""
    c = objects_core.c
    version = (conn.execute(select(c.version).where(c.world_id == world, c.name == name)).scalar_one_or_none() or 0) + 1
    row = {
        "world_id": world,
        "name": name,
        "content": content,
        "revision": revision,
        "version": version,
        "written_by": str(written_by),
        "updated_at": now,
    }
    upsert(conn, objects_core, [row], keys=["world_id", "name"])
    conn.execute(
        objects_core_versions.insert().values(
            world_id=world,
            name=name,
            version=version,
            revision=revision,
            written_by=str(written_by),
            content=content,
            receipt_token=token,
            at=now,
        )
    )
    return version


def core_for_batch(
    conn: Connection, world: str, budget_bytes: int
) -> tuple[list[dict[str, Any]], dict[str, int | None]]:
    """The core documents a batch is given (the seed's three core files, read before any may be
    replaced), within ``budget_bytes`` of the claim's transfer budget; and what it read (name ->
    revision, None for an absent document). A document over the budget is named but not
    delivered, and so cannot be written in this batch."""
    rows = {r.name: r for r in conn.execute(CORE_ROWS, {"world": world}).all()}
    return core_documents(rows, budget_bytes)


def core_documents(rows: dict[str, Any], budget_bytes: int) -> tuple[list[dict[str, Any]], dict[str, int | None]]:
    """``core_for_batch`` on the world's core rows (name -> row with version, revision, content)."""
    docs: list[dict[str, Any]] = []
    read: dict[str, int | None] = {}
    left = budget_bytes
    for name in logic.CORE_NAMES:
        r = rows.get(name)
        if r is None:
            docs.append({"name": name, "absent": True})
            read[name] = None
            continue
        doc = {"name": name, "version": r.version, "revision": r.revision, "content": r.content}
        size = len(json.dumps(doc, ensure_ascii=False).encode())
        if size > left:
            docs.append(
                {"name": name, "version": r.version, "not_delivered": "over the transfer budget; not writable now"}
            )
            continue
        docs.append(doc)
        read[name] = r.revision
        left -= size
    return docs, read


def _write_objects(
    conn: Connection,
    world: str,
    new: list[logic.ObjectWrite],
    changed: list[logic.ObjectWrite],
    stored: dict[str, dict[str, Any]],
    revision: int,
    token: str,
    now: datetime,
) -> dict[str, dict[str, Any]]:
    """The new and changed objects written with their version rows; returns each row as written."""
    versions = []
    written: dict[str, dict[str, Any]] = {}
    if new:
        rows = []
        for o in new:
            status = ObjectStatus.CANDIDATE if o.type is ObjectType.PROJECT else (o.status or ObjectStatus.ACTIVE)
            row = {
                "world_id": world,
                "object_id": o.object_id,
                "type": str(o.type),
                **o.content(),
                "status": str(status),
                "version": 1,
                "revision": revision,
                "created_at": now,
                "updated_at": now,
            }
            rows.append(row)
            written[o.object_id] = row
            versions.append(
                {
                    "world_id": world,
                    "object_id": o.object_id,
                    "version": 1,
                    "revision": revision,
                    "action": "create",
                    "snapshot": {**o.content(), "status": str(status)},
                    "receipt_token": token,
                    "at": now,
                }
            )
        conn.execute(objects_objects.insert(), rows)
    if changed:
        params = []
        for o in changed:
            old = stored[o.object_id]
            changed_status = str(o.status) if o.status is not None else str(old["status"])
            version = old["version"] + 1
            params.append(
                {
                    "w": world,
                    "oid": o.object_id,
                    **o.content(),
                    "status": changed_status,
                    "version": version,
                    "revision": revision,
                    "updated_at": now,
                }
            )
            written[o.object_id] = {
                **old,
                **o.content(),
                "status": changed_status,
                "version": version,
                "revision": revision,
                "updated_at": now,
            }
            versions.append(
                {
                    "world_id": world,
                    "object_id": o.object_id,
                    "version": version,
                    "revision": revision,
                    "action": "update",
                    "snapshot": {**o.content(), "status": changed_status},
                    "receipt_token": token,
                    "at": now,
                }
            )
        oc = objects_objects.c
        conn.execute(
            update(objects_objects)
            .where(oc.world_id == bindparam("w"), oc.object_id == bindparam("oid"))
            .values(
                name=bindparam("name"),
                aliases=bindparam("aliases"),
                summary=bindparam("summary"),
                body=bindparam("body"),
                cues=bindparam("cues"),
                purpose=bindparam("purpose"),
                reference=bindparam("reference"),
                status=bindparam("status"),
                version=bindparam("version"),
                revision=bindparam("revision"),
                updated_at=bindparam("updated_at"),
            ),
            params,
        )
    if versions:
        conn.execute(objects_versions.insert(), versions)
    return written


def _dispose_event(conn: Connection, page: EventPage, write: GraphWrite, now: datetime) -> None:
    state = {
        Outcome.CONTINUE: EventState.IN_PROGRESS,
        Outcome.LINKED: EventState.LINKED,
        Outcome.ARCHIVE_ONLY: EventState.ARCHIVE_ONLY,
    }[write.outcome or Outcome.CONTINUE]
    conn.execute(
        _DISPOSE,
        {
            "event": page.event_id,
            "to_cursor": write.page_end,
            "to_progress": write.progress,
            "to_reason": write.reason,
            "to_state": state,
            "to_finished_at": now if state in logic.FINAL_STATES else None,
            "at": now,
        },
    )


APPROVAL = "objects_approve"  # the kind of its request ids (lib.store.requests)


def approve_project(octx: ObjectsContext, world: str, object_id: str) -> JSONObject:
    """The user's explicit approval: a candidate project becomes active (a version row, a new
    graph revision). Refused for anything but an existing candidate project."""
    return approve_request(octx, world, object_id)[0]


def approve_request(
    octx: ObjectsContext, world: str, object_id: str, request_id: str | None = None
) -> tuple[JSONObject, bool]:
    """``approve_project`` once per caller-given ``request_id`` (per world): its answer and False,
    or for a repeated id the first approval's answer and True, nothing written."""
    otype, _ = logic.parse_object_id(object_id, "object_id")
    if otype is not ObjectType.PROJECT:
        raise SubmissionError("object_id", f"{object_id} is not a project")
    if request_id is not None and (problem := requests.problem(request_id)):
        raise SubmissionError("request_id", problem)
    now = octx.now()

    def write(conn: Connection) -> JSONObject:
        stored = _stored_objects(conn, world, {object_id}).get(object_id)
        if stored is None:
            raise SubmissionError("object_id", f"{object_id} does not exist in world {world}")
        if stored["status"] != ObjectStatus.CANDIDATE:
            raise SubmissionError("object_id", f"{object_id} is {stored['status']}, not a candidate")
        revision = conn.execute(
            update(objects_worlds)
            .where(objects_worlds.c.world_id == world)
            .values(graph_revision=objects_worlds.c.graph_revision + 1)
            .returning(objects_worlds.c.graph_revision)
        ).scalar_one()
        version = stored["version"] + 1
        oc = objects_objects.c
        conn.execute(
            update(objects_objects)
            .where(oc.world_id == world, oc.object_id == object_id)
            .values(status=ObjectStatus.ACTIVE, version=version, revision=revision, updated_at=now)
        )
        conn.execute(
            objects_versions.insert().values(
                world_id=world,
                object_id=object_id,
                version=version,
                revision=revision,
                action="approve",
                snapshot={**_content(stored), "status": "active"},
                receipt_token=None,
                at=now,
            )
        )
        return {"object_id": object_id, "status": "active", "revision": revision}

    return requests.once(octx.store, world, APPROVAL, request_id, write, {"object_id": object_id})


def ensure_daily(conn: Connection, world: str, now: datetime) -> None:
    """``project:daily`` is built in (active) in every world."""
    row = {
        "world_id": world,
        "object_id": logic.BUILTIN_DAILY,
        "type": "project",
        "name": "Daily",
        "aliases": ["日常"],
        "summary": "Built-in project for everyday events with no other project.",
        "body": "Scope: everyday life\nGoal: unknown\nCurrent state: unknown",
        "cues": ["daily"],
        "status": "active",
        "purpose": None,
        "reference": None,
        "version": 1,
        "revision": 0,
        "created_at": now,
        "updated_at": now,
    }
    upsert(conn, objects_objects, [row], keys=["world_id", "object_id"], update=[])


class CoreImport(TypedDict):
    """A core document imported: ``changed`` false when it was the stored text (nothing written)."""

    name: str
    changed: bool
    revision: NotRequired[int]
    version: NotRequired[int]


def import_core(octx: ObjectsContext, world: str, name: str, content: str) -> CoreImport:
    """A human edit of a core document (AGENTS.md, SOUL.md, USER.md) imported into the store."""
    return import_core_text(octx.store, world, name, content, octx.now())


def import_core_text(store: Store, world: str, name: str, content: str, now: datetime) -> CoreImport:
    """A human edit of a core document imported: a new version written by ``human`` (the prior
    one kept in the history) and one graph revision, so a batch that read the old version can no
    longer overwrite it; an unchanged document is not rewritten."""
    if name not in logic.CORE_NAMES:
        raise SubmissionError("name", f"must be one of {', '.join(logic.CORE_NAMES)}")
    if not isinstance(content, str) or len(content) > logic.BODY_MAX_CHARS or "\x00" in content:
        raise SubmissionError("content", f"a text of at most {logic.BODY_MAX_CHARS:,} characters without NUL")
    c = objects_core.c
    with store.begin() as conn:
        from memory_pipeline.objects import timeline

        timeline.ensure_worlds(conn, [world])
        have = conn.execute(select(c.content).where(c.world_id == world, c.name == name)).scalar_one_or_none()
        if have == content:
            return {"name": name, "changed": False}
        revision = conn.execute(
            update(objects_worlds)
            .where(objects_worlds.c.world_id == world)
            .values(graph_revision=objects_worlds.c.graph_revision + 1)
            .returning(objects_worlds.c.graph_revision)
        ).scalar_one()
        version = write_core(conn, world, name, content, revision, CoreAuthor.HUMAN, now)
    return {"name": name, "changed": True, "revision": revision, "version": version}
