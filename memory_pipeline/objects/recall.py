"""Seed 001 §4, §6: recall and inspection (read-only; never calls a model; no embeddings).

memory_find (names, aliases, terms, cues, direct project relations), memory_read (the whole
dossier), memory_evidence (attachments expanded to the raw event text), and the inspect views
(list / object / event with next_offset, events FROM TO with cursor).

find, read and evidence take ``tz``: their times (``updated_at``, ``occurred_at``) in that zone, to
the second, as operators and agents read every time (the memory server, the command line); None
keeps them as stored (UTC, microseconds and all), what the organize model's tools, the Markdown
projection and find's index hold."""

from __future__ import annotations

import base64
import json
import re
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple, NotRequired, TypedDict
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, RowMapping, and_, bindparam, func, or_, select

from memory_pipeline.lib.jsontypes import JSONObject, JSONValue
from memory_pipeline.lib.store import Store, watch
from memory_pipeline.lib.store.tables import messages
from memory_pipeline.lib.text import short_hash
from memory_pipeline.objects import logic
from memory_pipeline.objects.tables import objects_attachments, objects_event_state, objects_objects, objects_relations

PAGE = 20
EVENT_PAGE_CHARS = 8_000
_TERM = re.compile(r"\w+", re.UNICODE)


class RecallError(ValueError):
    """Bad input to a read (names the argument)."""


class ObjectDoc(TypedDict):
    """One object as recall answers it (a credential adds its purpose and reference)."""

    id: str
    type: str
    name: str
    aliases: list[str]
    summary: str
    body: str
    cues: list[str]
    status: str
    version: int
    updated_at: str
    purpose: NotRequired[str | None]
    reference: NotRequired[str | None]


class FoundDoc(ObjectDoc):
    """One answer of find: the object and its score (a member of a matched project: a MemberDoc)."""

    score: int


class MemberDoc(FoundDoc):
    """A member of a matched project in find's answer: ``via`` names the project."""

    via: str


class RelationDoc(TypedDict):
    src: str
    label: str
    dst: str
    legacy: bool
    status: str


class SourceDoc(TypedDict):
    event_id: str
    occurred_at: str | None


class Dossier(ObjectDoc):
    """read: the object with its relations both ways and its sources."""

    relations: list[RelationDoc]
    sources: list[SourceDoc]


class DossierPage(Dossier):
    """inspect object: the dossier with relations and sources paged."""

    next_offset: int | None


class EvidenceItem(TypedDict):
    event_id: str
    occurred_at: str
    role: str
    text: str


class EvidencePage(TypedDict):
    object_id: str
    items: list[EvidenceItem]
    next_offset: int | None


def _terms(text: str) -> set[str]:
    return {t.lower() for t in _TERM.findall(text or "") if len(t) > 1}


def _doc(r: RowMapping | Mapping[str, Any], tz: ZoneInfo | None = None) -> ObjectDoc:
    doc: ObjectDoc = {
        "id": r["object_id"],
        "type": r["type"],
        "name": r["name"],
        "aliases": list(r["aliases"] or []),
        "summary": r["summary"],
        "body": r["body"],
        "cues": list(r["cues"] or []),
        "status": r["status"],
        "version": r["version"],
        "updated_at": logic.shown_at(r["updated_at"], tz),
    }
    if r["type"] == "credential":
        doc["purpose"], doc["reference"] = r["purpose"], r["reference"]
    return doc


class _Prepared(NamedTuple):
    """One object as find scores it: the row, its id, names and cues lowercased, the words of its
    summary, body and names."""

    row: dict[str, Any]
    oid: str
    names: list[str]
    cues: list[str]
    words: frozenset[str]


def _prepare(r: Any) -> _Prepared:
    names = [r["name"].lower(), *(a.lower() for a in r["aliases"] or [])]
    words = frozenset(_terms(r["summary"]) | _terms(r["body"]) | _terms(" ".join(names)))
    return _Prepared(dict(r), r["object_id"].lower(), names, [c.lower() for c in r["cues"] or []], words)


def _score(p: _Prepared, q: str, terms: set[str]) -> int:
    """How well one object matches the query ``q`` (stripped, lowercased; ``terms`` its words): the
    one rule both the index and the full scan answer with."""
    score = 100 if q in p.names or p.oid == q else 0
    for n in p.names:
        if n and (n in q or q in n):
            score += 20
    for c in p.cues:
        if c and (c in q or q in c):
            score += 10
    return score + len(terms & p.words)


# Between the labels in one string: a query holding it finds a false candidate at worst (scored 0).
_SEP = "\x00"


class WorldIndex:
    """One world's objects as find reads them, built once per world version: the prepared objects
    and their answer documents, and what leads a query to the only objects that can score above 0
    (:func:`_score`): the ids, every word → its objects, every label (name, alias, cue) → its
    objects with the labels' lengths (a label inside the query), and one string of all labels (the
    query inside a label). Built from one world's rows only: a query never reaches another's."""

    def __init__(self, prepared: list[_Prepared]) -> None:
        self.objects = prepared
        self.docs = [_doc(p.row) for p in prepared]
        self.by_id = {p.row["object_id"]: i for i, p in enumerate(prepared)}
        self._by_lower_id: dict[str, list[int]] = {}
        self._by_word: dict[str, list[int]] = {}
        self._by_label: dict[str, set[int]] = {}
        starts, owners, parts, at = [], [], [], 0
        for i, p in enumerate(prepared):
            self._by_lower_id.setdefault(p.oid, []).append(i)
            for w in p.words:
                self._by_word.setdefault(w, []).append(i)
            for label in (*p.names, *p.cues):
                if not label:
                    continue
                self._by_label.setdefault(label, set()).add(i)
                starts.append(at)
                owners.append(i)
                parts.append(label)
                at += len(label) + len(_SEP)
        # Each object's place among the world's objects by (archived, id): the ranking's tie-breaks.
        archived = [p.row["status"] == logic.ObjectStatus.ARCHIVED for p in prepared]
        self._archived = archived
        self._order = [0] * len(prepared)
        for place, i in enumerate(
            sorted(range(len(prepared)), key=lambda i: (archived[i], prepared[i].row["object_id"]))
        ):
            self._order[i] = place
        self._lengths = sorted({len(label) for label in self._by_label})
        self._labels = _SEP.join(parts)
        self._starts, self._owners = starts, owners

    def candidates(self, q: str, terms: set[str]) -> set[int]:
        """Every object :func:`_score` gives more than 0 for ``q`` (and maybe a few it gives 0)."""
        found: set[int] = set(self._by_lower_id.get(q, ()))
        for t in terms:  # a word of the query among the object's words
            found.update(self._by_word.get(t, ()))
        by_label, n = self._by_label, len(q)
        for size in self._lengths:  # a label inside the query (a label equal to it included)
            if size > n:
                break
            for i in range(n - size + 1):
                hit = by_label.get(q[i : i + size])
                if hit:
                    found.update(hit)
        # The query inside a label: each occurrence names the label it starts in; the search goes
        # on from the next label, so every label holding the query is reached.
        labels, starts, owners = self._labels, self._starts, self._owners
        pos = labels.find(q)
        while pos >= 0:
            k = bisect_right(starts, pos) - 1
            found.add(owners[k])
            if k + 1 == len(starts):
                break
            pos = labels.find(q, starts[k + 1])
        return found

    def ranked(self, q: str, terms: set[str], full_scan: bool = False) -> list[tuple[int, int]]:
        """(score, object) of every object scoring above 0, live before archived, best first, by
        id; ``full_scan`` scores every object of the world instead of the candidates (the reference
        the index is tested and measured against)."""
        objects, archived, order = self.objects, self._archived, self._order
        look = range(len(objects)) if full_scan else self.candidates(q, terms)
        # A live object ranks above every archived one (an archived duplicate never outranks its survivor).
        keyed = sorted((archived[i], -s, order[i], i) for i in look if (s := _score(objects[i], q, terms)))
        return [(-s, i) for _, s, _, i in keyed]

    def answer(self, i: int, score: int, member_of: str = "", tz: ZoneInfo | None = None) -> FoundDoc:
        """Object ``i``'s document in one answer, with its score and, for a member of a matched
        project, ``via`` (its own dict and lists: a caller may change them); ``tz``: its
        ``updated_at`` in that zone, here in the answer (the index keeps the stored form)."""
        doc = self.docs[i]
        found: FoundDoc = {**doc, "aliases": list(doc["aliases"]), "cues": list(doc["cues"]), "score": score}
        if tz is not None:
            found["updated_at"] = logic.shown_at(self.objects[i].row["updated_at"], tz)
        if member_of:
            member: MemberDoc = {**found, "via": f"member_of {member_of}"}
            return member
        return found


# (store url, world) -> (the world's objects' signature, its index, the store's stamp when the
# signature was read): each find read and tokenized every object of the world, which at 1,000
# objects was most of a call, then scored them all. While the stamp is unchanged nothing was
# committed, so neither the signature nor the project members need reading (SQLite file only).
_INDEXES: OrderedDict[tuple[str, str], tuple[tuple[Any, ...], WorldIndex, watch.Stamp | None]] = OrderedDict()
_MEMBERS_OF: dict[tuple[str, str], tuple[watch.Stamp, dict[str, list[str]]]] = {}  # project -> members
_INDEXED_WORLDS = 64
_INDEXES_LOCK = threading.Lock()
_o, _rc = objects_objects.c, objects_relations.c
# Built once: building a statement and its cache key in SQLAlchemy cost about as much as running it.
_SIGNATURE = select(func.count(), func.max(_o.updated_at), func.sum(_o.version), func.max(_o.revision)).where(
    _o.world_id == bindparam("world")
)
_WORLD_ROWS = select(objects_objects).where(_o.world_id == bindparam("world"))
_MEMBERS = select(_rc.src, _rc.dst).where(
    _rc.world_id == bindparam("world"), _rc.label == "member_of", _rc.dst.in_(bindparam("projects", expanding=True))
)
_ALL_MEMBERS = select(_rc.src, _rc.dst).where(_rc.world_id == bindparam("world"), _rc.label == "member_of")


def world_index(conn: Connection, url: str, world: str, stamp: watch.Stamp | None = None) -> WorldIndex:
    """The world's objects indexed for find, built again only when they changed: every write of an
    object advances its version and updated_at, and adds or removes a row (one aggregate first,
    skipped while ``stamp``, read before this call, is the one the index was last checked at)."""
    key = (url, world)
    if stamp is not None:
        with _INDEXES_LOCK:
            held = _INDEXES.get(key)
            if held is not None and held[2] == stamp:
                _INDEXES.move_to_end(key)
                return held[1]
    signature = tuple(conn.execute(_SIGNATURE, {"world": world}).one())
    with _INDEXES_LOCK:
        held = _INDEXES.get(key)
        if held is not None and held[0] == signature:
            _INDEXES[key] = (signature, held[1], stamp)
            _INDEXES.move_to_end(key)
            return held[1]
    index = WorldIndex([_prepare(r) for r in conn.execute(_WORLD_ROWS, {"world": world}).mappings()])
    with _INDEXES_LOCK:
        _INDEXES[key] = (signature, index, stamp)
        _INDEXES.move_to_end(key)
        while len(_INDEXES) > _INDEXED_WORLDS:
            _MEMBERS_OF.pop(_INDEXES.popitem(last=False)[0], None)
    return index


def _members(conn: Connection, url: str, world: str, projects: list[str], stamp: watch.Stamp | None) -> list[Any]:
    """(member, project) of each project's member_of relations. A relation can change without any
    object row changing, so the world's are kept only while the stamp is unchanged."""
    if stamp is None:
        return list(conn.execute(_MEMBERS, {"world": world, "projects": projects}).all())
    key = (url, world)
    with _INDEXES_LOCK:
        held = _MEMBERS_OF.get(key)
    if held is None or held[0] != stamp:
        by_project: dict[str, list[str]] = {}
        for src, dst in conn.execute(_ALL_MEMBERS, {"world": world}):
            by_project.setdefault(dst, []).append(src)
        held = (stamp, by_project)
        with _INDEXES_LOCK:
            if key in _INDEXES:  # kept as long as the world's index
                _MEMBERS_OF[key] = held
    return [(src, p) for p in dict.fromkeys(projects) for src in held[1].get(p, ())]


def _found(store: Store, world: str, query: str, full_scan: bool) -> tuple[WorldIndex, list[tuple[int, int, str]]]:
    """The world's index and what find answers, in order: (object, score, the project it is a
    member of when it is there as one, else "")."""
    if not isinstance(query, str) or not query.strip():
        raise RecallError("query: must be a non-empty string")
    q = query.strip().lower()
    terms = _terms(q)
    stamp = watch.stamp(store)
    with store.connect() as conn:
        index = world_index(conn, store.url, world, stamp)
        found = [(i, s, "") for s, i in index.ranked(q, terms, full_scan)]
        objects = index.objects
        projects = [objects[i].row["object_id"] for i, _, _ in found if objects[i].row["type"] == "project"]
        if projects:
            rank = {p: i for i, p in enumerate(projects)}
            members = sorted(  # the best project's members first, so that pages are stable
                _members(conn, store.url, world, projects, stamp), key=lambda m: (rank[m[1]], m[0])
            )
            have = {i for i, _, _ in found}
            for src, dst in members:
                i = index.by_id.get(src)
                if i is not None and i not in have:
                    found.append((i, 0, dst))
                    have.add(i)
    return index, found


def find(
    store: Store, world: str, query: str, limit: int = PAGE, *, full_scan: bool = False, tz: ZoneInfo | None = None
) -> list[FoundDoc]:
    """Objects whose name, alias, cue or words match the query, best first, then the members of
    any matched project (its direct relations): the first ``limit`` of :func:`find_all`."""
    return find_page(store, world, query, 0, limit, full_scan=full_scan, tz=tz)[0]


def find_page(
    store: Store,
    world: str,
    query: str,
    offset: int,
    limit: int,
    *,
    full_scan: bool = False,
    tz: ZoneInfo | None = None,
) -> tuple[list[FoundDoc], int]:
    """``limit`` items of :func:`find_all` from ``offset``, and how many it holds; only the page's
    documents are built."""
    index, found = _found(store, world, query, full_scan)
    return [index.answer(i, s, via, tz) for i, s, via in found[offset : offset + limit]], len(found)


def find_all(
    store: Store, world: str, query: str, *, full_scan: bool = False, tz: ZoneInfo | None = None
) -> list[FoundDoc]:
    """Every object :func:`find` pages through. ``full_scan`` scores every object of the world
    rather than the index's candidates: the same answer, slower (the reference for tests and bench)."""
    index, found = _found(store, world, query, full_scan)
    return [index.answer(i, s, via, tz) for i, s, via in found]


def read(store: Store, world: str, object_id: str, *, tz: ZoneInfo | None = None) -> Dossier | None:
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
    return {
        **_doc(r, tz),
        "relations": [
            {"src": x.src, "label": x.label, "dst": x.dst, "legacy": x.legacy, "status": x.status} for x in rels
        ],
        "sources": [
            {
                "event_id": e,
                "occurred_at": logic.shown_at(at, tz) if at else None,
            }
            for e, at in sources
        ],
    }


def _check_offset(offset: int) -> None:
    """An offset within 0..2,147,483,647, refused by name (never the database's overflow error)."""
    problem = logic.int_problem(offset)
    if problem:
        raise RecallError(f"offset: {problem}")


def evidence(
    store: Store, world: str, object_id: str, offset: int = 0, limit: int = PAGE, *, tz: ZoneInfo | None = None
) -> EvidencePage | None:
    """The object's attachments expanded to the raw event text, oldest first, paged; None when the
    world has no such object (a mistyped id is not an object without evidence)."""
    _check_offset(offset)
    if limit <= 0:
        raise RecallError("limit: must be > 0")
    a, m, o = objects_attachments.c, messages.c, objects_objects.c
    with store.connect() as conn:
        if conn.execute(select(o.object_id).where(o.world_id == world, o.object_id == object_id)).first() is None:
            return None
        rows = conn.execute(
            select(m.message_id, m.at, m.role, m.content)
            .join(messages, m.message_id == a.event_id)
            .where(a.world_id == world, a.object_id == object_id)
            .order_by(m.at, m.message_id)
            .offset(offset)
            .limit(limit + 1)
        ).all()
    items: list[EvidenceItem] = [
        {
            "event_id": r.message_id,
            "occurred_at": logic.shown_at(r.at, tz),
            "role": r.role,
            "text": r.content,
        }
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


def list_objects(store: Store, world: str, otype: str, offset: int = 0, limit: int = PAGE) -> JSONObject:
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
    items: list[JSONValue] = [
        {"id": r.object_id, "name": r.name, "status": r.status, "summary": r.summary} for r in rows[:limit]
    ]
    return {"items": items, "next_offset": offset + limit if len(rows) > limit else None}


def object_view(
    store: Store,
    world: str,
    object_id: str,
    offset: int = 0,
    limit: int = logic.PROJECTION_PAGE,
    *,
    tz: ZoneInfo | None = None,
) -> DossierPage | None:
    """inspect object: the dossier with relations and sources paged from ``offset`` (``tz``: as :func:`read`)."""
    _check_offset(offset)
    doc = read(store, world, object_id, tz=tz)
    if doc is None:
        return None
    rels, srcs = doc["relations"], doc["sources"]
    more = max(len(rels), len(srcs)) > offset + limit
    return {
        **doc,
        "relations": rels[offset : offset + limit],
        "sources": srcs[offset : offset + limit],
        "next_offset": offset + limit if more else None,
    }


def event_view(
    store: Store, event_id: str, offset: int = 0, limit: int = EVENT_PAGE_CHARS, *, tz: ZoneInfo | None = None
) -> JSONObject | None:
    """inspect event: its state, outcome, attached objects and its text from ``offset``; ``tz``: its
    time in that zone, to the second (None: as stored)."""
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
        "occurred_at": logic.shown_at(r.at, tz),
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


def _cursor(at: datetime, event_id: str, scope: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([at.isoformat(), event_id, scope]).encode()).decode()


def _uncursor(cursor: str, scope: str) -> tuple[datetime, str]:
    """The cursor's place, if it was returned for the same FROM, TO and world (``scope``): a cursor
    of another range or world would page a list the caller did not ask for."""
    try:
        at, eid, its_scope = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        place = datetime.fromisoformat(at), str(eid)
    except (ValueError, TypeError):
        raise RecallError("cursor: not a cursor this command returned") from None
    if its_scope != scope:
        raise RecallError("cursor: returned for another FROM, TO or --world; give the arguments it was returned for")
    return place


def events_between(
    store: Store,
    start: datetime,
    end: datetime,
    cursor: str | None = None,
    limit: int = PAGE,
    world: str | None = None,
    *,
    tz: ZoneInfo | None = None,
) -> JSONObject:
    """inspect events FROM TO: events by occurrence time in [start, end), ``cursor`` to continue
    (it keeps the stored time, to the microsecond); ``tz``: the times shown in that zone, to the
    second (None: as stored)."""
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
    if world is not None:
        q = q.where(s.world_id == world)
    scope = short_hash([start.timestamp(), end.timestamp(), world])  # the same instants in any offset
    if cursor:
        at, eid = _uncursor(cursor, scope)
        q = q.where(or_(m.at > at, and_(m.at == at, m.message_id > eid)))
    with store.connect() as conn:
        rows = conn.execute(q.order_by(m.at, m.message_id).limit(limit + 1)).all()
    items: list[JSONValue] = [
        {
            "event_id": r.message_id,
            "world_id": r.world_id,
            "occurred_at": logic.shown_at(r.at, tz),
            "role": r.role,
            "state": r.state,
            "preview": (r.content or "")[:120],
        }
        for r in rows[:limit]
    ]
    nxt = _cursor(rows[limit - 1].at, rows[limit - 1].message_id, scope) if len(rows) > limit else None
    return {"items": items, "cursor": nxt}


def object_counts(store: Store, world: str | None = None) -> dict[str, dict[str, int]]:
    """Objects per world and type (``world``: that world's alone)."""
    o = objects_objects.c
    out: dict[str, dict[str, int]] = {}
    q = select(o.world_id, o.type, func.count()).group_by(o.world_id, o.type)
    if world is not None:
        q = q.where(o.world_id == world)
    with store.connect() as conn:
        for w, t, n in conn.execute(q).all():
            out.setdefault(w, {})[t] = int(n)
    return out


DIRECTORY_MAX = 50


def resident(store: Store, world: str, hot_view_bytes: int = logic.HOT_VIEW_MAX_BYTES) -> JSONObject:
    """What an agent holds every turn: the core documents (any may be absent), a bounded directory
    of object names (never the dossiers themselves: recall is on demand) and the hot timeline
    within its byte cap, which says explicitly when nodes were left out."""
    from memory_pipeline.objects.tables import objects_core, objects_hot_nodes

    c, o, n = objects_core.c, objects_objects.c, objects_hot_nodes.c
    with store.connect() as conn:
        core: dict[str, JSONValue] = dict(
            conn.execute(select(c.name, c.content).where(c.world_id == world)).tuples().all()
        )
        directory = conn.execute(
            select(o.object_id, o.name)
            .where(o.world_id == world, o.status != "archived")
            .order_by(o.updated_at.desc(), o.object_id)
            .limit(DIRECTORY_MAX + 1)
        ).all()
        nodes = conn.execute(
            select(n.node_id, n.level, n.text).where(n.world_id == world, n.active.is_(True)).order_by(n.seq.desc())
        ).all()
    kept: list[JSONValue] = []
    used = 0
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
