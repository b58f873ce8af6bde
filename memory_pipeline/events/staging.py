"""The set-based write of validated events (what ``ingest.ingest_file`` and ``ingest_events`` run).

Rows stream into a staging table private to the writing transaction (a temporary table; loaded
with COPY on PostgreSQL, with batched executemany on SQLite), so memory holds one batch, never
the file. Everything after the load is a statement over the whole set: repeats inside the file,
conflicts with stored rows, then worlds, conversations and messages written with
``INSERT … SELECT … ON CONFLICT DO NOTHING``. The load, the checks and the writes are one
transaction, so a file is written whole or not at all; a redo (a race, a transient error) loads
the rows again from their source.

A staged row is a tuple in ``COLUMNS`` order; ``pos`` is the line number of a JSONL file or the
index of an event in a list, and only orders rows and locates refusals."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    true,
    update,
    values,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from memory_pipeline.lib.store import insert_missing
from memory_pipeline.lib.store.tables import UTCDateTime, conversations, messages, worlds
from memory_pipeline.lib.text import shown

# (pos, message_id, world_id, world_name, conversation_id, conversation_title, platform, debug,
#  role, content, tool_calls as the store's JSON text, at (aware UTC; None: the line gave none), source)
Row = tuple[int, str, str, str | None, str, str | None, str, bool, str, str, str, datetime | None, str]
COLUMNS = (
    "pos",
    "message_id",
    "world_id",
    "world_name",
    "conversation_id",
    "conversation_title",
    "platform",
    "debug",
    "role",
    "content",
    "tool_calls",
    "at",
    "source",
)
SQLITE_BATCH = 5000
COPY_CHUNK_CHARS = 1 << 20

# Not on the store's metadata: these exist only inside one ingest transaction.
_staging_metadata = MetaData()
STAGING = Table(
    "ingest_staging",
    _staging_metadata,
    Column("pos", Integer, nullable=False),
    Column("message_id", String, nullable=False),
    Column("world_id", String, nullable=False),
    Column("world_name", String),
    Column("conversation_id", String, nullable=False),
    Column("conversation_title", String),
    Column("platform", String, nullable=False),
    Column("debug", Boolean, nullable=False),
    Column("role", String, nullable=False),
    Column("content", Text, nullable=False),
    Column("tool_calls", Text, nullable=False),
    Column("at", UTCDateTime),  # null: the line gave no timestamp (the ingest time is written)
    Column("source", String, nullable=False),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DROP",
)
# One row per conversation with fresh messages: its first line, and whether it was stored before.
STAGED_CONVS = Table(
    "ingest_staging_convs",
    _staging_metadata,
    Column("conversation_id", String, primary_key=True),
    Column("pos", Integer, nullable=False),
    Column("stored", Boolean, nullable=False),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DROP",
)


def tool_calls_json(calls: list[Any] | None) -> str:
    """The text the store's JSON column holds for ``calls`` (SQLAlchemy's serializer: json.dumps;
    None is the JSON ``null``, as the Core insert of a None value writes it)."""
    return json.dumps(calls)


def event_row(event: dict[str, Any], pos: int) -> Row:
    """A validated event (``ingest.validate_event``) as a staged row."""
    return (
        pos,
        event["message_id"],
        event["world_id"],
        event["world_name"],
        event["conversation_id"],
        event["conversation_title"],
        event["platform"],
        event["debug"],
        event["role"],
        event["content"],
        tool_calls_json(event["tool_calls"]),
        event["at"],
        event["source"],
    )


# COPY's text format: backslash, tab, newline and carriage return are escaped; NUL never reaches
# here (the validator refuses it).
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def copy_text(value: str | None) -> str:
    if value is None:
        return "\\N"
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_COPY_ESCAPES)
    return value


def copy_line(row: Row) -> str:
    """One row in COPY text format (ids and roles need no escaping: their alphabet has no
    backslash, tab or line break)."""
    pos, mid, wid, wname, cid, title, platform, debug, role, content, calls, at, source = row
    return (
        f"{pos}\t{mid}\t{wid}\t{copy_text(wname)}\t{cid}\t{copy_text(title)}\t{copy_text(platform)}\t"
        f"{'t' if debug else 'f'}\t{role}\t{copy_text(content)}\t{copy_text(calls)}\t{_copy_at(at)}\t"
        f"{copy_text(source)}\n"
    )


def _copy_at(at: datetime | None) -> str:
    return "\\N" if at is None else at.isoformat()


class CopyReader:
    """A file-like view of rows for psycopg2's ``copy_expert``: rows are formatted as COPY reads
    them, so the server ingests one chunk while the next one is parsed and validated."""

    def __init__(self, rows: Iterable[Row]):
        self._rows = iter(rows)
        self.count = 0

    def read(self, size: int = -1) -> str:
        want = size if size and size > 0 else COPY_CHUNK_CHARS
        out: list[str] = []
        n = 0
        for row in self._rows:
            line = copy_line(row)
            out.append(line)
            n += len(line)
            self.count += 1
            if n >= want:
                break
        return "".join(out)

    readline = read


def load(conn: Connection, rows: Iterable[Row]) -> int:
    """Create the staging tables in this transaction and load ``rows``; the number loaded."""
    if conn.dialect.name == "sqlite":
        # SQLite runs DDL outside the implicit transaction: a table left by an earlier ingest on
        # this pooled connection is dropped first.
        for table in (STAGING, STAGED_CONVS):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS temp.{table.name}")
    STAGING.create(conn)
    STAGED_CONVS.create(conn)
    if conn.dialect.name == "postgresql":
        reader = CopyReader(rows)
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.copy_expert(f"COPY {STAGING.name} ({', '.join(COLUMNS)}) FROM STDIN", reader, size=COPY_CHUNK_CHARS)
        finally:
            cursor.close()
        return reader.count
    n = 0
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(dict(zip(COLUMNS, row, strict=True)))
        if len(batch) >= SQLITE_BATCH:
            conn.execute(STAGING.insert(), batch)
            n += len(batch)
            batch = []
    if batch:
        conn.execute(STAGING.insert(), batch)
        n += len(batch)
    return n


def drop(conn: Connection) -> None:
    """SQLite keeps temporary tables for the connection's life; PostgreSQL drops them at commit."""
    if conn.dialect.name == "sqlite":
        for table in (STAGING, STAGED_CONVS):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS temp.{table.name}")


Locate = Callable[[int], tuple[str, int | str]]  # pos -> (file, where)


@dataclass
class Problem:
    """A refusal found by a set-based check: the row's pos, field and problem (located by the caller)."""

    pos: int
    field: str
    problem: str


@dataclass
class FileRepeats:
    """The outcome of the in-file check: rows refused, rows dropped as repeats of an earlier line."""

    problems: list[Problem] = field(default_factory=list)
    dropped: int = 0


def _meta(world: str, platform: str, debug: bool) -> tuple[str, str, bool]:
    return world, platform, bool(debug)


def file_repeats(conn: Connection) -> FileRepeats:
    """Repeats inside the staged rows, exactly as a sequential pass over the file decides them:
    a repeated message_id that is the same event (``difference``) is dropped, another refused
    ("repeats {source} with different content", or the fields that differ); a line without a
    timestamp agrees with any time, and the first line of an id takes the time a later one gives; a conversation keeps the
    (world, platform, debug) of its first accepted line. Only rows whose id repeats or whose
    conversation has more than one (world, platform, debug) can be affected: those are read (in
    file order) and decided one by one; every other row is accepted without being read."""
    s = STAGING.c
    repeated_ids = select(s.message_id).group_by(s.message_id).having(func.count() > 1)
    mixed_convs = (
        select(s.conversation_id)
        .group_by(s.conversation_id)
        .having(
            or_(
                func.count(s.world_id.distinct()) > 1,
                func.count(s.platform.distinct()) > 1,
                func.count(s.debug.distinct()) > 1,
            )
        )
    )
    involved = conn.execute(
        select(s.pos, s.message_id, s.world_id, s.conversation_id, s.platform, s.debug, s.role, s.content, s.at)
        .add_columns(s.tool_calls, s.source)
        .where(or_(s.message_id.in_(repeated_ids), s.conversation_id.in_(mixed_convs)))
        .order_by(s.pos)
    ).all()
    out = FileRepeats()
    if not involved:
        return out
    # id -> its first line's body, where (world, conversation, tool calls), source and position
    seen: dict[str, tuple[Body, tuple[str, str, str], str, int]] = {}
    conv_meta: dict[str, tuple[str, str, bool]] = {}
    gone: list[int] = []
    timed: dict[int, datetime] = {}  # kept row -> the time a later line of its id gives
    for pos, mid, wid, cid, platform, debug, role, content, at, calls, source in involved:
        body = (content, role, at)
        meta = _meta(wid, platform, debug)
        prev = seen.get(mid)
        if prev is not None:
            gone.append(pos)
            (pw, pc, pcalls) = prev[1]
            differ = difference(
                same_body(prev[0], body),
                [("world_id", pw, wid), ("conversation_id", pc, cid)],
                _same_calls(calls, pcalls),
            )
            if differ:
                out.problems.append(
                    Problem(pos, "message_id", f"{shown(mid)} repeats {prev[2]} with different {differ}")
                )
            else:
                out.dropped += 1
                if prev[0][2] is None and at is not None:  # the event's time, whichever line gives it
                    seen[mid] = ((content, role, at), prev[1], source, prev[3])
                    timed[prev[3]] = at
            continue
        known = conv_meta.get(cid)
        if known is not None and known != meta:
            gone.append(pos)
            out.problems.append(
                Problem(
                    pos,
                    "conversation_id",
                    f"{shown(cid)} has (world, platform, debug) {meta}, earlier lines say {known}",
                )
            )
            continue
        seen[mid] = (body, (wid, cid, calls), source, pos)
        conv_meta.setdefault(cid, meta)
    delete_positions(conn, gone)
    if timed:
        conn.execute(
            update(STAGING).where(STAGING.c.pos == bindparam("p")).values(at=bindparam("a")),
            [{"p": p, "a": a} for p, a in timed.items()],
        )
    return out


def delete_positions(conn: Connection, positions: list[int]) -> int:
    n = 0
    for i in range(0, len(positions), 1000):
        n += conn.execute(STAGING.delete().where(STAGING.c.pos.in_(positions[i : i + 1000]))).rowcount
    return n


def first_ids(conn: Connection, limit: int = 3) -> list[str]:
    return list(conn.execute(select(STAGING.c.message_id).order_by(STAGING.c.pos).limit(limit)).scalars())


def conversation_conflicts(conn: Connection) -> list[Problem]:
    """Staged rows whose conversation is stored with another (world, platform, debug): every row
    of such a conversation, in file order (the staged rows of one conversation agree by now), each
    naming both sides (a line's platform may be the default, 'local', where it gave none)."""
    s, c = STAGING.c, conversations.c
    staged = (
        select(
            s.conversation_id,
            func.min(s.world_id).label("world_id"),
            func.min(s.platform).label("platform"),
            func.max(case((s.debug, 1), else_=0)).label("debug"),
        )
        .group_by(s.conversation_id)
        .subquery()
    )
    known = {
        cid: (_meta(w, p, d), _meta(sw, sp, sd))
        for cid, w, p, d, sw, sp, sd in conn.execute(
            select(staged.c.conversation_id, c.world_id, c.platform, c.debug)
            .add_columns(staged.c.world_id, staged.c.platform, staged.c.debug)
            .join(conversations, c.conversation_id == staged.c.conversation_id)
            .where(
                or_(
                    staged.c.world_id != c.world_id,
                    staged.c.platform != c.platform,
                    staged.c.debug != case((c.debug, 1), else_=0),
                )
            )
        )
    }
    if not known:
        return []
    out = []
    ids = sorted(known)
    for i in range(0, len(ids), 1000):
        rows = conn.execute(
            select(s.pos, s.conversation_id).where(s.conversation_id.in_(ids[i : i + 1000])).order_by(s.pos)
        ).all()
        out += [
            Problem(
                pos,
                "conversation_id",
                f"{cid!r} is stored with (world, platform, debug) {known[cid][0]}, this line says {known[cid][1]}",
            )
            for pos, cid in rows
        ]
    out.sort(key=lambda p: p.pos)
    return out


Body = tuple[str, str, datetime | None]  # a line's content, role and time (None: it gave none)


def same_body(a: Body, b: Body) -> bool:
    """Role and content agree, and so do the times where both lines give one."""
    return a[:2] == b[:2] and (a[2] is None or b[2] is None or a[2] == b[2])


def difference(body_agrees: bool, fields: list[tuple[str, object, object]], calls_agree: bool) -> str:
    """What two lines of one id disagree on ("" when they are one event; ``ingest.event_difference``):
    "content" (role, content or time: ``same_body``), each of ``fields`` (name, one's value, the
    other's) that differs, then "tool_calls"."""
    out = [] if body_agrees else ["content"]
    out += [name for name, x, y in fields if x != y]
    if not calls_agree:
        out.append("tool_calls")
    return ", ".join(out[:-1]) + " and " + out[-1] if len(out) > 1 else "".join(out)


def _same_calls(staged: str, other: str | object) -> bool:
    """Two lines' tool calls (the staged row's JSON text, and another's text or, stored, its value)
    are the same value: two texts of one value (its keys in another order) agree."""
    if isinstance(other, str) and other == staged:
        return True
    return bool(json.loads(staged) == (json.loads(other) if isinstance(other, str) else other))


def _body_differs() -> Any:
    s, m = STAGING.c, messages.c
    return or_(s.content != m.content, s.role != m.role, and_(s.at.is_not(None), s.at != m.at))


def _differs() -> Any:
    """A staged row may be another event than the stored one of its id (``ingest.event_difference``;
    tool calls whose texts differ are compared as values after: ``_stored_difference``). The stored
    conversation's world is the conversations' check (``conversation_conflicts``)."""
    s, m = STAGING.c, messages.c
    stored_calls = func.coalesce(cast(m.tool_calls, Text), "null")
    return or_(_body_differs(), s.conversation_id != m.conversation_id, s.tool_calls != stored_calls)


def _stored_difference(conn: Connection) -> list[Problem]:
    """The staged rows that are another event than the stored one of their id, in file order, each
    naming what differs."""
    s, m = STAGING.c, messages.c
    q = (
        select(s.pos, s.message_id, _body_differs().label("body"), s.conversation_id, m.conversation_id, s.tool_calls)
        .add_columns(m.tool_calls)
        .select_from(STAGING.join(messages, m.message_id == s.message_id))
        .where(_differs())
        .order_by(s.pos)
    )
    out = []
    for pos, mid, body, conv, stored_conv, calls, stored_calls in conn.execute(q):
        differ = difference(not body, [("conversation_id", conv, stored_conv)], _same_calls(calls, stored_calls))
        if differ:
            out.append(Problem(pos, "message_id", f"{mid!r} is already stored with different {differ}"))
    return out


def stored_messages(conn: Connection) -> tuple[int, list[Problem]]:
    """(staged rows whose id is stored, those of them stored as another event, in file order)."""
    s, m = STAGING.c, messages.c
    joined = STAGING.join(messages, m.message_id == s.message_id)
    n = conn.execute(select(func.count()).select_from(joined)).scalar_one()
    if not n:
        return 0, []
    return n, _stored_difference(conn)


def drop_stored_and_conflicting(conn: Connection, conflicting_convs: list[str]) -> int:
    """Leave only fresh rows: drop rows whose id is stored and rows of conflicting conversations."""
    s = STAGING.c
    n = conn.execute(STAGING.delete().where(exists().where(messages.c.message_id == s.message_id))).rowcount
    for i in range(0, len(conflicting_convs), 1000):
        n += conn.execute(STAGING.delete().where(s.conversation_id.in_(conflicting_convs[i : i + 1000]))).rowcount
    return n


def conversations_of(conn: Connection, positions: list[int]) -> list[str]:
    s = STAGING.c
    out: set[str] = set()
    for i in range(0, len(positions), 1000):
        out.update(conn.execute(select(s.conversation_id).where(s.pos.in_(positions[i : i + 1000]))).scalars())
    return sorted(out)


def _insert(conn: Connection, table: Table) -> Any:
    return (postgresql if conn.dialect.name == "postgresql" else sqlite).insert(table)


def write_worlds(conn: Connection, now: datetime) -> int:
    """Worlds of the fresh rows: created with the name of their first line that has one (else the
    id), first_event_at lowered to their earliest fresh message. One grouped read, linear in
    rows; rows in key order so overlapping ingests lock them in the same order."""
    s = STAGING.c
    groups = conn.execute(
        select(
            s.world_id,
            func.min(func.coalesce(s.at, literal(now, UTCDateTime))),
            func.min(case((s.world_name.is_not(None), s.pos))),
        )
        .group_by(s.world_id)
        .order_by(s.world_id)
    ).all()
    if not groups:
        return 0
    name_pos = [p for _, _, p in groups if p is not None]
    names: dict[int, str] = {}
    for i in range(0, len(name_pos), 1000):
        names.update(conn.execute(select(s.pos, s.world_name).where(s.pos.in_(name_pos[i : i + 1000]))).tuples().all())
    rows = [
        {"world_id": w, "name": names[p] if p is not None else w, "created_at": now, "first_event_at": at}
        for w, at, p in groups
    ]
    created = len(insert_missing(conn, worlds, rows, "world_id"))
    pairs = [(w, at) for w, at, _ in groups]
    lower = or_(worlds.c.first_event_at.is_(None), worlds.c.first_event_at > bindparam("first_at"))
    if conn.dialect.name != "postgresql":  # one writer at a time; no UPDATE … FROM (VALUES) alias here
        conn.execute(
            update(worlds)
            .where(worlds.c.world_id == bindparam("w"))
            .where(lower)
            .values(first_event_at=bindparam("first_at")),
            [{"w": w, "first_at": at} for w, at in pairs],
        )
        return created
    conn.execute(  # overlapping ingests lock the worlds in one order
        select(worlds.c.world_id)
        .where(worlds.c.world_id.in_([w for w, _ in pairs]))
        .order_by(worlds.c.world_id)
        .with_for_update()
    )
    firsts = values(Column("world_id", String), Column("first_at", UTCDateTime), name="firsts").data(pairs)
    conn.execute(
        update(worlds)
        .where(worlds.c.world_id == firsts.c.world_id)
        .where(or_(worlds.c.first_event_at.is_(None), worlds.c.first_event_at > firsts.c.first_at))
        .values(first_event_at=firsts.c.first_at)
    )
    return created


@dataclass
class ConversationWrite:
    created: int
    raced: bool  # a conversation this transaction meant to create was stored by another first


def write_conversations(conn: Connection, now: datetime) -> ConversationWrite:
    """Conversations of the fresh rows that are not stored yet, from their first line (in key
    order); ``raced`` when fewer were created than were missing a moment before."""
    s, sc = STAGING.c, STAGED_CONVS.c
    conn.execute(
        _insert(conn, STAGED_CONVS).from_select(
            ["conversation_id", "pos", "stored"],
            select(
                s.conversation_id,
                func.min(s.pos),
                exists().where(conversations.c.conversation_id == s.conversation_id),
            ).group_by(s.conversation_id),
        )
    )
    missing = conn.execute(select(func.count()).select_from(STAGED_CONVS).where(~sc.stored)).scalar_one()
    if not missing:
        return ConversationWrite(0, False)
    first = select(
        s.conversation_id,
        s.world_id,
        s.platform,
        s.debug,
        s.conversation_title,
        literal(now, UTCDateTime),
        literal(now, UTCDateTime),
    ).join(STAGED_CONVS, and_(sc.pos == s.pos, ~sc.stored))
    stmt = _insert(conn, conversations).from_select(
        ["conversation_id", "world_id", "platform", "debug", "title", "created_at", "updated_at"],
        first.where(true()).order_by(s.conversation_id),
    )
    created = conn.execute(stmt.on_conflict_do_nothing(index_elements=["conversation_id"])).rowcount
    return ConversationWrite(created, created < missing)


def drop_conversations(conn: Connection, conv_ids: list[str]) -> int:
    s = STAGING.c
    n = 0
    for i in range(0, len(conv_ids), 1000):
        chunk = conv_ids[i : i + 1000]
        n += conn.execute(STAGING.delete().where(s.conversation_id.in_(chunk))).rowcount
        conn.execute(STAGED_CONVS.delete().where(STAGED_CONVS.c.conversation_id.in_(chunk)))
    return n


def touch_conversations(conn: Connection, now: datetime, raced: bool) -> None:
    """updated_at of the conversations that got fresh messages and were stored before (the
    conversations this transaction created carry ``now`` already; after a race, all of them)."""
    sc = STAGED_CONVS.c
    staged = select(sc.conversation_id) if raced else select(sc.conversation_id).where(sc.stored)
    conn.execute(update(conversations).where(conversations.c.conversation_id.in_(staged)).values(updated_at=now))


def write_messages(conn: Connection, now: datetime) -> int:
    """The fresh rows into messages in id order (overlapping ingests lock keys in the same
    order); a row another transaction stored meanwhile is skipped. The number inserted.

    On PostgreSQL a plain INSERT is tried first under a savepoint (no row of the set is stored:
    they were checked a moment ago, so this is the common case, and it spares the speculative
    insertion ON CONFLICT pays per row); if a concurrent ingest stored one of the ids since, the
    savepoint is rolled back and the rows go in with ON CONFLICT DO NOTHING."""
    s = STAGING.c
    tool_calls = func.cast(s.tool_calls, postgresql.JSON) if conn.dialect.name == "postgresql" else s.tool_calls
    ingested = literal(now, UTCDateTime)
    rows = (
        select(
            s.message_id,
            s.conversation_id,
            s.role,
            s.content,
            tool_calls,
            func.coalesce(s.at, ingested),
            ingested,
            s.source,
            case((s.at.is_(None), true()), else_=null()),
        )
        .where(true())
        .order_by(s.message_id)
    )
    stmt = _insert(conn, messages).from_select(
        [
            "message_id",
            "conversation_id",
            "role",
            "content",
            "tool_calls",
            "at",
            "ingested_at",
            "source",
            "at_from_ingest",
        ],
        rows,
    )
    if conn.dialect.name == "postgresql":
        savepoint = conn.begin_nested()
        try:
            inserted = int(conn.execute(stmt).rowcount)
        except IntegrityError as exc:
            savepoint.rollback()
            if getattr(exc.orig, "pgcode", None) != UNIQUE_VIOLATION:
                raise
        else:
            savepoint.commit()
            return inserted
    return int(conn.execute(stmt.on_conflict_do_nothing(index_elements=["message_id"])).rowcount)


UNIQUE_VIOLATION = "23505"


def written_at_ingest(conn: Connection, now: datetime) -> int:
    """Messages this write stored with the ingest time for lack of a timestamp."""
    s, m = STAGING.c, messages.c
    if conn.execute(select(s.pos).where(s.at.is_(None)).limit(1)).first() is None:
        return 0
    joined = STAGING.join(messages, m.message_id == s.message_id)
    return int(
        conn.execute(
            select(func.count())
            .select_from(joined)
            .where(s.at.is_(None), m.at_from_ingest.is_(True), m.ingested_at == literal(now, UTCDateTime))
        ).scalar_one()
    )


def raced_messages(conn: Connection) -> list[Problem]:
    """Fresh rows a concurrent ingest stored first with another body (the rows this transaction
    inserted are its own, so they never differ)."""
    return _stored_difference(conn)
