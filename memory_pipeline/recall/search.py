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
more the fewer of the hit's events hold it, words compared as the index stems them (the hit's name, in all of them, weighs nothing; a word
as common as "the" or "have" nothing either); ties keep the busiest day first, then the earlier day."""

from __future__ import annotations

import functools
import math
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    case,
    column,
    delete,
    false,
    func,
    literal_column,
    or_,
    select,
    table,
    text,
    update,
)
from sqlalchemy.sql.elements import BindParameter, ColumnClause

from memory_pipeline.conversation.tables import conversation_summaries
from memory_pipeline.lib import settings
from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.store import Store, watch, world_ingested
from memory_pipeline.lib.store.db import insert_missing
from memory_pipeline.lib.store.tables import conversations, messages
from memory_pipeline.lib.text import COMMON_ZIPF, short_hash, shown, text_problem, zipf
from memory_pipeline.lib.timeutil import day_start, local_date, utcnow
from memory_pipeline.objects.tables import objects_attachments, objects_objects
from memory_pipeline.recall.documents import Document, MemoryKind, world_documents
from memory_pipeline.recall.metric import fts_text, query_terms, stem, stems
from memory_pipeline.recall.tables import FTS_TABLE, recall_documents, recall_index_state
from memory_pipeline.recall.when import named_periods
from memory_pipeline.sleep.tables import autobiographical_memories, semantic_memories
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline.tower.tables import tower_summaries

K_MAX = 100
QUERY_MAX_CHARS = 2000
# On SQLite each world's documents take rowids from a range of their own, [doc_base, doc_base +
# DOC_SPAN), and are indexed by an FTS5 table of the world's own (``fts_table``).
DOC_SPAN = 2**32


def fts_table(doc_base: int) -> str:
    """SQLite: the FTS5 index of the world whose documents start at ``doc_base``. One per world, so
    BM25's corpus statistics (how many documents, their lengths, how many hold each term) are that
    world's alone: another world's writes never move its scores, nor can a caller read them off its
    own (migration 0032)."""
    return f"{FTS_TABLE}_{doc_base // DOC_SPAN}"


def _fts_ddl(name: str) -> str:
    # external content: the text stays in recall_documents; refresh() writes the index explicitly
    return (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5(search_text, content='recall_documents', "
        "content_rowid='doc_id', tokenize='porter unicode61')"
    )


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


def _doc_base(store: Store, world: str) -> int:
    """The first rowid of the world's range (SQLite), given to a new world by one INSERT .. SELECT:
    a statement that opens a write transaction reads the newest commit under the file's write
    lock, so two processes indexing two new worlds at once cannot be given the same range. The
    new state row's empty fingerprint makes the next refresh build the world's documents."""
    st = recall_index_state.c
    with store.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO recall_index_state (world_id, sources_fp, documents, indexed_at, doc_base) "
                "SELECT :world, '', 0, :now, coalesce(max(doc_base), 0) + :span FROM recall_index_state "
                "WHERE true ON CONFLICT (world_id) DO NOTHING"
            ),
            {"world": world, "now": utcnow().isoformat(), "span": DOC_SPAN},
        )
        return int(conn.execute(select(st.doc_base).where(st.world_id == world)).scalar_one())


def _fresh(store: Store, world: str, activity_type: str) -> tuple[bool, int | None]:
    """Whether the world's documents are up to date with its sources (a read, no lock), and its
    rowid base."""
    st = recall_index_state.c
    with store.connect() as conn:
        fp = _sources_fp(conn, world, activity_type)
        row = conn.execute(select(st.sources_fp, st.doc_base).where(st.world_id == world)).first()
    return (row is not None and row.sources_fp == fp), (row.doc_base if row is not None else None)


def refresh(store: Store, world: str, tz: ZoneInfo, activity_type: str, *, force: bool = False) -> int | None:
    """Bring the world's documents up to date: None when they already were, else how many documents
    were written or removed. Idempotent; one transaction."""
    base = None
    if store.dialect == "sqlite":
        # The check alone is a read: only a world that needs rewriting takes the file's write lock,
        # first thing in its transaction (a read transaction turned writer after another commit
        # fails at once instead of waiting its turn).
        fresh, base = _fresh(store, world, activity_type)
        if fresh and not force:
            return None
        if base is None:
            base = _doc_base(store, world)
    with store.begin() as conn:
        if store.dialect == "postgresql":  # two searches of a new world: one builds, the other waits
            key = int(short_hash(["recall_documents", world], 15), 16)
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
        else:
            st = recall_index_state.c
            conn.execute(update(recall_index_state).where(st.world_id == world).values(world_id=st.world_id))
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
        fts = fts_table(base) if base is not None else None
        if fts is not None:  # SQLite: the world's index drops the old texts first (FTS5 needs them)
            conn.execute(text(_fts_ddl(fts)))
            dropped = gone + [doc_id for doc_id, _ in changed]
            for i in range(0, len(dropped), 500):
                olds = conn.execute(select(rd.doc_id, rd.search_text).where(rd.doc_id.in_(dropped[i : i + 500]))).all()
                if olds:
                    conn.execute(
                        text(f"INSERT INTO {fts}({fts}, rowid, search_text) VALUES ('delete', :id, :t)"),
                        [{"id": d, "t": t} for d, t in olds],
                    )
        for i in range(0, len(gone), 500):
            conn.execute(delete(recall_documents).where(rd.doc_id.in_(gone[i : i + 500])))
        changed_rows = [_row(d, now) | {"b_doc_id": doc_id} for doc_id, d in changed]
        if changed_rows:
            values: dict[str, BindParameter[Any]] = {k: bindparam(k) for k in changed_rows[0] if k != "b_doc_id"}
            conn.execute(
                update(recall_documents).where(rd.doc_id == bindparam("b_doc_id")).values(values), changed_rows
            )
        new_rows = [_row(d, now) for d in new]
        if new_rows:
            if base is not None:
                top = conn.execute(select(func.max(rd.doc_id)).where(rd.world_id == world)).scalar()
                first = base if top is None else top + 1
                if first + len(new_rows) > base + DOC_SPAN:
                    raise SearchError(f"world {world!r}: its {DOC_SPAN:,} document ids are used up")
                for i, row in enumerate(new_rows):
                    row["doc_id"] = first + i
            conn.execute(recall_documents.insert(), new_rows)
        if fts is not None and (changed_rows or new_rows):
            indexed = [{"id": r["b_doc_id"], "t": r["search_text"]} for r in changed_rows]
            indexed += [{"id": r["doc_id"], "t": r["search_text"]} for r in new_rows]
            conn.execute(text(f"INSERT INTO {fts}(rowid, search_text) VALUES (:id, :t)"), indexed)
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
    if problem := validate_id(world):  # before any query: a NUL was the driver's ValueError
        raise SearchError(f"world {shown(world)}: {problem}")
    if not isinstance(query, str) or not query.strip():
        raise SearchError("query: must be a non-empty string")
    # A NUL or a lone surrogate was searched as if absent; objects/find refuses it by position too.
    if problem := text_problem(query, QUERY_MAX_CHARS, controls=True):
        raise SearchError(f"query: {problem}")
    base = _up_to_date(store, world, tz, activity_type)
    terms = query_terms(query)
    if not terms:
        return [], 0
    rd = recall_documents.c
    cols = (rd.kind, rd.ref, rd.text, rd.start_at, rd.end_at, rd.event_ids)
    periods = named_periods(query)
    bounds = [(day_start(a, tz), day_start(b + timedelta(days=1), tz)) for a, b in periods]
    # memory of a time the query names ranks before the rest (each part by its score)
    named = or_(false(), *(and_(rd.start_at < hi, func.coalesce(rd.end_at, rd.start_at) >= lo) for lo, hi in bounds))
    in_named = case((named, 1), else_=0)
    if store.dialect == "sqlite":
        assert base is not None  # every world searched has its range and index (refresh)
        name = fts_table(base)
        fts = table(name, column("rowid"))
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        matching = text(f"{name} MATCH :match").bindparams(match=match)
        # The page is ranked inside the full-text index (materialized: as a plain join SQLite's
        # planner may start from the world's index and run one full-text query per document), and
        # only its rows are read from recall_documents: a common word matches thousands of
        # documents, whose texts and lineages were read and sorted to keep ten. The match count
        # (the page's total) comes with it, counted before the LIMIT.
        # FTS5's rank column is bm25() (smaller is better) over the world's own index, usable where
        # a window function is
        rank: ColumnClause[float] = literal_column(f"{name}.rank")
        matches = select(fts.c.rowid.label("doc_id"), (-rank).label("score"), func.count().over().label("total"))
        matches = matches.where(matching)
        if not periods:
            m = matches.order_by(rank, fts.c.rowid).offset(offset).limit(limit).cte("matched")
            m = m.prefix_with("MATERIALIZED")
            q = (
                select(*cols, m.c.score.label("score"), m.c.total)
                .select_from(m.join(recall_documents, rd.doc_id == m.c.doc_id))
                .where(rd.world_id == world)
                .order_by(m.c.score.desc(), rd.doc_id)
            )
        else:  # a named time orders every match: the page is chosen by the matches' times, then read
            m = matches.cte("matched").prefix_with("MATERIALIZED")
            page = (
                select(m.c.doc_id, m.c.score, m.c.total, in_named.label("named"))
                .select_from(m.join(recall_documents, rd.doc_id == m.c.doc_id))
                .where(rd.world_id == world)
                .order_by(in_named.desc(), m.c.score.desc(), m.c.doc_id)
                .offset(offset)
                .limit(limit)
                .subquery()
            )
            q = (
                select(*cols, page.c.score.label("score"), page.c.total)
                .select_from(page.join(recall_documents, rd.doc_id == page.c.doc_id))
                .order_by(page.c.named.desc(), page.c.score.desc(), rd.doc_id)
            )
        counted = select(func.count()).select_from(fts).where(matching)
    else:
        # the expression of the GIN index; to_tsquery syntax cannot appear in a term (query_terms:
        # letters, digits and '_' only)
        english: ColumnClause[Any] = literal_column("'english'::regconfig")
        tsv = func.to_tsvector(english, rd.search_text)
        tsq = func.to_tsquery(english, " | ".join(terms))
        score = func.ts_rank(tsv, tsq)
        q = (
            select(*cols, score.label("score"), func.count().over().label("total"))
            .where(rd.world_id == world, tsv.op("@@")(tsq))
            .order_by(in_named.desc(), literal_column("score").desc(), rd.doc_id)
            .offset(offset)
            .limit(limit)
        )
        counted = select(func.count()).where(rd.world_id == world, tsv.op("@@")(tsq))
    with store.connect() as conn:
        rows = conn.execute(q).all()
        # past the last page no row carries the total: counted apart
        total = (rows[0].total if rows else conn.execute(counted).scalar_one() if offset else 0) if count else 0
        lineage = [tuple(r.event_ids) for r in rows]
        events = _events(conn, world, {e for ids in lineage if len(ids) > 1 for e in ids})
    wanted = {stem(t) for t in terms if zipf(t) < COMMON_ZIPF}
    hits = [
        Hit(
            MemoryKind(r.kind),
            r.ref,
            r.text,
            r.start_at.astimezone(tz) if r.start_at else None,  # in the zone, as every time a reader meets
            r.end_at.astimezone(tz) if r.end_at else None,
            by_relevance(ids, events, wanted, tz, periods) if len(ids) > 1 else ids,
            float(r.score),
        )
        for r, ids in zip(rows, lineage, strict=True)
    ]
    return hits, int(total)


# (store url, world, activity type) -> the store's stamp when the world's documents were last seen
# up to date, and the world's rowid base
_checked: dict[tuple[str, str, str], tuple[watch.Stamp, int | None]] = {}


def _up_to_date(store: Store, world: str, tz: ZoneInfo, activity_type: str) -> int | None:
    """Refuse an unknown world, bring its documents up to date, and return its rowid base (SQLite).
    While nothing has been committed to the store's file since the last search of the world (its
    stamp unchanged), neither can have changed: the check's sixteen aggregates are skipped. The
    stamp is read before the check, so a commit that lands during it changes the stamp and the next
    search checks again (as it also does once after a refresh's own write)."""
    key = (store.url, world, activity_type)
    stamp = watch.stamp(store)
    seen = _checked.get(key)
    if stamp is not None and seen is not None and seen[0] == stamp:
        return seen[1]
    if not world_ingested(store, world):
        raise SearchError(f"world {world!r}: no such world")
    refresh(store, world, tz, activity_type)
    base = None
    if store.dialect == "sqlite":
        st = recall_index_state.c
        with store.connect() as conn:
            base = conn.execute(select(st.doc_base).where(st.world_id == world)).scalar()
    if stamp is not None:
        _checked[key] = (stamp, base)
    return base


_IN_BATCH = 500
_EVENTS_KEPT = 200_000


Event = tuple[datetime, frozenset[str]]  # a raw event's time and its words


class _EventCache:
    """Raw events are append-only and never change: each process keeps the time and words of the
    events its searches read (newest use kept, at most ``_EVENTS_KEPT``), per store and world."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: OrderedDict[tuple[str, str, str], Event] = OrderedDict()

    def get(self, url: str, world: str, ids: list[str]) -> tuple[dict[str, Event], list[str]]:
        found: dict[str, Event] = {}
        missing: list[str] = []
        with self.lock:
            for e in ids:
                item = self.items.get((url, world, e))
                if item is None:
                    missing.append(e)
                else:
                    self.items.move_to_end((url, world, e))
                    found[e] = item
        return found, missing

    def put(self, url: str, world: str, events: dict[str, Event]) -> None:
        with self.lock:
            for e, item in events.items():
                self.items[(url, world, e)] = item
            while len(self.items) > _EVENTS_KEPT:
                self.items.popitem(last=False)


_event_cache = _EventCache()


_m, _c = messages.c, conversations.c
_EVENTS = (
    select(_m.message_id, _m.at, _m.content)
    .join(conversations, _c.conversation_id == _m.conversation_id)
    .where(_c.world_id == bindparam("world"), _m.message_id.in_(bindparam("ids", expanding=True)))
)
# SQLite's planner drove this from the world's conversations, scanning each one's messages for the
# ids (every message of the world, per search); CROSS JOIN makes it look the ids up first.
_EVENTS_SQLITE = (
    text(
        "SELECT m.message_id, m.at, m.content FROM messages AS m CROSS JOIN conversations AS c"
        " ON c.conversation_id = m.conversation_id WHERE m.message_id IN :ids AND c.world_id = :world"
    )
    .bindparams(bindparam("ids", expanding=True))
    .columns(_m.message_id, _m.at, _m.content)
)


def _events(conn: Connection, world: str, ids: set[str]) -> dict[str, Event]:
    """Time and words of the world's raw events among ``ids``."""
    url = str(conn.engine.url)
    out, wanted = _event_cache.get(url, world, sorted(ids))
    read: dict[str, Event] = {}
    q = _EVENTS_SQLITE if conn.dialect.name == "sqlite" else _EVENTS
    for i in range(0, len(wanted), _IN_BATCH):
        rows = conn.execute(q, {"world": world, "ids": wanted[i : i + _IN_BATCH]})
        read.update((mid, (at, event_words(content or ""))) for mid, at, content in rows)
    _event_cache.put(url, world, read)
    return out | read


def event_words(content: str) -> frozenset[str]:
    """The words of a raw event as :func:`by_relevance` matches them against a query's: the
    index's stems."""
    return frozenset(stems(content))


def by_relevance(
    ids: tuple[str, ...],
    events: dict[str, Event],
    terms: set[str],
    tz: ZoneInfo,
    periods: list[tuple[date, date]] | tuple[()] = (),
) -> tuple[str, ...]:
    """``ids`` with the events of a period the query names first (``periods``: first and last day),
    then those holding the query's rarest words (within ``ids``); ties: the busiest day first, then
    the earlier day, then the order given. ``events``: each event's time and :func:`event_words`;
    ``terms`` are stems, as the index has them ("greyhounds" holds "greyhound")."""
    empty: frozenset[str] = frozenset()
    held = {e: events[e][1] & terms if e in events else empty for e in ids}
    df = Counter(t for words in held.values() for t in words)
    n = len(ids)
    idf = {t: math.log(n / d) for t, d in df.items()}  # 0 for a word every event holds
    day = {e: local_date(events[e][0], tz) if e in events else date.max for e in ids}
    busy = Counter(day.values())
    named = {e: any(a <= day[e] <= b for a, b in periods) for e in ids}
    return tuple(sorted(ids, key=lambda e: (not named[e], -math.fsum(idf[t] for t in held[e]), -busy[day[e]], day[e])))
