"""`memory_search(world, query, k)`: one ranked recall over every domain's memory of one world.

Each hit has its kind, text, time and lineage back to raw event ids. Ranking is the store's own
full-text engine over ``recall_documents``: FTS5's BM25 on SQLite (the embedded default), ``ts_rank``
over the english tsvector (GIN-indexed) on PostgreSQL. Every query names the caller's world in SQL:
no path reaches another world's rows. Reading never calls an LLM.

The index follows memory as it is written: before ranking, the world's sources are compared with
the fingerprint recorded when its documents were last brought up to date (counts and newest change
of each memory table, and of the world's raw events, whose ids the lineage names); when they
differ, the world's documents are rebuilt from the tables and only the changed ones rewritten.

A hit's lineage lists the raw events that say most about the query first: an object or a summary
may stand on hundreds of events of many days, and the agent reading ``event_ids[0]`` should meet the
one the question is about. Each event is weighed by the query's words it holds, a word weighing
more the fewer of the hit's events hold it (the hit's name, in all of them, weighs nothing; a word
as common as "the" or "have" nothing either); ties keep the busiest day first, then the earlier day."""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, bindparam, column, delete, func, literal_column, select, table, text, update

from memory_pipeline.conversation.tables import conversation_summaries
from memory_pipeline.lib import settings
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.db import insert_missing
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline.lib.text import COMMON_ZIPF, short_hash, zipf
from memory_pipeline.lib.timeutil import local_date, utcnow
from memory_pipeline.objects.tables import objects_attachments, objects_objects
from memory_pipeline.recall.documents import Document, MemoryKind, world_documents
from memory_pipeline.recall.metric import fts_text, query_terms
from memory_pipeline.recall.tables import FTS_TABLE, recall_documents, recall_index_state
from memory_pipeline.sleep.tables import autobiographical_memories, semantic_memories
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline.tower.tables import tower_summaries

K_MAX = 100
QUERY_MAX_CHARS = 2000


class SearchError(ValueError):
    pass


@dataclass(frozen=True)
class Hit:
    kind: MemoryKind
    ref: str
    text: str
    start: datetime | None
    end: datetime | None
    event_ids: tuple[str, ...]
    score: float  # larger is better

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "ref": self.ref,
            "text": self.text,
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "event_ids": list(self.event_ids),
            "score": round(self.score, 6),
        }


def _sources_fp(conn: Connection, world: str, activity_type: str) -> str:
    """Counts and newest change of everything the world's documents are made of, in one statement
    (the check runs before every search). Raw events are seen through their conversations: a new one
    is counted, and an ingest that adds messages to a stored one moves its ``updated_at``; counting the
    world's messages themselves read every one of them on each search."""
    parts = conn.execute(_sources_statement(), {"world": world, "activity_type": activity_type}).one()
    return short_hash([activity_type, *(str(p) for p in parts)], 32)


@functools.cache
def _sources_statement() -> Any:
    """_sources_fp's statement, built once (building it took longer than running it)."""
    world: Any = bindparam("world")
    aggregates: list[Any] = []
    for tbl, world_col, changed in (
        (temporal_summaries, temporal_summaries.c.world_id, temporal_summaries.c.updated_at),
        (semantic_memories, semantic_memories.c.world_id, semantic_memories.c.updated_at),
        (autobiographical_memories, autobiographical_memories.c.world_id, autobiographical_memories.c.updated_at),
        (objects_objects, objects_objects.c.world_id, objects_objects.c.updated_at),
        (objects_attachments, objects_attachments.c.world_id, objects_attachments.c.created_at),
        (conversation_summaries, conversation_summaries.c.world_id, conversation_summaries.c.created_at),
        (conversations, conversations.c.world_id, conversations.c.updated_at),
    ):
        aggregates += [
            select(func.count()).select_from(tbl).where(world_col == world).scalar_subquery(),
            select(func.max(changed)).where(world_col == world).scalar_subquery(),
        ]
    ts = tower_summaries.c
    tower = (ts.type_name == bindparam("activity_type"), ts.group_value == world)
    aggregates += [
        select(func.count()).select_from(tower_summaries).where(*tower).scalar_subquery(),
        select(func.max(ts.record_id)).where(*tower).scalar_subquery(),
    ]
    return select(*aggregates)


def _doc_fp(d: Document) -> str:
    return short_hash([d.text, d.start, d.end, *d.event_ids], 32)


def _row(d: Document, now: datetime) -> dict[str, Any]:
    return {
        "world_id": d.world,
        "kind": d.kind.value,
        "ref": d.ref,
        "text": d.text,
        "search_text": fts_text(d.text),
        "start_at": d.start,
        "end_at": d.end,
        "event_ids": list(d.event_ids),
        "fingerprint": _doc_fp(d),
        "indexed_at": now,
    }


def refresh(store: Store, world: str, tz: ZoneInfo, activity_type: str, *, force: bool = False) -> int | None:
    """Bring the world's documents up to date: None when they already were, else how many documents
    were written or removed. Idempotent; one transaction."""
    with store.begin() as conn:
        if store.dialect == "postgresql":  # two searches of a new world: one builds, the other waits
            key = int(short_hash(["recall_documents", world], 15), 16)
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
        fp = _sources_fp(conn, world, activity_type)
        st = recall_index_state.c
        known = conn.execute(select(st.sources_fp).where(st.world_id == world)).scalar()
        if known == fp and not force:
            return None
        now = utcnow()
        docs = {(d.kind.value, d.ref): d for d in world_documents(conn, world, tz, activity_type)}
        rd = recall_documents.c
        held = {
            (k, r): (doc_id, f)
            for doc_id, k, r, f in conn.execute(
                select(rd.doc_id, rd.kind, rd.ref, rd.fingerprint).where(rd.world_id == world)
            )
        }
        gone = [doc_id for key, (doc_id, _) in held.items() if key not in docs]
        changed = [(held[key][0], d) for key, d in docs.items() if key in held and held[key][1] != _doc_fp(d)]
        new = [d for key, d in docs.items() if key not in held]
        for i in range(0, len(gone), 500):
            conn.execute(delete(recall_documents).where(rd.doc_id.in_(gone[i : i + 500])))
        if changed:
            rows = [_row(d, now) | {"b_doc_id": doc_id} for doc_id, d in changed]
            values = {k: bindparam(k) for k in rows[0] if k != "b_doc_id"}
            conn.execute(update(recall_documents).where(rd.doc_id == bindparam("b_doc_id")).values(values), rows)
        if new:
            conn.execute(recall_documents.insert(), [_row(d, now) for d in new])
        if known is None:
            insert_missing(
                conn,
                recall_index_state,
                [{"world_id": world, "sources_fp": fp, "documents": len(docs), "indexed_at": now}],
                "world_id",
            )
        conn.execute(
            update(recall_index_state)
            .where(st.world_id == world)
            .values(sources_fp=fp, documents=len(docs), indexed_at=now)
        )
        return len(gone) + len(changed) + len(new)


def memory_search(
    store: Store, world: str, query: str, k: int = 10, *, activity_type: str, tz: ZoneInfo | None = None
) -> list[Hit]:
    """The ``k`` best documents of ``world`` for ``query``, best first (never another world's).
    ``activity_type``: the tower type fed from the conversations (``memory.tower.activity_type``);
    ``tz`` defaults to the configured zone."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= K_MAX:
        raise SearchError(f"k: must be an integer from 1 to {K_MAX}, got {k!r}")
    return search_page(store, world, query, k, 0, activity_type=activity_type, tz=tz, count=False)[0]


def search_page(
    store: Store,
    world: str,
    query: str,
    limit: int,
    offset: int,
    *,
    activity_type: str,
    tz: ZoneInfo | None = None,
    count: bool = True,
) -> tuple[list[Hit], int]:
    """The hits ``offset`` to ``offset + limit`` of :func:`memory_search`'s ranking, and how many
    documents match in all (the memory server's pages; 0 when ``count`` is false)."""
    if tz is None:
        tz = ZoneInfo(settings.timezone_name())
    if not isinstance(query, str) or not query.strip():
        raise SearchError("query: must be a non-empty string")
    if len(query) > QUERY_MAX_CHARS:
        raise SearchError(f"query: too long: {len(query)} characters (limit {QUERY_MAX_CHARS})")
    with store.connect() as conn:
        if conn.execute(select(worlds.c.world_id).where(worlds.c.world_id == world)).first() is None:
            raise SearchError(f"world {world!r}: no such world")
    refresh(store, world, tz, activity_type)
    terms = query_terms(query)
    if not terms:
        return [], 0
    rd = recall_documents.c
    cols = (rd.kind, rd.ref, rd.text, rd.start_at, rd.end_at, rd.event_ids)
    if store.dialect == "sqlite":
        fts = table(FTS_TABLE, column("rowid"))
        score = literal_column(f"-bm25({FTS_TABLE})")  # bm25() is smaller for better matches
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        matching = text(f"{FTS_TABLE} MATCH :match").bindparams(match=match)
        q = (
            select(*cols, score.label("score"))
            .select_from(recall_documents.join(fts, fts.c.rowid == rd.doc_id))
            .where(matching, rd.world_id == world)
        )
        # the full-text index first, then the world: as a join SQLite ran one full-text query per
        # document of the world (a tenth of a second)
        counted = select(func.count()).where(rd.world_id == world, rd.doc_id.in_(select(fts.c.rowid).where(matching)))
    else:
        # the expression of the GIN index; to_tsquery syntax cannot appear in a term (query_terms:
        # letters, digits and '_' only)
        english = literal_column("'english'::regconfig")
        tsv = func.to_tsvector(english, rd.search_text)
        tsq = func.to_tsquery(english, " | ".join(terms))
        score = func.ts_rank(tsv, tsq)
        q = select(*cols, score.label("score")).where(rd.world_id == world, tsv.op("@@")(tsq))
        counted = select(func.count()).where(rd.world_id == world, tsv.op("@@")(tsq))
    with store.connect() as conn:
        rows = conn.execute(q.order_by(literal_column("score").desc(), rd.doc_id).offset(offset).limit(limit)).all()
        total = conn.execute(counted).scalar_one() if count and (rows or offset) else 0
        lineage = [tuple(r.event_ids) for r in rows]
        events = _events(conn, world, {e for ids in lineage if len(ids) > 1 for e in ids})
    wanted = {t for t in terms if zipf(t) < COMMON_ZIPF}
    hits = [
        Hit(
            MemoryKind(r.kind),
            r.ref,
            r.text,
            r.start_at,
            r.end_at,
            by_relevance(ids, events, wanted, tz) if len(ids) > 1 else ids,
            float(r.score),
        )
        for r, ids in zip(rows, lineage, strict=True)
    ]
    return hits, int(total)


_IN_BATCH = 500


def _events(conn: Connection, world: str, ids: set[str]) -> dict[str, tuple[datetime, str]]:
    """Time and text of the world's raw events among ``ids``."""
    m, c = messages.c, conversations.c
    out: dict[str, tuple[datetime, str]] = {}
    wanted = sorted(ids)
    for i in range(0, len(wanted), _IN_BATCH):
        q = (
            select(m.message_id, m.at, m.content)
            .join(conversations, c.conversation_id == m.conversation_id)
            .where(c.world_id == world, m.message_id.in_(wanted[i : i + _IN_BATCH]))
        )
        out.update((mid, (at, content or "")) for mid, at, content in conn.execute(q))
    return out


def by_relevance(
    ids: tuple[str, ...], events: dict[str, tuple[datetime, str]], terms: set[str], tz: ZoneInfo
) -> tuple[str, ...]:
    """``ids`` with the events holding the query's rarest words (within ``ids``) first; ties: the
    busiest day first, then the earlier day, then the order given."""
    held = {e: set(query_terms(events[e][1])) & terms if e in events else set() for e in ids}
    df = Counter(t for words in held.values() for t in words)
    n = len(ids)
    idf = {t: math.log(n / d) for t, d in df.items()}  # 0 for a word every event holds
    day = {e: local_date(events[e][0], tz) if e in events else date.max for e in ids}
    busy = Counter(day.values())
    return tuple(sorted(ids, key=lambda e: (-math.fsum(idf[t] for t in held[e]), -busy[day[e]], day[e])))
