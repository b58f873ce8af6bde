"""The direct write of a file whose lines are all new (what ``ingest.ingest_file`` tries first on
PostgreSQL).

The staging path (``events.staging``) loads every line into a staging table, then checks and
writes set-based: right for any file, but the server handles every row twice (into the staging
table, then into ``messages``). A file whose lines are all new needs none of those checks, and the
store proves it as the rows go in: they are COPYed straight into ``messages``, chunk by chunk, and
its primary key refuses an id that is stored already or repeated in the file. Per chunk, set-based
and in key order: one statement creates the chunk's missing worlds (named by their first line
that has a name), one lowers the ``first_event_at`` of the others, one creates the missing
conversations (from their first line), one reads the ones that existed (their (world, platform,
debug) must be the chunk's), one touches those stored before this ingest, one binary COPY writes
the messages. The first chunk's ids are looked up before anything is written, so a file ingested
again falls back at once.

Anything else raises ``Fallback`` and nothing is left: a line without a timestamp, a repeat or an
id stored before (refused by the primary key), a conversation whose (world, platform, debug)
disagrees, a bad line when bad lines are not skipped, any row the store refuses. The caller rolls the transaction back whole and
sends the file the staging path, which words every refusal and tells duplicates from conflicts.
So the stored rows, the counts and the refusals are the staging path's; this is only faster.

A thread reads ahead (parses, validates and formats the next chunk while this one is written).
Memory holds at most three chunks (``CHUNK_ROWS`` lines each), plus the ids of the worlds this
write created without a name (a later line may name them), at most ``MAX_UNNAMED_WORLDS``."""

from __future__ import annotations

import io
import queue
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg2  # type: ignore[import-untyped]  # no stubs in the lock: its cursor is Any here
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from memory_pipeline.events.staging import COPY_CHUNK_CHARS, Row
from memory_pipeline.lib.store.tables import conversations, messages, worlds

CHUNK_ROWS = 20_000
FIRST_CHUNK_ROWS = 1_000
Tick = Callable[[str, int, int], None]  # (phase, done, total): ``ingest.Progress``
MAX_UNNAMED_WORLDS = 100_000

_W, _C, _M = worlds.name, conversations.name, messages.name
_CREATE_WORLDS = f"""
INSERT INTO {_W} (world_id, name, created_at, first_event_at)
SELECT w, coalesce(n, w), %(now)s, a FROM json_to_recordset(%(rows)s::json) AS v(w text, n text, a timestamptz)
ORDER BY w
ON CONFLICT (world_id) DO NOTHING
RETURNING world_id"""
_NAME_WORLDS = f"""
UPDATE {_W} SET name = v.n FROM json_to_recordset(%(rows)s::json) AS v(w text, n text) WHERE {_W}.world_id = v.w"""
_LOWER_FIRST_EVENT = f"""
UPDATE {_W} SET first_event_at = v.a FROM json_to_recordset(%(rows)s::json) AS v(w text, a timestamptz)
WHERE {_W}.world_id = v.w AND ({_W}.first_event_at IS NULL OR {_W}.first_event_at > v.a)"""
_CREATE_CONVERSATIONS = f"""
INSERT INTO {_C} (conversation_id, world_id, platform, debug, title, created_at, updated_at)
SELECT c, w, p, d, t, %(now)s, %(now)s
FROM json_to_recordset(%(rows)s::json) AS v(c text, w text, p text, d boolean, t text)
ORDER BY c
ON CONFLICT (conversation_id) DO NOTHING
RETURNING conversation_id"""
_READ_CONVERSATIONS = f"""
SELECT conversation_id, world_id, platform, debug, updated_at = %(now)s FROM {_C} WHERE conversation_id = ANY(%(c)s)"""
_TOUCH_CONVERSATIONS = f"""
UPDATE {_C} SET updated_at = %(now)s WHERE conversation_id = ANY(%(c)s)"""
_ANY_STORED = f"SELECT EXISTS (SELECT 1 FROM {_M} WHERE message_id = ANY(%(m)s))"
_COPY_MESSAGES = (
    f"COPY {_M} (message_id, conversation_id, role, content, tool_calls, at, ingested_at, source) "
    "FROM STDIN WITH (FORMAT binary)"
)


class Fallback(Exception):
    """The file is not all new, or the store refused a row: roll back, take the staging path."""


@dataclass
class Written:
    inserted: int = 0
    new_worlds: int = 0
    new_conversations: int = 0


@dataclass
class _Chunk:
    """Up to CHUNK_ROWS rows: their messages as one binary COPY, and per world and conversation
    what their first line says (a world's name: its first line that has one; its earliest message)."""

    data: bytes = b""
    rows: int = 0
    ids: set[str] = field(default_factory=set)
    worlds: dict[str, list[Any]] = field(default_factory=dict)  # world_id -> [name | None, earliest at]
    conversations: dict[str, tuple[str, str, bool, str | None]] = field(default_factory=dict)


# COPY's binary format: a header, per row the field count and each field as length and bytes, a
# trailer. The server reads values as they are stored (text as UTF-8 in the connection's encoding,
# json as its text, timestamptz as microseconds since 2000-01-01 UTC) instead of parsing text: it
# is the side that bounds the write, so the formatting is done here (the reading thread).
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_COPY_TRAILER = struct.pack(">h", -1)
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _chunks(rows: Iterator[Row], ingested_at: datetime) -> Iterator[_Chunk]:
    """``rows`` in chunks of FIRST_CHUNK_ROWS, doubling up to CHUNK_ROWS (the writing starts
    soon, then each chunk pays its statements over many rows); a repeated id or a conversation
    with two (world, platform, debug) in one chunk is Fallback (across chunks the store finds them)."""
    pack, epoch, us = struct.pack, _PG_EPOCH, _MICROSECOND
    ingested = (ingested_at - epoch) // us
    size = FIRST_CHUNK_ROWS
    while True:
        size, limit = min(2 * size, CHUNK_ROWS), size
        chunk = _Chunk()
        parts = [_COPY_HEADER]
        add = parts.append
        ids = chunk.ids
        worlds_, convs = chunk.worlds, chunk.conversations
        for _pos, mid, wid, wname, cid, title, platform, debug, role, content, calls, at, source in rows:
            if mid in ids or at is None:  # a line without a timestamp: the staging path writes it
                raise Fallback
            ids.add(mid)
            conv = convs.get(cid)
            if conv is None:
                convs[cid] = (wid, platform, debug, title)
            elif conv[0] != wid or conv[1] != platform or conv[2] is not debug:
                raise Fallback
            world = worlds_.get(wid)
            if world is None:
                worlds_[wid] = [wname, at]
            else:
                if world[0] is None:
                    world[0] = wname
                if at < world[1]:
                    world[1] = at
            m, c, r, t, j, s = (
                mid.encode(),
                cid.encode(),
                role.encode(),
                content.encode(),
                calls.encode(),
                source.encode(),
            )
            lm, lc, lr, lt, lj, ls = len(m), len(c), len(r), len(t), len(j), len(s)
            add(
                pack(
                    f">hi{lm}si{lc}si{lr}si{lt}si{lj}siqiqi{ls}s",
                    8,
                    lm, m, lc, c, lr, r, lt, t, lj, j,
                    8, (at - epoch) // us,
                    8, ingested,
                    ls, s,
                )
            )  # fmt: skip
            if len(parts) > limit:
                break
        else:
            if len(parts) > 1:
                chunk.rows = len(parts) - 1
                add(_COPY_TRAILER)
                chunk.data = b"".join(parts)
                yield chunk
            return
        chunk.rows = len(parts) - 1
        add(_COPY_TRAILER)
        chunk.data = b"".join(parts)
        yield chunk


# The writer waits on the server with the GIL released, and takes it back from the reading thread
# each time an answer comes (a dozen times a chunk, the COPY's pieces included). At CPython's
# default switch interval (5 ms) that wait was a fifth of the ingest: 102k messages in 3.08 s at
# 5 ms, 2.46 s at 0.1 ms (medians of 5, alternating); 1 ms and 0.5 ms gained little, 0.02 ms no more.
SWITCH_INTERVAL = 1e-4


class _SwitchInterval:
    """The process's switch interval at most SWITCH_INTERVAL while any direct write runs (it is
    process-wide: the first write in lowers it, the last one out restores it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.saved = sys.getswitchinterval()


_switch = _SwitchInterval()


@contextmanager
def _short_switch_interval() -> Iterator[None]:
    with _switch.lock:
        if _switch.users == 0:
            _switch.saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch.saved, SWITCH_INTERVAL))
        _switch.users += 1
    try:
        yield
    finally:
        with _switch.lock:
            _switch.users -= 1
            if _switch.users == 0:
                sys.setswitchinterval(_switch.saved)


@_short_switch_interval()
def write(
    conn: Connection,
    rows: Callable[[Tick | None], Iterator[Row]],
    now: datetime,
    check: Callable[[], None],
    progress: Tick | None,
) -> Written:
    """Write ``rows(tick)`` (validated, in file order) into worlds, conversations and messages, or
    raise Fallback. ``check`` runs before each chunk is written (it raises Fallback on a bad line
    that is not to be skipped). The caller owns the transaction and rolls it back on Fallback.

    A thread reads ahead: it parses and validates the next chunk while this one is written, so
    the parsing (Python) and the writing (the server) overlap. The progress the reading reports
    is passed on from this thread, in order, before the chunk it came with is written."""
    out = Written()
    unnamed: set[str] = set()
    dbapi = conn.connection.dbapi_connection
    if getattr(dbapi, "encoding", None) not in ("UTF8", "UNICODE"):  # binary COPY text is UTF-8
        raise Fallback
    cursor = dbapi.cursor()  # type: ignore[union-attr]
    ahead = _ReadAhead(rows, now, progress is not None)
    try:
        for chunk, ticks in ahead:
            for tick in ticks:
                progress(*tick)  # type: ignore[misc]
            if chunk is None:
                break
            check()
            if not out.inserted:  # a file ingested again is told by its first chunk, before any write
                cursor.execute(_ANY_STORED, {"m": list(chunk.ids)})
                stored = cursor.fetchone()
                if stored is not None and stored[0]:
                    raise Fallback
            _write_worlds(cursor, chunk, now, unnamed, out)
            _write_conversations(cursor, chunk, now, out)
            try:
                cursor.copy_expert(_COPY_MESSAGES, io.BytesIO(chunk.data), size=COPY_CHUNK_CHARS)
            except psycopg2.IntegrityError:  # a repeated or stored id, or another refusal
                raise Fallback from None
            out.inserted += chunk.rows
        check()
    except IntegrityError:
        raise Fallback from None
    finally:
        ahead.close()
        cursor.close()
    return out


class _ReadAhead:
    """``_chunks`` of ``rows`` built on a thread of their own, at most one chunk ahead of the
    writer: yields (chunk, progress ticks seen while reading it), then (None, the last ticks).
    An error of the reading (Fallback, a file error) is raised in the writer's thread."""

    def __init__(self, rows: Callable[[Tick | None], Iterator[Row]], ingested_at: datetime, relay: bool):
        self._ticks: list[tuple[str, int, int]] = []
        self._rows = rows(self._tick if relay else None)
        self._queue: queue.Queue[tuple[Any, list[tuple[str, int, int]]]] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(ingested_at,), name="ingest-read-ahead", daemon=True)
        self._thread.start()

    def _tick(self, phase: str, done: int, total: int) -> None:
        self._ticks.append((phase, done, total))  # only the reading thread appends and takes

    def _take_ticks(self) -> list[tuple[str, int, int]]:
        ticks, self._ticks = self._ticks, []
        return ticks

    def _put(self, item: Any) -> bool:
        """Hand ``item`` over; False once the writer stopped (no further chunk is read then)."""
        while not self._stop.is_set():
            try:
                self._queue.put((item, self._take_ticks()), timeout=0.1)
            except queue.Full:
                continue
            return not self._stop.is_set()
        return False

    def _read(self, ingested_at: datetime) -> None:
        try:
            for chunk in _chunks(self._rows, ingested_at):
                if not self._put(chunk):
                    return
            self._put(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the writer's thread
            self._put(exc)

    def __iter__(self) -> Iterator[tuple[_Chunk | None, list[tuple[str, int, int]]]]:
        while True:
            item, ticks = self._queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item, ticks
            if item is None:
                return

    def close(self) -> None:
        """Stop the reading thread (a chunk it waits to hand over is taken, so it sees the stop at
        once), then close the rows (their file) from this one."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.01)
            except queue.Empty:
                pass
        self._thread.join()
        close = getattr(self._rows, "close", None)
        if close is not None:
            close()


def _json(rows: list[dict[str, Any]]) -> str:
    """Rows as one JSON parameter (the server reads it with json_to_recordset: one value to
    parse, not an array literal per column)."""
    return orjson.dumps(rows).decode()


def _write_worlds(cursor: Any, chunk: _Chunk, now: datetime, unnamed: set[str], out: Written) -> None:
    ids = list(chunk.worlds)  # the statement sorts
    cursor.execute(
        _CREATE_WORLDS, {"now": now, "rows": _json([{"w": w, "n": n, "a": a} for w, (n, a) in chunk.worlds.items()])}
    )
    created = {w for (w,) in cursor.fetchall()}
    out.new_worlds += len(created)
    named = [w for w in ids if w in unnamed and chunk.worlds[w][0] is not None]
    if named:
        cursor.execute(_NAME_WORLDS, {"rows": _json([{"w": w, "n": chunk.worlds[w][0]} for w in named])})
        unnamed.difference_update(named)
    unnamed.update(w for w in created if chunk.worlds[w][0] is None)
    if len(unnamed) > MAX_UNNAMED_WORLDS:
        raise Fallback
    others = [w for w in ids if w not in created]
    if others:
        cursor.execute(_LOWER_FIRST_EVENT, {"rows": _json([{"w": w, "a": chunk.worlds[w][1]} for w in others])})


def _write_conversations(cursor: Any, chunk: _Chunk, now: datetime, out: Written) -> None:
    convs = chunk.conversations
    rows = [{"c": c, "w": w, "p": p, "d": d, "t": t} for c, (w, p, d, t) in convs.items()]  # the statement sorts
    cursor.execute(_CREATE_CONVERSATIONS, {"now": now, "rows": _json(rows)})
    created = {c for (c,) in cursor.fetchall()}
    out.new_conversations += len(created)
    others = [c for c in convs if c not in created]
    if not others:
        return
    cursor.execute(_READ_CONVERSATIONS, {"now": now, "c": others})
    stale = []
    for cid, wid, platform, debug, current in cursor.fetchall():
        if convs[cid][:3] != (wid, platform, debug):
            raise Fallback
        if not current:  # stored before this ingest (the ones it created carry ``now`` already)
            stale.append(cid)
    if stale:
        cursor.execute(_TOUCH_CONVERSATIONS, {"now": now, "c": stale})
