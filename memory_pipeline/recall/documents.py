"""Every domain's memory of one world as documents: one readable text each, with its time and its
lineage back to raw event ids. The one place memory is turned into what `memory_search` ranks and
what `eval` attributes to days.

What counts is the memory a reader gets: non-empty temporal summaries; active semantic memories
and narratives; objects that are not archived; the latest version of each rolling conversation
summary; the newest summary of each window of the activity tower type in the world's group
(other tower types are not any world's memory). Lineage:
- a day summary: its source messages; a month or year summary: its children's, down to messages;
- a semantic memory: the messages of its source sessions; a narrative: its source memories';
- an object: its attached events;
- a rolling summary: the history entries (L numbers) it covers;
- a tower summary: its entries (the activity type's entry ids are message ids), through the chain."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Row, func, select

from memory_pipeline.conversation.tables import conversation_summaries
from memory_pipeline.lib.store.tables import conversations, messages
from memory_pipeline.lib.timeutil import period_bounds
from memory_pipeline.objects.tables import objects_attachments, objects_objects
from memory_pipeline.sleep.tables import autobiographical_memories, semantic_memories
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline.tower.tables import tower_entries, tower_summaries

# Recall reads every domain through its tables only (like the analyst layer); the few values of
# their closed vocabularies it needs are named here, each after the enum it mirrors.
ACTIVE = "active"  # sleep.logic.MemoryStatus.ACTIVE (semantic memories and narratives)
ARCHIVED = "archived"  # objects.logic.ObjectStatus.ARCHIVED
RECALLABLE = ("user", "assistant")  # conversation.summaries.RECALLABLE: the roles numbered L1..Ln


class MemoryKind(StrEnum):
    DAY_SUMMARY = "day_summary"
    MONTH_SUMMARY = "month_summary"
    YEAR_SUMMARY = "year_summary"
    SEMANTIC = "semantic_memory"
    NARRATIVE = "autobiography"
    OBJECT = "object"
    CONVERSATION_SUMMARY = "conversation_summary"
    TOWER_SUMMARY = "tower_summary"


TEMPORAL_KINDS = {"day": MemoryKind.DAY_SUMMARY, "month": MemoryKind.MONTH_SUMMARY, "year": MemoryKind.YEAR_SUMMARY}


@dataclass(frozen=True)
class Document:
    world: str
    kind: MemoryKind
    ref: str  # the row it is: summary id, memory id, object id, conversation id, record id
    text: str
    start: datetime | None  # the time it is about (a period, a session, the events it holds)
    end: datetime | None
    event_ids: tuple[str, ...]  # lineage: the raw events it came from


Span = tuple[datetime | None, datetime | None]


class _DocMaker(Protocol):
    def __call__(
        self, kind: MemoryKind, ref: object, text: str, events: Iterable[str], span: Span | None = None
    ) -> Document: ...


def _span(ats: Iterable[datetime]) -> Span:
    ats = sorted(ats)
    return (ats[0], ats[-1]) if ats else (None, None)


def world_documents(conn: Connection, world: str, tz: ZoneInfo, activity_type: str) -> list[Document]:
    """Every document of ``world`` (read in the caller's transaction)."""
    m, c = messages.c, conversations.c
    event_at: dict[str, datetime] = {}
    session_events: dict[str, list[str]] = defaultdict(list)
    q = (
        select(m.message_id, m.conversation_id, m.at)
        .join(conversations, c.conversation_id == m.conversation_id)
        .where(c.world_id == world)
        .order_by(m.at, m.message_id)
    )
    for mid, conv, at in conn.execute(q):
        event_at[mid] = at
        session_events[conv].append(mid)

    def doc(kind: MemoryKind, ref: object, text: str, events: Iterable[str], span: Span | None = None) -> Document:
        ids = tuple(dict.fromkeys(e for e in events if e in event_at))
        start, end = span if span else _span(event_at[e] for e in ids)
        return Document(world, kind, str(ref), " ".join(text.split()), start, end, ids)

    out: list[Document] = []
    out += _temporal(conn, world, tz, doc)
    memory_events: dict[str, list[str]] = {}
    s = semantic_memories.c
    for mid, content, sessions, status in conn.execute(
        select(s.memory_id, s.content, s.source_sessions, s.status).where(s.world_id == world)
    ):
        memory_events[mid] = [e for sid in sessions or [] for e in session_events.get(sid, ())]
        if status == ACTIVE:
            out.append(doc(MemoryKind.SEMANTIC, mid, content, memory_events[mid]))
    a = autobiographical_memories.c
    for mid, narrative, sources in conn.execute(
        select(a.memory_id, a.narrative, a.source_memory_ids).where(a.world_id == world, a.status == ACTIVE)
    ):
        out.append(
            doc(MemoryKind.NARRATIVE, mid, narrative, [e for s_ in sources or [] for e in memory_events.get(s_, ())])
        )
    o, att = objects_objects.c, objects_attachments.c
    attached: dict[str, list[str]] = defaultdict(list)
    for oid, event in conn.execute(select(att.object_id, att.event_id).where(att.world_id == world)):
        attached[oid].append(event)
    for oid, name, aliases, summary, body, cues in conn.execute(
        select(o.object_id, o.name, o.aliases, o.summary, o.body, o.cues).where(
            o.world_id == world, o.status != ARCHIVED
        )
    ):
        text = " ".join([name, *(str(x) for x in aliases or []), summary, body, *(str(x) for x in cues or [])])
        out.append(doc(MemoryKind.OBJECT, oid, text, sorted(attached.get(oid, ()))))
    cs = conversation_summaries.c
    latest = select(cs.conversation_id, func.max(cs.version).label("v")).group_by(cs.conversation_id).subquery()
    rows = conn.execute(
        select(cs.conversation_id, cs.content, cs.covered_start, cs.covered_end)
        .join(latest, (latest.c.conversation_id == cs.conversation_id) & (latest.c.v == cs.version))
        .where(cs.world_id == world)
    ).all()
    entries = history_ids(conn, [r.conversation_id for r in rows]) if rows else {}
    for conv, content, lo, hi in rows:
        out.append(doc(MemoryKind.CONVERSATION_SUMMARY, conv, content, entries.get(conv, [])[lo - 1 : hi]))
    out += _tower(conn, world, activity_type, doc)
    return [d for d in out if d.text]


def history_ids(conn: Connection, ids: list[str]) -> dict[str, list[str]]:
    """The message ids of each conversation's history entries, entry L1 first: the numbering a
    rolling summary's covered_start..covered_end refers to (recallable, non-empty, by time)."""
    m = messages.c
    q = (
        select(m.conversation_id, m.message_id)
        .where(m.conversation_id.in_(ids), m.role.in_(RECALLABLE), m.content != "")
        .order_by(m.conversation_id, m.at, m.message_id)
    )
    out: dict[str, list[str]] = defaultdict(list)
    for conv, mid in conn.execute(q):
        out[conv].append(mid)
    return out


def _temporal(conn: Connection, world: str, tz: ZoneInfo, doc: _DocMaker) -> list[Document]:
    t = temporal_summaries.c
    rows = conn.execute(
        select(t.summary_id, t.window, t.period_start, t.content, t.source_kind, t.source_ids).where(
            t.world_id == world
        )
    ).all()
    by_id = {r.summary_id: r for r in rows}
    memo: dict[int, list[str]] = {}

    def events(r: Row[Any]) -> list[str]:
        if r.summary_id not in memo:
            if r.source_kind == "message":
                memo[r.summary_id] = list(r.source_ids or [])
            else:
                memo[r.summary_id] = [e for k in r.source_ids or [] if k in by_id for e in events(by_id[k])]
        return memo[r.summary_id]

    out = []
    for r in rows:
        if r.content and r.window in TEMPORAL_KINDS:
            start, end = period_bounds(r.window, r.period_start, tz)
            out.append(doc(TEMPORAL_KINDS[r.window], r.summary_id, r.content, events(r), (start, end)))
    return out


def _tower(conn: Connection, world: str, activity_type: str, doc: _DocMaker) -> list[Document]:
    """The newest summary of each window of the activity type in the world's group."""
    ts = tower_summaries.c
    rows = conn.execute(
        select(ts.record_id, ts.granularity, ts.start, ts.end, ts.text, ts.ref_kind, ts.refs)
        .where(ts.type_name == activity_type, ts.group_value == world)
        .order_by(ts.record_id)
    ).all()
    newest = {(r.granularity, r.start, r.end): r for r in rows}  # later records win
    by_id = {r.record_id: r for r in rows}
    te = tower_entries.c
    entry_ids: dict[int, str] = dict(
        conn.execute(select(te.entry_pk, te.entry_id).where(te.type_name == activity_type, te.group_value == world))
        .tuples()
        .all()
    )
    memo: dict[int, list[str]] = {}

    def events(r: Row[Any]) -> list[str]:
        if r.record_id not in memo:
            memo[r.record_id] = []  # a cycle would stop here
            if r.ref_kind == "entry":
                memo[r.record_id] = [entry_ids[int(p)] for p in r.refs or [] if int(p) in entry_ids]
            else:
                memo[r.record_id] = [e for k in r.refs or [] if int(k) in by_id for e in events(by_id[int(k)])]
        return memo[r.record_id]

    return [doc(MemoryKind.TOWER_SUMMARY, r.record_id, r.text, events(r), (r.start, r.end)) for r in newest.values()]
