"""Seed 001 audits (read-only, grouped queries) behind the asset checks: every outcome traces to
raw events; the current state keeps the seed's vocabulary and limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from sqlalchemy import and_, exists, func, select

from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import messages
from memory_pipeline.objects import logic
from memory_pipeline.objects.tables import (
    objects_attachments,
    objects_event_state,
    objects_hot_nodes,
    objects_objects,
    objects_receipts,
    objects_relations,
)


@dataclass
class Audit:
    audited: int = 0
    problems: list[str] = field(default_factory=list)
    # Events that are no fault of the pipeline yet never organized (oversized): the day is not
    # complete, and its check says so as a warning.
    not_organized: list[str] = field(default_factory=list)


def day_audit(store: Store, day: date) -> Audit:
    s, a, r, n = objects_event_state.c, objects_attachments.c, objects_receipts.c, objects_hot_nodes.c
    out = Audit()
    with store.connect() as conn:
        out.audited = int(conn.execute(select(func.count()).where(s.event_day == day)).scalar() or 0)
        unlinked = conn.execute(
            select(s.event_id).where(
                s.event_day == day, s.state == logic.EventState.LINKED, ~exists().where(a.event_id == s.event_id)
            )
        ).scalars()
        out.problems += [f"{e}: linked without an object target" for e in unlinked]
        no_reason = conn.execute(
            select(s.event_id).where(s.event_day == day, s.state == logic.EventState.ARCHIVE_ONLY, s.reason == "")
        ).scalars()
        out.problems += [f"{e}: archive_only without a reason" for e in no_reason]
        no_receipt = conn.execute(
            select(s.event_id).where(
                s.event_day == day,
                s.state.in_([str(x) for x in logic.FINAL_STATES]),
                ~exists().where(and_(r.event_id == s.event_id, r.outcome == s.state)),
            )
        ).scalars()
        out.problems += [f"{e}: final without its receipt" for e in no_receipt]
        dangling = conn.execute(
            select(a.object_id, a.event_id)
            .join(objects_event_state, s.event_id == a.event_id)
            .where(s.event_day == day, ~exists().where(messages.c.message_id == a.event_id))
        ).all()
        out.problems += [f"{o} -> {e}: evidence is not a raw event" for o, e in dangling]
        queued_hot = conn.execute(
            select(s.event_id).where(
                s.event_day == day,
                s.state.in_([str(x) for x in logic.QUEUED_STATES]),
                exists().where(and_(n.event_id == s.event_id, n.active.is_(True), n.level == 0)),
            )
        ).scalars()
        out.problems += [f"{e}: queued while still in the hot timeline" for e in queued_hot]
        oversized = conn.execute(
            select(s.event_id, s.chars)
            .where(s.event_day == day, s.state.in_([str(x) for x in logic.NOT_ORGANIZED_STATES]))
            .order_by(s.occurred_at, s.event_id)
        ).all()
        out.not_organized += [
            f"{e}: oversized ({chars:,} characters, limit {logic.EVENT_MAX_CHARS:,}), not organized; raw event kept"
            for e, chars in oversized
        ]
    return out


def state_audit(store: Store) -> Audit:
    o, rc, a = objects_objects.c, objects_relations.c, objects_attachments.c
    out = Audit()
    types, statuses = {str(t) for t in logic.ObjectType}, {str(s) for s in logic.ObjectStatus}
    labels = {str(x) for x in logic.RelationLabel}
    with store.connect() as conn:
        rows = conn.execute(
            select(o.world_id, o.object_id, o.type, o.status, o.name, o.summary, o.body, o.purpose, o.reference)
        ).all()
        out.audited = len(rows)
        for w, oid, t, st, *texts in rows:
            ls, lb = len(texts[1] or ""), len(texts[2] or "")
            if t not in types or st not in statuses:
                out.problems.append(f"{w} {oid}: type {t!r} / status {st!r} outside the vocabulary")
            if ls > logic.SUMMARY_MAX_CHARS or lb > logic.BODY_MAX_CHARS:
                out.problems.append(f"{w} {oid}: summary {ls} / body {lb} characters over the limits")
            strict = t == logic.ObjectType.CREDENTIAL
            if any(logic.looks_like_secret(x or "", strict=strict) for x in texts):
                out.problems.append(f"{w} {oid}: holds a value that looks like a secret")
        for w, src, label, dst in conn.execute(
            select(rc.world_id, rc.src, rc.label, rc.dst).where(rc.legacy.is_(False))
        ):
            if label not in labels:
                out.problems.append(f"{w} {src} {label!r} {dst}: not a standard label")
            elif label == logic.RelationLabel.MEMBER_OF and not dst.startswith("project:"):
                out.problems.append(f"{w} {src} member_of {dst}: not a project")
        dangling = conn.execute(
            select(a.world_id, a.object_id, a.event_id)
            .where(~exists().where(messages.c.message_id == a.event_id))
            .limit(20)
        ).all()
        out.problems += [f"{w} {oid} -> {e}: evidence is not a raw event" for w, oid, e in dangling]
    return out
