"""Seed 001 §1-2, the hot timeline (core I/O, no Dagster): raw events enter as slices of at most
2,000 characters; compaction replaces up to 8 nodes with a summary head in one transaction that
also queues fully-compacted events for archiving and records a receipt.

Raw events are never copied: a raw node holds its slice only while it is in the hot timeline (the
resident view); once compacted it keeps its event id and slice index, and its text is read from
``messages`` (the attachment an object's evidence expands to)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

from sqlalchemy import Connection, bindparam, case, func, select, update

from memory_pipeline.lib.store.tables import conversations, messages
from memory_pipeline.objects import logic
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.logic import EventState
from memory_pipeline.objects.tables import objects_event_state, objects_hot_nodes, objects_receipts, objects_worlds

INTAKE_CHUNK = 5_000


@dataclass
class IntakeReport:
    events: int = 0
    slices: int = 0
    oversized: int = 0
    compacted: int = 0  # enable only: older events queued as already compacted
    worlds: set[str] = field(default_factory=set)


def ensure_worlds(conn: Any, worlds: Sequence[str]) -> None:
    """A per-world row (graph revision, flags) for each world, inserted when missing."""
    from memory_pipeline.lib.store import upsert

    upsert(
        conn,
        objects_worlds,
        [{"world_id": w, "graph_revision": 0, "next_seq": 0, "busy": False, "stopped": False} for w in worlds],
        keys=["world_id"],
        update=[],
    )


def _unseen(worlds: Sequence[str] | None) -> Any:
    """Raw events this domain has not seen yet, oldest first (debug conversations and empty turns
    are not memory)."""
    m, c, s = messages.c, conversations.c, objects_event_state.c
    q = (
        select(m.message_id, c.world_id, m.content, m.at, m.role)
        .join(conversations, c.conversation_id == m.conversation_id)
        .outerjoin(objects_event_state, s.event_id == m.message_id)
        .where(s.event_id.is_(None), c.debug.is_(False), m.content != "")
        .order_by(m.at, m.message_id)
    )
    return q.where(c.world_id.in_(list(worlds))) if worlds else q


def intake(
    octx: ObjectsContext, worlds: Sequence[str] | None = None, *, kept_hot: Mapping[str, set[str]] | None = None
) -> IntakeReport:
    """Bring every raw event not yet seen into the hot timeline (late events too: they enter here
    and go through compact, never straight into the archive queue). One read per chunk, one
    transaction per chunk. ``kept_hot`` (only ``enable``): for a world enabled on an existing
    store, the events that enter the hot timeline; its other events count as already compacted
    and are queued for archiving without hot slices."""
    report = IntakeReport()
    while True:
        with octx.store.begin() as conn:
            rows = conn.execute(_unseen(worlds).limit(INTAKE_CHUNK)).all()
            if not rows:
                return report
            world_ids = sorted({r.world_id for r in rows})
            ensure_worlds(conn, world_ids)
            w = objects_worlds.c
            seqs: dict[str, int] = dict(
                conn.execute(select(w.world_id, w.next_seq).where(w.world_id.in_(world_ids))).tuples().all()
            )
            nodes: list[dict[str, Any]] = []
            states = []
            now = octx.now()
            for r in rows:
                text = r.content or ""
                compacted = kept_hot is not None and r.world_id in kept_hot and r.message_id not in kept_hot[r.world_id]
                state = _entry_state(len(text), compacted)
                oversized = state is EventState.OVERSIZED
                states.append(
                    {
                        "event_id": r.message_id,
                        "world_id": r.world_id,
                        "occurred_at": r.at,
                        "event_day": octx.day_of(r.at),
                        "chars": len(text),
                        "state": state,
                        "page_cursor": 0,
                        "progress": "",
                        "reason": f"longer than {logic.EVENT_MAX_CHARS:,} characters" if oversized else "",
                        "queued_at": now if state is EventState.PENDING else None,
                        "explicit": False,
                        "updated_at": now,
                    }
                )
                report.oversized += int(oversized)
                report.compacted += int(state is EventState.PENDING)
                if state is EventState.HOT:
                    nodes += _raw_nodes(octx, r, seqs[r.world_id], now)
                    seqs[r.world_id] += len(logic.slices(text))
            conn.execute(objects_event_state.insert(), states)
            if nodes:
                conn.execute(objects_hot_nodes.insert(), nodes)
            conn.execute(
                update(objects_worlds).where(w.world_id == bindparam("w")).values(next_seq=bindparam("n")),
                [{"w": w, "n": n} for w, n in seqs.items()],
            )
        report.events += len(rows)
        report.slices += len(nodes)
        report.worlds.update(world_ids)


def _entry_state(chars: int, compacted: bool) -> EventState:
    if chars > logic.EVENT_MAX_CHARS:
        return EventState.OVERSIZED  # never organized (its own outcome); the raw event stays readable by time
    return EventState.PENDING if compacted else EventState.HOT


def _raw_nodes(octx: ObjectsContext, r: Any, first_seq: int, now: datetime) -> list[dict[str, Any]]:
    """An event's raw slices of at most 2,000 characters, from ``first_seq`` on."""
    return [
        {
            "node_id": f"{r.message_id}#{i}",
            "world_id": r.world_id,
            "seq": first_seq + i,
            "level": 0,
            "event_id": r.message_id,
            "slice_index": i,
            "text": part,
            "est_tokens": logic.estimate_tokens(part, octx.cfg.chars_per_token),
            "first_at": r.at,
            "last_at": r.at,
            "active": True,
            "parent_id": None,
            "children": None,
            "receipt_token": None,
            "created_at": now,
        }
        for i, part in enumerate(logic.slices(r.content or ""))
    ]


def hot_estimates(octx: ObjectsContext, worlds: Sequence[str] | None = None) -> dict[str, int]:
    """Estimated tokens of each world's active hot timeline (one grouped query)."""
    n = objects_hot_nodes.c
    q = select(n.world_id, func.coalesce(func.sum(n.est_tokens), 0)).where(n.active.is_(True)).group_by(n.world_id)
    if worlds:
        q = q.where(n.world_id.in_(list(worlds)))
    with octx.store.connect() as conn:
        return {w: int(t) for w, t in conn.execute(q).all()}


def unseen_estimates(octx: ObjectsContext) -> dict[str, int]:
    """Estimated tokens of raw events not yet in the hot timeline (read-only: for the sensor)."""
    m, c, s = messages.c, conversations.c, objects_event_state.c
    q = (
        select(c.world_id, func.coalesce(func.sum(func.length(m.content)), 0))
        .join(conversations, c.conversation_id == m.conversation_id)
        .outerjoin(objects_event_state, s.event_id == m.message_id)
        .where(s.event_id.is_(None), c.debug.is_(False), m.content != "")
        .group_by(c.world_id)
    )
    with octx.store.connect() as conn:
        return {w: int(n / octx.cfg.chars_per_token) for w, n in conn.execute(q).all()}


@dataclass
class HotView:
    nodes: list[dict[str, Any]]
    total: int
    shown_bytes: int

    @property
    def truncated(self) -> bool:
        return len(self.nodes) < self.total


def hot_view(octx: ObjectsContext, world: str, max_bytes: int | None = None) -> HotView:
    """The resident hot timeline, newest kept first within the byte cap (350,000 by default), in
    time order; ``truncated`` says explicitly that nodes were left out (shown / total)."""
    cap = max_bytes or octx.cfg.hot_view_max_bytes
    n = objects_hot_nodes.c
    with octx.store.connect() as conn:
        rows = (
            conn.execute(
                select(n.node_id, n.level, n.text, n.first_at, n.last_at, n.seq)
                .where(n.world_id == world, n.active.is_(True))
                .order_by(n.seq.desc())
            )
            .mappings()
            .all()
        )
    kept, used = [], 0
    for r in rows:
        size = len(r["text"].encode()) + 64
        if used + size > cap:
            break
        kept.append(dict(r))
        used += size
    kept.reverse()
    return HotView(kept, len(rows), used)


def expand(octx: ObjectsContext, node_id: str) -> list[dict[str, Any]]:
    """A head's children, one level down. A compacted raw slice keeps no text of its own: it is
    its event's character range, read from the raw table (never copied)."""
    n, m = objects_hot_nodes.c, messages.c
    with octx.store.connect() as conn:
        head = conn.execute(select(n.children).where(n.node_id == node_id)).scalar_one_or_none()
        if not head:
            return []
        rows = [
            dict(r)
            for r in conn.execute(
                select(n.node_id, n.level, n.text, n.event_id, n.slice_index, n.active, n.seq)
                .where(n.node_id.in_(list(head)))
                .order_by(n.seq)
            ).mappings()
        ]
        events = sorted({r["event_id"] for r in rows if r["level"] == 0 and not r["active"]})
        raw = (
            dict(conn.execute(select(m.message_id, m.content).where(m.message_id.in_(events))).tuples().all())
            if events
            else {}
        )
    for r in rows:
        if r["event_id"] in raw:
            start, stop = logic.slice_range(r["slice_index"] or 0)
            r["text"] = (raw[r["event_id"]] or "")[start:stop]
    return rows


# --- compaction ----------------------------------------------------------------------------------
@dataclass
class CompactBatch:
    world_id: str
    nodes: list[dict[str, Any]]

    @property
    def ids(self) -> list[str]:
        return [x["node_id"] for x in self.nodes]

    @property
    def chars(self) -> int:
        return sum(len(x["text"]) for x in self.nodes)


def range_end(octx: ObjectsContext, world: str) -> int:
    """The range a compaction fixes at its start: every node up to the newest active one now.
    Suffix nodes that arrive later are not covered."""
    n = objects_hot_nodes.c
    with octx.store.connect() as conn:
        top = conn.execute(select(func.max(n.seq)).where(n.world_id == world)).scalar()
    return int(top) if top is not None else -1


def next_batch(octx: ObjectsContext, world: str, end_seq: int, size: int, *, whole_range: bool = True) -> CompactBatch:
    """The next compact batch in the range up to ``end_seq`` (``logic.compact_pick``): the oldest
    nodes of one level, at most ``size``; no nodes when the job is done. ``whole_range``: an
    explicit compact (covers every raw slice of its range); a threshold job only lowers the
    estimate."""
    n = objects_hot_nodes.c
    in_range = (n.world_id == world, n.active.is_(True), n.seq <= end_seq)
    with octx.store.connect() as conn:
        counts: dict[int, int] = dict(
            conn.execute(select(n.level, func.count()).where(*in_range).group_by(n.level)).tuples().all()
        )
        pick = logic.compact_pick({int(k): int(v) for k, v in counts.items()}, size, whole_range=whole_range)
        if pick is None:
            return CompactBatch(world, [])
        level, most = pick
        rows = (
            conn.execute(
                select(n.node_id, n.level, n.text, n.event_id, n.seq, n.first_at, n.last_at)
                .where(*in_range, n.level == level)
                .order_by(n.seq)
                .limit(most)
            )
            .mappings()
            .all()
        )
    return CompactBatch(world, [dict(r) for r in rows])


def commit_compact(
    octx: ObjectsContext,
    batch: CompactBatch,
    summary: str,
    *,
    token: str,
    job_id: int | None,
    lease_check: Any,
    finish: Callable[[Connection], None] | None = None,
) -> dict[str, Any]:
    """One transaction: the head, the raw nodes deactivated, the events whose slices all left the
    hot timeline queued (only from ``hot``: re-compacting heads never re-queues), the receipt.
    ``lease_check(conn)`` refuses the commit when the lease is no longer this batch's; ``finish``
    runs last in the same transaction (the worker: the job's count, ledger rows, the lease)."""
    n, s = objects_hot_nodes.c, objects_event_state.c
    head_id = f"head-{uuid.uuid4().hex[:20]}"
    now = octx.now()
    with octx.store.begin() as conn:
        lease_check(conn)
        # A raw slice leaving the hot timeline keeps only its reference (event id, slice index):
        # its text stays in the raw table alone, never a second copy.
        done = conn.execute(
            update(objects_hot_nodes)
            .where(n.node_id.in_(batch.ids), n.active.is_(True))
            .values(active=False, parent_id=head_id, text=case((n.level == 0, ""), else_=n.text))
        ).rowcount
        if done != len(batch.ids):
            raise logic.SubmissionError("covers", "a node of the batch left the hot timeline meanwhile; batch is stale")
        conn.execute(
            objects_hot_nodes.insert().values(
                node_id=head_id,
                world_id=batch.world_id,
                seq=min(x["seq"] for x in batch.nodes),
                level=logic.head_level(x["level"] for x in batch.nodes),
                event_id=None,
                slice_index=None,
                text=summary,
                est_tokens=logic.estimate_tokens(summary, octx.cfg.chars_per_token),
                first_at=min(x["first_at"] for x in batch.nodes),
                last_at=max(x["last_at"] for x in batch.nodes),
                active=True,
                parent_id=None,
                children=batch.ids,
                receipt_token=token,
                created_at=now,
            )
        )
        events = sorted({x["event_id"] for x in batch.nodes if x["event_id"]})
        queued: list[str] = []
        if events:
            still_hot = set(
                conn.execute(
                    select(n.event_id).where(n.event_id.in_(events), n.active.is_(True), n.level == 0).distinct()
                ).scalars()
            )
            ready = [e for e in events if e not in still_hot]
            if ready:
                queued = list(
                    conn.execute(
                        update(objects_event_state)
                        .where(s.event_id.in_(ready), s.state == EventState.HOT)
                        .values(state=EventState.PENDING, queued_at=now, updated_at=now)
                        .returning(s.event_id)
                    ).scalars()
                )
        revision = conn.execute(
            update(objects_worlds)
            .where(objects_worlds.c.world_id == batch.world_id)
            .values(graph_revision=objects_worlds.c.graph_revision + 1, worker_error=None)
            .returning(objects_worlds.c.graph_revision)
        ).scalar_one()
        detail = {"head": head_id, "covers": batch.ids, "queued_events": sorted(queued)}
        conn.execute(
            objects_receipts.insert().values(
                token=token,
                world_id=batch.world_id,
                job_id=job_id,
                mode="compact",
                revision=revision,
                event_id=None,
                event_day=None,
                outcome=None,
                detail=detail,
                created_at=now,
            )
        )
        if finish is not None:
            finish(conn)
    return {"token": token, "revision": revision, **detail}


def node_counts(octx: ObjectsContext) -> dict[str, dict[str, int]]:
    n = objects_hot_nodes.c
    out: dict[str, dict[str, int]] = defaultdict(dict)
    with octx.store.connect() as conn:
        for w, active, level0, cnt in conn.execute(
            select(n.world_id, n.active, n.level == 0, func.count()).group_by(n.world_id, n.active, n.level == 0)
        ).all():
            key = ("active" if active else "inactive") + ("_raw" if level0 else "_heads")
            out[w][key] = int(cnt)
    return dict(out)


def store_counts(octx: ObjectsContext) -> dict[str, int]:
    from memory_pipeline.objects.tables import objects_attachments, objects_objects

    with octx.store.connect() as conn:
        return {
            name: int(conn.execute(select(func.count()).select_from(t)).scalar() or 0)
            for name, t in (
                ("raw_events", messages),
                ("event_states", objects_event_state),
                ("nodes", objects_hot_nodes),
                ("objects", objects_objects),
                ("attachments", objects_attachments),
            )
        }


def _kept_hot_for_new_worlds(octx: ObjectsContext) -> dict[str, set[str]]:
    """For every world with raw events and no record in this domain yet: its newest events that
    stay in the hot timeline (``logic.kept_hot_on_enable``); oversized ones never enter it."""
    m, c, s = messages.c, conversations.c, objects_event_state.c
    with octx.store.connect() as conn:
        seen = set(conn.execute(select(s.world_id).distinct()).scalars())
        worlds = set(conn.execute(select(c.world_id).where(c.debug.is_(False)).distinct()).scalars()) - seen
        out: dict[str, set[str]] = {}
        for world in sorted(worlds):
            rows = conn.execute(
                select(m.message_id, func.length(m.content))
                .join(conversations, c.conversation_id == m.conversation_id)
                .where(c.world_id == world, c.debug.is_(False), m.content != "")
                .where(func.length(m.content) <= logic.EVENT_MAX_CHARS)
                .order_by(m.at.desc(), m.message_id.desc())
                .limit(INTAKE_CHUNK)
            ).all()
            kept = logic.kept_hot_on_enable(
                [int(n) for _, n in rows], octx.cfg.chars_per_token, octx.cfg.compact_threshold_tokens
            )
            out[world] = {e for e, _ in rows[:kept]}
    return out


def _recorded_sources(octx: ObjectsContext) -> int:
    """Existing objects get the source relations their own write history records: an object
    version written by an organize commit names the event of its receipt; a missing attachment
    (object -> that raw event) is added. Nothing is guessed: an object with no recorded event stays
    without sources."""
    from memory_pipeline.objects.tables import objects_attachments, objects_versions

    v, r, a = objects_versions.c, objects_receipts.c, objects_attachments.c
    q = (
        select(v.world_id, v.object_id, r.event_id, func.min(r.revision))
        .join(objects_receipts, r.token == v.receipt_token)
        .join(messages, messages.c.message_id == r.event_id)
        .where(
            ~select(a.event_id)
            .where(a.world_id == v.world_id, a.object_id == v.object_id, a.event_id == r.event_id)
            .exists()
        )
        .group_by(v.world_id, v.object_id, r.event_id)
    )
    with octx.store.begin() as conn:
        rows = [
            {"world_id": w, "object_id": o, "event_id": e, "revision": rev, "created_at": octx.now()}
            for w, o, e, rev in conn.execute(q).all()
        ]
        if rows:
            conn.execute(objects_attachments.insert(), rows)
    return len(rows)


class EnableReport(TypedDict):
    """enable: the store's counts and the events' states before and after, what entered, and the
    integrity check ("ok" or its problems)."""

    before: dict[str, int]
    after: dict[str, int]
    states_before: dict[str, int]
    states_after: dict[str, int]
    entered: int
    queued_as_compacted: int
    entered_hot: int
    oversized: int
    sources_added: int
    integrity: list[str] | str


def enable(octx: ObjectsContext) -> EnableReport:
    """Turning the domain on for an existing store (seed 001 §7): every raw event gets its record.
    In a world this domain has never seen, the events older than what a threshold compaction
    would leave in the hot timeline count as already compacted: they are queued for archiving
    (``pending``) with no hot slices; the newest stay hot. Existing objects get the source
    relations their write history records. Idempotent (a world already seen takes new events
    through the hot timeline, as late events), deletes nothing; reports counts before and after
    and an integrity check."""
    from memory_pipeline.objects import audit, reports

    before, states_before = store_counts(octx), reports.state_counts(octx.store)
    report = intake(octx, kept_hot=_kept_hot_for_new_worlds(octx))
    sources = _recorded_sources(octx)
    after, states_after = store_counts(octx), reports.state_counts(octx.store)
    m, c, s = messages.c, conversations.c, objects_event_state.c
    with octx.store.connect() as conn:
        missing = int(
            conn.execute(
                select(func.count())
                .select_from(messages.join(conversations, c.conversation_id == m.conversation_id))
                .outerjoin(objects_event_state, s.event_id == m.message_id)
                .where(s.event_id.is_(None), c.debug.is_(False), m.content != "")
            ).scalar()
            or 0
        )
    problems = audit.state_audit(octx.store).problems
    if missing:
        problems.append(f"{missing} raw event(s) without a record")
    if after["raw_events"] != before["raw_events"] or after["objects"] < before["objects"]:
        problems.append("raw events or objects changed while enabling")
    return {
        "before": before,
        "after": after,
        "states_before": states_before,
        "states_after": states_after,
        "entered": report.events,
        "queued_as_compacted": report.compacted,
        "entered_hot": report.events - report.compacted - report.oversized,
        "oversized": report.oversized,
        "sources_added": sources,
        "integrity": problems or "ok",
    }
