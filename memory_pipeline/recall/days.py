"""One text per (world, CST day) for each index, from the documents every domain's memory makes
(``recall.documents``): each item attributed to the days of the raw events of its lineage, so a
semantic memory lands on the days of its source sessions' messages, a narrative on its source
memories' days, an object on its attached events' days, a rolling summary on the days of the
entries it covers. A temporal day summary lands on its own day."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from zoneinfo import ZoneInfo

from sqlalchemy import select

from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import conversations, messages
from memory_pipeline.lib.timeutil import local_date
from memory_pipeline.recall.documents import Document, MemoryKind, world_documents
from memory_pipeline.recall.metric import MEMORY_INDEXES, Index

# texts[index][world][day]
DayTexts = dict[Index, dict[str, dict[date, str]]]

INDEX_OF_KIND = {
    MemoryKind.DAY_SUMMARY: Index.DAY_SUMMARIES,
    MemoryKind.SEMANTIC: Index.SEMANTIC,
    MemoryKind.NARRATIVE: Index.AUTOBIOGRAPHY,
    MemoryKind.OBJECT: Index.OBJECTS,
    MemoryKind.CONVERSATION_SUMMARY: Index.CONVERSATION,
}


class _Days:
    """Collects items per (world, day); a day's text is its items joined, each item once."""

    def __init__(self) -> None:
        self.items: dict[str, dict[date, dict[str, None]]] = defaultdict(lambda: defaultdict(dict))

    def add(self, world: str, days: Iterable[date], text: str) -> None:
        text = " ".join(text.split())
        if text:
            for d in days:
                self.items[world][d][text] = None

    def texts(self) -> dict[str, dict[date, str]]:
        return {w: {d: "\n".join(items) for d, items in days.items()} for w, days in self.items.items()}


def world_days(store: Store, worlds: Iterable[str], tz: ZoneInfo) -> dict[str, set[date]]:
    """The candidate days: every CST day on which the world has a raw message."""
    out: dict[str, set[date]] = {w: set() for w in worlds}
    for world, _mid, at in _messages(store, list(out)):
        out[world].add(local_date(at, tz))
    return out


def message_days(store: Store, worlds: Iterable[str], tz: ZoneInfo) -> dict[str, date]:
    """Raw event id -> its CST day, for the worlds given."""
    return {mid: local_date(at, tz) for _w, mid, at in _messages(store, list(worlds))}


def _messages(store: Store, worlds: list[str]) -> Sequence[tuple[str, str, datetime]]:
    q = (
        select(conversations.c.world_id, messages.c.message_id, messages.c.at)
        .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
        .where(conversations.c.world_id.in_(worlds))
    )
    with store.connect() as conn:
        return conn.execute(q).tuples().all()


def document_days(doc: Document, event_day: dict[str, date], tz: ZoneInfo) -> set[date]:
    if doc.kind is MemoryKind.DAY_SUMMARY and doc.start is not None:
        return {local_date(doc.start, tz)}
    return {event_day[e] for e in doc.event_ids if e in event_day}


def day_texts(store: Store, worlds: list[str], tz: ZoneInfo, activity_type: str) -> DayTexts:
    """Every index's day texts for the worlds given (the raw anchor included)."""
    q = (
        select(conversations.c.world_id, messages.c.message_id, messages.c.content, messages.c.at)
        .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
        .where(conversations.c.world_id.in_(worlds))
        .order_by(messages.c.at, messages.c.message_id)
    )
    raw: dict[str, dict[date, list[str]]] = defaultdict(lambda: defaultdict(list))
    event_day: dict[str, date] = {}
    indexes = {i: _Days() for i in MEMORY_INDEXES}
    with store.connect() as conn:
        for world, mid, content, at in conn.execute(q):
            day = local_date(at, tz)
            event_day[mid] = day
            if content:
                raw[world][day].append(content)
        for world in worlds:
            for doc in world_documents(conn, world, tz, activity_type):
                if doc.kind in INDEX_OF_KIND:
                    indexes[INDEX_OF_KIND[doc.kind]].add(world, document_days(doc, event_day, tz), doc.text)
    out: DayTexts = {Index.RAW: {w: {d: "\n".join(t) for d, t in days.items()} for w, days in raw.items()}}
    together = _Days()
    for index, collected in indexes.items():
        out[index] = collected.texts()
        for world, days in out[index].items():
            for d, text in days.items():
                for line in text.split("\n"):
                    together.add(world, [d], line)
    out[Index.ALL_MEMORY] = together.texts()
    return out
