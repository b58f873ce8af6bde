"""Seed 004 raw series (I/O): append entries to a type (Python API, CLI, JSONL file, MCP), append-
only and idempotent on an entry id within its group; the activity type fed from the raw
conversation messages.

A batch is validated whole before anything is written, then written in one transaction: a bad
entry refuses the batch with its line and field, and nothing is half-written. An entry id already
stored in the entry's group from the same request (content, and `at` as sent: a retry that leaves
`at` out again matches the "now" the first append stored) is a duplicate (nothing written);
otherwise a conflict. Another group's ids are never read: the same id there is another entry."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, bindparam, select

from memory_pipeline.lib.store import Store, cached_insert
from memory_pipeline.lib.store.tables import conversations, messages
from memory_pipeline.lib.text import json_error
from memory_pipeline.lib.timeutil import day_bounds, local_date, utcnow
from memory_pipeline.tower import types as tower_types_io
from memory_pipeline.tower.logic import EntryIn, TowerInputError, validate_entry
from memory_pipeline.tower.tables import tower_entries

BATCH = 5000
MAX_LINE_BYTES = 1_048_576


class AppendCounts(TypedDict):
    """What an append did: entries received, inserted, already present (their ids, at most 1000)."""

    type: str
    received: int
    inserted: int
    duplicates: int
    entry_ids: list[str]


@dataclass
class AppendReport:
    type_name: str
    received: int = 0
    inserted: int = 0
    duplicates: int = 0
    entry_ids: list[str] = field(default_factory=list)
    days: set[date] = field(default_factory=set)  # CST days that got new entries

    def as_dict(self) -> AppendCounts:
        return {
            "type": self.type_name,
            "received": self.received,
            "inserted": self.inserted,
            "duplicates": self.duplicates,
            "entry_ids": self.entry_ids[:1000],
        }


def _conflict(stored: Any, new: EntryIn) -> str | None:
    """What differs between the request stored under an entry id and this one, or None (a retry).
    The request is what the caller sent: an ``at`` left out both times matches whatever "now" the
    first append stored, while an ``at`` given only once, or two different ones, do not."""
    if json.dumps(stored["content"], sort_keys=True) != json.dumps(new.content, sort_keys=True):
        return "is stored with other content"
    if bool(stored["at_given"]) != new.at_given:
        return "was stored from a request that " + ("left 'at' out" if new.at_given else "gave 'at'")
    if new.at_given and stored["at"] != new.at:
        return "is stored with another 'at'"
    return None


def _refuse_conflict(entry_id: str, stored: Any, new: EntryIn, where: str) -> None:
    if differs := _conflict(stored, new):
        raise TowerInputError("id", f"entry id {entry_id!r} {differs}", where)


def append(
    store: Store,
    type_name: object,
    raw_entries: Iterable[tuple[str, Any]],
    tz: ZoneInfo,
    source: str = "api",
    *,
    fed: str | None = None,
) -> AppendReport:
    """``raw_entries``: (where, raw) pairs, ``where`` naming the line or index for errors. ``fed``:
    the activity type, whose entries only its feed writes."""
    mtype = tower_types_io.get(store, type_name)
    if mtype.archived:
        raise _archived(mtype.name)
    if mtype.name == fed:
        # Its entry ids are the messages' ids, written by the feed only: an entry appended by hand
        # under a message id still to come would take that message's place, and the feed skip it.
        raise TowerInputError(
            "type",
            f"{mtype.name!r} is fed from the conversation messages (ingest them); "
            "append to a type of your own (create_type)",
        )
    now = utcnow()
    batch: list[EntryIn] = []
    wheres: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    for where, raw in raw_entries:
        e = validate_entry(raw, group_field=mtype.group_field, now=now, where=where)
        if e.entry_id is not None:
            key = (e.group, e.entry_id)
            if key in seen:
                raise TowerInputError("id", f"duplicate id in this batch (first at {seen[key]})", where)
            seen[key] = where
        batch.append(e)
        wheres.append(where)
    report = AppendReport(mtype.name, received=len(batch))
    rows = []
    for e in batch:
        eid = e.entry_id or uuid.uuid4().hex
        rows.append(
            {
                "type_name": mtype.name,
                "entry_id": eid,
                "at": e.at,
                "at_given": e.at_given,
                "group_value": e.group,
                "content": e.content,
                "chars": e.chars,
                "ingested_at": now,
                "source": source[:1024],
            }
        )
    with store.begin() as conn:  # one transaction: all or nothing
        if not tower_types_io.accepts_entries(conn, mtype.name):
            raise _archived(mtype.name)  # archived since the check above
        given = [_key(r) for r, e in zip(rows, batch, strict=True) if e.entry_id is not None]
        stored = _stored(conn, mtype.name, given)
        fresh = []
        for row, e, where in zip(rows, batch, wheres, strict=True):
            old = stored.get(_key(row))
            if old is None:
                fresh.append(row)
            else:
                _refuse_conflict(row["entry_id"], old, e, where)
                report.duplicates += 1
        new_keys: set[tuple[str, str]] = set()
        for i in range(0, len(fresh), BATCH):
            new_keys |= _insert_new(conn, fresh[i : i + BATCH])
        # A row another append stored first (between our read and our insert) is a duplicate when
        # it is the same entry, else a conflict that refuses this whole batch.
        raced = [r for r in fresh if _key(r) not in new_keys]
        if raced:
            now_stored = _stored(conn, mtype.name, [_key(r) for r in raced])
            by_key = {_key(r): (e, where) for r, e, where in zip(rows, batch, wheres, strict=True)}
            for r in raced:
                e, where = by_key[_key(r)]
                _refuse_conflict(r["entry_id"], now_stored[_key(r)], e, where)
                report.duplicates += 1
        report.inserted = len(new_keys)
        fresh = [r for r in fresh if _key(r) in new_keys]
    report.entry_ids = [r["entry_id"] for r in rows]
    report.days = {local_date(r["at"], tz) for r in fresh}
    return report


def _archived(name: str) -> TowerInputError:
    return TowerInputError("type", f"memory type {name!r} is archived: appends are refused")


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return (row["group_value"], row["entry_id"])


def _insert_new(conn: Connection, rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """INSERT .. ON CONFLICT (type_name, group_value, entry_id) DO NOTHING: the (group, id) written."""
    if not rows:
        return set()
    t = tower_entries.c
    stmt = cached_insert(
        conn,
        tower_entries,
        ("tower.insert_new",),
        lambda ins: ins.on_conflict_do_nothing(index_elements=["type_name", "group_value", "entry_id"]).returning(
            t.group_value, t.entry_id
        ),
    )
    return {(g, i) for g, i in conn.execute(stmt, rows)}


def _stored(conn: Connection, type_name: str, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """The stored entries of ``keys`` ((group, id)), read group by group: no other group's row."""
    out: dict[tuple[str, str], Any] = {}
    t = tower_entries.c
    by_group: dict[str, list[str]] = {}
    for group, entry_id in keys:
        by_group.setdefault(group, []).append(entry_id)
    for group, ids in by_group.items():
        for i in range(0, len(ids), BATCH):
            q = select(t.entry_id, t.at, t.at_given, t.group_value, t.content).where(
                t.type_name == type_name, t.group_value == group, t.entry_id.in_(ids[i : i + BATCH])
            )
            out.update({(group, r["entry_id"]): r for r in conn.execute(q).mappings()})
    return out


def read_jsonl(path: Path) -> list[tuple[str, Any]]:
    """(``file:line``, object) per non-blank line; a line that is not JSON is refused by number."""
    label = path.name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TowerInputError("file", f"cannot read {label}: {exc.strerror}") from None
    out = []
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if not raw.strip():
            continue
        where = f"{label}:{n}"
        if len(raw) > MAX_LINE_BYTES:
            raise TowerInputError("line", f"longer than {MAX_LINE_BYTES} bytes", where)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TowerInputError("line", f"not UTF-8 (byte {exc.start})", where) from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TowerInputError("line", f"not JSON ({json_error(exc)})", where) from None
        except RecursionError:
            raise TowerInputError("line", "nested too deeply", where) from None
        out.append((where, obj))
    return out


# ---- the activity type, fed from raw conversation messages ------------------------------------------


def feed_activity(store: Store, activity_type: str, day: date, tz: ZoneInfo) -> int | None:
    """Copy the messages of CST ``day`` (non-debug conversations) into the activity type, grouped
    by world: one read, batched inserts in one transaction, idempotent on the message id. None when
    the type is archived: an archived type takes no entries, from the feed either."""
    start, end = day_bounds(day, tz)
    m, c = messages.c, conversations.c
    q = (
        select(m.message_id, m.role, m.content, m.at, m.tool_calls, m.conversation_id, c.world_id, c.platform)
        .join(conversations, c.conversation_id == m.conversation_id)
        .where(m.at >= start, m.at < end, c.debug.is_(False))
        .order_by(m.at, m.message_id)
    )
    now = utcnow()
    inserted = 0
    with store.begin() as conn:
        if not tower_types_io.accepts_entries(conn, activity_type):
            return None
        rows = []
        for r in conn.execute(q).mappings():
            content = {
                "role": r["role"],
                "text": r["content"] or "",
                "conversation_id": r["conversation_id"],
                "platform": r["platform"],
            }
            if r["tool_calls"]:
                content["tools"] = [t.get("name") for t in r["tool_calls"] if isinstance(t, dict)]
            rows.append(
                {
                    "type_name": activity_type,
                    "entry_id": r["message_id"],
                    "at": r["at"],
                    "at_given": True,
                    "group_value": r["world_id"],
                    "content": content,
                    "chars": len(r["content"] or ""),
                    "ingested_at": now,
                    "source": "messages",
                }
            )
        for i in range(0, len(rows), BATCH):
            inserted += len(_insert_new(conn, rows[i : i + BATCH]))
    return inserted


def entries_in(conn: Connection, type_name: str, start: datetime, end: datetime, group: str | None = None) -> list[Any]:
    """(entry_pk, at, group_value, chars) of a type's entries in [start, end), in order."""
    t = tower_entries.c
    q = (
        select(t.entry_pk, t.at, t.group_value, t.chars)
        .where(t.type_name == type_name, t.at >= start, t.at < end)
        .order_by(t.at, t.entry_pk)
    )
    if group is not None:
        q = q.where(t.group_value == group)
    return list(conn.execute(q).mappings())


# Built once: exact recall reads a page of entries by pk each call.
_BY_PK = select(
    tower_entries.c.entry_pk,
    tower_entries.c.entry_id,
    tower_entries.c.at,
    tower_entries.c.group_value,
    tower_entries.c.content,
    tower_entries.c.chars,
).where(tower_entries.c.entry_pk.in_(bindparam("pks", expanding=True)))


def entries_by_pk(conn: Connection, pks: list[int]) -> list[Any]:
    out = []
    for i in range(0, len(pks), BATCH):
        out += list(conn.execute(_BY_PK, {"pks": pks[i : i + BATCH]}).mappings())
    order = {pk: i for i, pk in enumerate(pks)}
    return sorted(out, key=lambda r: order[r["entry_pk"]])


__all__ = ["AppendReport", "append", "entries_by_pk", "entries_in", "feed_activity", "read_jsonl"]


def groups_of(store: Store, type_name: str) -> set[str]:
    """The group values the type's raw series holds entries of."""
    te = tower_entries.c
    with store.connect() as conn:
        return set(conn.execute(select(te.group_value).where(te.type_name == type_name).distinct()).scalars())
