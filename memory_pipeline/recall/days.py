"""One text per (world, CST day) for each index, read from the store. Every item is attributed to the
days of the raw messages it came from: a temporal day summary to its day, a semantic memory to the
days of its source sessions' messages, a narrative through its source memories, an object through
its attached events, a rolling conversation summary through the history entries it covers. Only the
memory a reader would get counts: active semantic memories and narratives, objects not archived."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import date
from zoneinfo import ZoneInfo

from sqlalchemy import func, select

from memory_pipeline.conversation.summaries import history
from memory_pipeline.conversation.tables import conversation_summaries
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import conversations, messages
from memory_pipeline.lib.timeutil import local_date
from memory_pipeline.objects.logic import ObjectStatus
from memory_pipeline.objects.tables import objects_attachments, objects_objects
from memory_pipeline.recall.metric import MEMORY_INDEXES, Index
from memory_pipeline.sleep.logic import MemoryStatus
from memory_pipeline.sleep.tables import autobiographical_memories, semantic_memories
from memory_pipeline.temporal.tables import temporal_summaries

# texts[index][world][day]
DayTexts = dict[Index, dict[str, dict[date, str]]]


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
    q = (
        select(conversations.c.world_id, messages.c.at)
        .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
        .where(conversations.c.world_id.in_(list(out)))
    )
    with store.connect() as conn:
        for world, at in conn.execute(q):
            out[world].add(local_date(at, tz))
    return out


def message_days(store: Store, worlds: Iterable[str], tz: ZoneInfo) -> dict[str, date]:
    """Raw event id -> its CST day, for the worlds given."""
    q = (
        select(messages.c.message_id, messages.c.at)
        .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
        .where(conversations.c.world_id.in_(list(worlds)))
    )
    with store.connect() as conn:
        return {mid: local_date(at, tz) for mid, at in conn.execute(q)}


def day_texts(store: Store, worlds: list[str], tz: ZoneInfo) -> DayTexts:
    """Every index's day texts for the worlds given (the raw anchor included)."""
    out: DayTexts = {}
    with store.connect() as conn:
        conv_world = dict(
            conn.execute(
                select(conversations.c.conversation_id, conversations.c.world_id).where(
                    conversations.c.world_id.in_(worlds)
                )
            ).all()
        )
        session_days: dict[str, set[date]] = defaultdict(set)
        event_day: dict[str, date] = {}
        raw = _Days()
        q = select(messages.c.message_id, messages.c.conversation_id, messages.c.content, messages.c.at).where(
            messages.c.conversation_id.in_(list(conv_world))
        )
        for mid, conv, content, at in conn.execute(q):
            day = local_date(at, tz)
            session_days[conv].add(day)
            event_day[mid] = day
            raw.items[conv_world[conv]][day][f"{mid}\x00{content}"] = None
        out[Index.RAW] = {
            w: {d: "\n".join(k.split("\x00", 1)[1] for k in items) for d, items in days.items()}
            for w, days in raw.items.items()
        }

        summaries = _Days()
        t = temporal_summaries.c
        for world, start, content in conn.execute(
            select(t.world_id, t.period_start, t.content).where(
                t.world_id.in_(worlds), t.window == "day", t.content != ""
            )
        ):
            summaries.add(world, [start], content)
        out[Index.DAY_SUMMARIES] = summaries.texts()

        semantic = _Days()
        memory_days: dict[str, set[date]] = {}
        s = semantic_memories.c
        for mid, world, content, sessions, status in conn.execute(
            select(s.memory_id, s.world_id, s.content, s.source_sessions, s.status).where(s.world_id.in_(worlds))
        ):
            days = {d for sid in sessions or [] for d in session_days.get(sid, ())}
            memory_days[mid] = days
            if status == MemoryStatus.ACTIVE:
                semantic.add(world, days, content)
        out[Index.SEMANTIC] = semantic.texts()

        auto = _Days()
        a = autobiographical_memories.c
        for world, narrative, sources in conn.execute(
            select(a.world_id, a.narrative, a.source_memory_ids).where(
                a.world_id.in_(worlds), a.status == MemoryStatus.ACTIVE
            )
        ):
            auto.add(world, {d for m in sources or [] for d in memory_days.get(m, ())}, narrative)
        out[Index.AUTOBIOGRAPHY] = auto.texts()

        objects = _Days()
        o, att = objects_objects.c, objects_attachments.c
        attached: dict[tuple[str, str], set[date]] = defaultdict(set)
        for world, oid, event in conn.execute(
            select(att.world_id, att.object_id, att.event_id).where(att.world_id.in_(worlds))
        ):
            if event in event_day:
                attached[(world, oid)].add(event_day[event])
        for world, oid, name, aliases, summary, body, cues in conn.execute(
            select(o.world_id, o.object_id, o.name, o.aliases, o.summary, o.body, o.cues).where(
                o.world_id.in_(worlds), o.status != ObjectStatus.ARCHIVED
            )
        ):
            text = " ".join([name, *(aliases or []), summary, body, *(str(c) for c in cues or [])])
            objects.add(world, attached.get((world, oid), ()), text)
        out[Index.OBJECTS] = objects.texts()

        rolling = _Days()
        cs = conversation_summaries.c
        latest = select(cs.conversation_id, func.max(cs.version).label("v")).group_by(cs.conversation_id).subquery()
        rows = conn.execute(
            select(cs.conversation_id, cs.world_id, cs.content, cs.covered_start, cs.covered_end)
            .join(latest, (latest.c.conversation_id == cs.conversation_id) & (latest.c.v == cs.version))
            .where(cs.world_id.in_(worlds))
        ).all()
        entries = history(conn, [r.conversation_id for r in rows]) if rows else {}
        for conv, world, content, lo, hi in rows:
            days = {
                event_day[e["message_id"]]
                for e in entries.get(conv, [])
                if lo <= e["n"] <= hi and e["message_id"] in event_day
            }
            rolling.add(world, days, content)
        out[Index.CONVERSATION] = rolling.texts()

    together = _Days()
    for index in MEMORY_INDEXES:
        for world, days in out[index].items():
            for d, text in days.items():
                for line in text.split("\n"):
                    together.add(world, [d], line)
    out[Index.ALL_MEMORY] = together.texts()
    return out
