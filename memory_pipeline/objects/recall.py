"""Seed 001 §4, §6: recall and inspection (read-only; never calls a model; no embeddings).

memory_find (names, aliases, terms, cues, direct project relations), memory_read (the whole
dossier), memory_evidence (attachments expanded to the raw event text), and the inspect views
(list / object / event with next_offset, events FROM TO with cursor)."""

from __future__ import annotations

import base64
import json
import re
import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, and_, func, or_, select

from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import messages
from memory_pipeline.objects import logic
from memory_pipeline.objects.tables import objects_attachments, objects_event_state, objects_objects, objects_relations

PAGE = 20
EVENT_PAGE_CHARS = 8_000
_TERM = re.compile(r"\w+", re.UNICODE)


class RecallError(ValueError):
    """Bad input to a read (names the argument)."""


def _terms(text: str) -> set[str]:
    return {t.lower() for t in _TERM.findall(text or "") if len(t) > 1}


def _doc(r: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": r["object_id"],
        "type": r["type"],
        "name": r["name"],
        "aliases": list(r["aliases"] or []),
        "summary": r["summary"],
        "body": r["body"],
        "cues": list(r["cues"] or []),
        "status": r["status"],
        "version": r["version"],
        "updated_at": r["updated_at"].isoformat(),
    }
    if r["type"] == "credential":
        doc.update(purpose=r["purpose"], reference=r["reference"])
    return doc


class _Prepared(NamedTuple):
    """One object as find scores it: the row, its names and cues lowercased, the words of its
    summary, body and names."""

    row: dict[str, Any]
    names: list[str]
    cues: list[str]
    words: frozenset[str]


# (store url, world) -> (the world's objects' signature, its objects prepared): each find read and
# tokenized every object of the world, which at 1,000 objects was most of a call.
_PREPARED: OrderedDict[tuple[str, str], tuple[tuple[Any, ...], list[_Prepared]]] = OrderedDict()
_PREPARED_WORLDS = 64
_PREPARED_LOCK = threading.Lock()


def _world_objects(conn: Connection, url: str, world: str) -> list[_Prepared]:
    """The world's objects prepared for scoring, re-read only when they changed: every write of an
    object advances its version and updated_at, and adds or removes a row (one aggregate first)."""
    o = objects_objects.c
    signature = tuple(
        conn.execute(
            select(func.count(), func.max(o.updated_at), func.sum(o.version), func.max(o.revision)).where(
                o.world_id == world
            )
        ).one()
    )
    key = (url, world)
    with _PREPARED_LOCK:
        held = _PREPARED.get(key)
        if held is not None and held[0] == signature:
            _PREPARED.move_to_end(key)
            return held[1]
    prepared = []
    for r in conn.execute(select(objects_objects).where(o.world_id == world)).mappings():
        names = [r["name"].lower(), *(a.lower() for a in r["aliases"] or [])]
        words = frozenset(_terms(r["summary"]) | _terms(r["body"]) | _terms(" ".join(names)))
        prepared.append(_Prepared(dict(r), names, [c.lower() for c in r["cues"] or []], words))
    with _PREPARED_LOCK:
        _PREPARED[key] = (signature, prepared)
        _PREPARED.move_to_end(key)
        while len(_PREPARED) > _PREPARED_WORLDS:
            _PREPARED.popitem(last=False)
    return prepared


def find(store: Store, world: str, query: str, limit: int = PAGE) -> list[dict[str, Any]]:
    """Objects whose name, alias, cue or words match the query, best first, then the members of
    any matched project (its direct relations): the first ``limit`` of :func:`find_all`."""
    return find_all(store, world, query)[:limit]


def find_all(store: Store, world: str, query: str) -> list[dict[str, Any]]:
    """Every object :func:`find` pages through (the world's objects are scored whole anyway)."""
    if not isinstance(query, str) or not query.strip():
        raise RecallError("query: must be a non-empty string")
    q = query.strip().lower()
    terms = _terms(q)
    with store.connect() as conn:
        prepared = _world_objects(conn, store.url, world)
        rows = [p.row for p in prepared]
        scored = []
        for r, names, cues, words in prepared:
            score = 0
            if q in names or r["object_id"].lower() == q:
                score += 100
            score += 20 * sum(1 for n in names if n and (n in q or q in n))
            score += 10 * sum(1 for c in cues if c and (c in q or q in c))
            score += len(terms & words)
            if score:
                scored.append((score, r))
        # A live object ranks above every archived one (an archived duplicate never outranks its survivor).
        scored.sort(key=lambda x: (x[1]["status"] == logic.ObjectStatus.ARCHIVED, -x[0], x[1]["object_id"]))
        hits = [_doc(r) | {"score": s} for s, r in scored]
        projects = [h["id"] for h in hits if h["type"] == "project"]
        if projects:
            rc = objects_relations.c
            rank = {p: i for i, p in enumerate(projects)}
            members = sorted(  # the best project's members first, so that pages are stable
                conn.execute(
                    select(rc.src, rc.dst).where(rc.world_id == world, rc.label == "member_of", rc.dst.in_(projects))
                ).all(),
                key=lambda m: (rank[m.dst], m.src),
            )
            have = {h["id"] for h in hits}
            by_id = {r["object_id"]: r for r in rows}
            for src, dst in members:
                if src not in have and src in by_id:
                    hits.append(_doc(by_id[src]) | {"score": 0, "via": f"member_of {dst}"})
                    have.add(src)
    return hits


def read(store: Store, world: str, object_id: str) -> dict[str, Any] | None:
    """The whole dossier: fields, relations both ways, sources (attachment ids and times)."""
    o, rc, a, s = objects_objects.c, objects_relations.c, objects_attachments.c, objects_event_state.c
    with store.connect() as conn:
        r = (
            conn.execute(select(objects_objects).where(o.world_id == world, o.object_id == object_id))
            .mappings()
            .first()
        )
        if r is None:
            return None
        rels = conn.execute(
            select(rc.src, rc.label, rc.dst, rc.legacy, rc.status)
            .where(rc.world_id == world, or_(rc.src == object_id, rc.dst == object_id))
            .order_by(rc.src, rc.label, rc.dst)
        ).all()
        sources = conn.execute(
            select(a.event_id, s.occurred_at)
            .outerjoin(objects_event_state, s.event_id == a.event_id)
            .where(a.world_id == world, a.object_id == object_id)
            .order_by(s.occurred_at, a.event_id)
        ).all()
    doc = _doc(r)
    doc["relations"] = [
        {"src": x.src, "label": x.label, "dst": x.dst, "legacy": x.legacy, "status": x.status} for x in rels
    ]
    doc["sources"] = [{"event_id": e, "occurred_at": at.isoformat() if at else None} for e, at in sources]
    return doc


def _check_offset(offset: int) -> None:
    """An offset within 0..2,147,483,647, refused by name (never the database's overflow error)."""
    problem = logic.int_problem(offset)
    if problem:
        raise RecallError(f"offset: {problem}")


def evidence(store: Store, world: str, object_id: str, offset: int = 0, limit: int = PAGE) -> dict[str, Any]:
    """The object's attachments expanded to the raw event text, oldest first, paged."""
    _check_offset(offset)
    if limit <= 0:
        raise RecallError("limit: must be > 0")
    a, m = objects_attachments.c, messages.c
    with store.connect() as conn:
        rows = conn.execute(
            select(m.message_id, m.at, m.role, m.content)
            .join(messages, m.message_id == a.event_id)
            .where(a.world_id == world, a.object_id == object_id)
            .order_by(m.at, m.message_id)
            .offset(offset)
            .limit(limit + 1)
        ).all()
    items = [
        {"event_id": r.message_id, "occurred_at": r.at.isoformat(), "role": r.role, "text": r.content}
        for r in rows[:limit]
    ]
    return {"object_id": object_id, "items": items, "next_offset": offset + limit if len(rows) > limit else None}


def evidence_count(store: Store, world: str, object_id: str) -> int:
    """How many items :func:`evidence` pages through."""
    a, m = objects_attachments.c, messages.c
    q = (
        select(func.count())
        .select_from(objects_attachments.join(messages, m.message_id == a.event_id))
        .where(a.world_id == world, a.object_id == object_id)
    )
    with store.connect() as conn:
        return int(conn.execute(q).scalar_one())


def list_objects(store: Store, world: str, otype: str, offset: int = 0, limit: int = PAGE) -> dict[str, Any]:
    try:
        logic.ObjectType(otype)
    except ValueError:
        raise RecallError(f"TYPE: {otype!r} is not a type ({', '.join(logic.ObjectType)})") from None
    _check_offset(offset)
    o = objects_objects.c
    with store.connect() as conn:
        rows = conn.execute(
            select(o.object_id, o.name, o.status, o.summary, o.updated_at)
            .where(o.world_id == world, o.type == otype)
            .order_by(o.name, o.object_id)
            .offset(offset)
            .limit(limit + 1)
        ).all()
    items = [{"id": r.object_id, "name": r.name, "status": r.status, "summary": r.summary} for r in rows[:limit]]
    return {"items": items, "next_offset": offset + limit if len(rows) > limit else None}


def object_view(
    store: Store, world: str, object_id: str, offset: int = 0, limit: int = logic.PROJECTION_PAGE
) -> dict[str, Any] | None:
    """inspect object: the dossier with relations and sources paged from ``offset``."""
    _check_offset(offset)
    doc = read(store, world, object_id)
    if doc is None:
        return None
    rels, srcs = doc["relations"], doc["sources"]
    doc["relations"], doc["sources"] = rels[offset : offset + limit], srcs[offset : offset + limit]
    more = max(len(rels), len(srcs)) > offset + limit
    doc["next_offset"] = offset + limit if more else None
    return doc


def event_view(store: Store, event_id: str, offset: int = 0, limit: int = EVENT_PAGE_CHARS) -> dict[str, Any] | None:
    """inspect event: its state, outcome, attached objects and its text from ``offset``."""
    _check_offset(offset)
    s, m, a = objects_event_state.c, messages.c, objects_attachments.c
    with store.connect() as conn:
        r = conn.execute(
            select(m.message_id, m.at, m.role, m.content, s.world_id, s.state, s.page_cursor, s.progress, s.reason)
            .outerjoin(objects_event_state, s.event_id == m.message_id)
            .where(m.message_id == event_id)
        ).first()
        if r is None:
            return None
        objs = sorted(conn.execute(select(a.object_id).where(a.event_id == event_id)).scalars())
    text = r.content or ""
    return {
        "event_id": r.message_id,
        "world_id": r.world_id,
        "occurred_at": r.at.isoformat(),
        "role": r.role,
        "state": r.state or "not_seen",
        "page_cursor": r.page_cursor,
        "progress": r.progress,
        "reason": r.reason,
        "objects": objs,
        "chars": len(text),
        "text": text[offset : offset + limit],
        "next_offset": offset + limit if len(text) > offset + limit else None,
    }


def _cursor(at: datetime, event_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([at.isoformat(), event_id]).encode()).decode()


def _uncursor(cursor: str) -> tuple[datetime, str]:
    try:
        at, eid = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return datetime.fromisoformat(at), str(eid)
    except (ValueError, TypeError) as exc:
        raise RecallError(f"cursor: not a cursor this command returned ({type(exc).__name__})") from None


def events_between(
    store: Store, start: datetime, end: datetime, cursor: str | None = None, limit: int = PAGE, world: str | None = None
) -> dict[str, Any]:
    """inspect events FROM TO: events by occurrence time in [start, end), ``cursor`` to continue."""
    if start.tzinfo is None or end.tzinfo is None:
        raise RecallError("FROM/TO: ISO 8601 with an offset")
    if start > end:
        raise RecallError(f"FROM/TO: FROM {start.isoformat()} is after TO {end.isoformat()} (the range is [FROM, TO))")
    s, m = objects_event_state.c, messages.c
    q = (
        select(m.message_id, m.at, m.role, m.content, s.world_id, s.state)
        .join(objects_event_state, s.event_id == m.message_id)
        .where(m.at >= start, m.at < end)
    )
    if world:
        q = q.where(s.world_id == world)
    if cursor:
        at, eid = _uncursor(cursor)
        q = q.where(or_(m.at > at, and_(m.at == at, m.message_id > eid)))
    with store.connect() as conn:
        rows = conn.execute(q.order_by(m.at, m.message_id).limit(limit + 1)).all()
    items = [
        {
            "event_id": r.message_id,
            "world_id": r.world_id,
            "occurred_at": r.at.isoformat(),
            "role": r.role,
            "state": r.state,
            "preview": (r.content or "")[:120],
        }
        for r in rows[:limit]
    ]
    nxt = _cursor(rows[limit - 1].at, rows[limit - 1].message_id) if len(rows) > limit else None
    return {"items": items, "cursor": nxt}


def object_counts(store: Store) -> dict[str, dict[str, int]]:
    o = objects_objects.c
    out: dict[str, dict[str, int]] = {}
    with store.connect() as conn:
        for w, t, n in conn.execute(select(o.world_id, o.type, func.count()).group_by(o.world_id, o.type)).all():
            out.setdefault(w, {})[t] = int(n)
    return out


DIRECTORY_MAX = 50


def resident(store: Store, world: str, hot_view_bytes: int = logic.HOT_VIEW_MAX_BYTES) -> dict[str, Any]:
    """What an agent holds every turn: the core documents (any may be absent), a bounded directory
    of object names (never the dossiers themselves: recall is on demand) and the hot timeline
    within its byte cap, which says explicitly when nodes were left out."""
    from memory_pipeline.objects.tables import objects_core, objects_hot_nodes

    c, o, n = objects_core.c, objects_objects.c, objects_hot_nodes.c
    with store.connect() as conn:
        core = dict(conn.execute(select(c.name, c.content).where(c.world_id == world)).all())
        directory = conn.execute(
            select(o.object_id, o.name)
            .where(o.world_id == world, o.status != "archived")
            .order_by(o.updated_at.desc(), o.object_id)
            .limit(DIRECTORY_MAX + 1)
        ).all()
        nodes = conn.execute(
            select(n.node_id, n.level, n.text).where(n.world_id == world, n.active.is_(True)).order_by(n.seq.desc())
        ).all()
    kept, used = [], 0
    for node in nodes:
        size = len(node.text.encode()) + 64
        if used + size > hot_view_bytes:
            break
        kept.append({"id": node.node_id, "level": node.level, "text": node.text})
        used += size
    kept.reverse()
    return {
        "core": core,
        "directory": [{"id": i, "name": nm} for i, nm in directory[:DIRECTORY_MAX]],
        "directory_truncated": len(directory) > DIRECTORY_MAX,
        "hot_timeline": kept,
        "hot_nodes_shown": len(kept),
        "hot_nodes_total": len(nodes),
    }
