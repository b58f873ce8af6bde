"""Seed 004 recall (I/O, never an LLM call). Structural recall is navigation, not compression
(seed: 导航, 不是压缩): it browses one level at a time and resolves any window (or from/to) to its
raw entries by walking the references, returning the raw volume, a page at a time (the client
decides how much: 取多少, 由客户端决定). Semantic recall returns the stored summary, says `missing` or
`empty` otherwise, and over a range wider than the cap returns the cap-level summaries inside it."""

from __future__ import annotations

import json
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Text, bindparam, func, select, type_coerce

from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import conversations, messages
from memory_pipeline.lib.timeutil import EARLIEST, LATEST, instant_problem, utcnow
from memory_pipeline.tower.entries import entries_by_pk
from memory_pipeline.tower.logic import (
    RANGE,
    RANK,
    Granularity,
    TowerInputError,
    WindowQuery,
    child_level,
    decode_cursor,
    encode_cursor,
    summary_levels,
    window_end,
    window_start,
    windows_between,
)
from memory_pipeline.tower.summaries import record_view
from memory_pipeline.tower.tables import tower_entries, tower_summaries, tower_windows
from memory_pipeline.tower.types import MemoryType
from memory_pipeline.tower.windows import from_iso


@dataclass(frozen=True)
class Spec:
    """A window: a level of the chain and its start, or an explicit from/to (granularity "range")."""

    granularity: str
    start: datetime
    end: datetime


def _instant(value: date | datetime, field: str, tz: ZoneInfo) -> datetime:
    """An instant as given, or a bare date's midnight here, within the range the store holds (so
    the window around it can be computed and queried)."""
    if isinstance(value, datetime):
        return value
    midnight = datetime(value.year, value.month, value.day, tzinfo=tz)
    if problem := instant_problem(midnight):
        raise TowerInputError(field, problem)
    return midnight


def _level(t: MemoryType, g: Granularity) -> Granularity:
    if g not in t.chain:
        raise TowerInputError("granularity", f"not in {t.name}'s chain ({' → '.join(t.chain)})")
    return g


def _window(g: Granularity, anchor: date | datetime, tz: ZoneInfo) -> Spec:
    start = window_start(g, _instant(anchor, "anchor", tz), tz)
    return Spec(str(g), start, window_end(g, start, tz))


def resolve(t: MemoryType, tz: ZoneInfo, q: WindowQuery) -> Spec:
    """The one window ``q`` names in type ``t``: a level of its chain and the window of it around the
    anchor, or the from/to range (WindowQuery has checked that it names one kind, wholly)."""
    if q.from_ is not None and q.to is not None:
        lo, hi = _instant(q.from_, "from", tz), _instant(q.to, "to", tz)
        if hi <= lo:
            raise TowerInputError("to", "must be after from")
        return Spec(RANGE, lo, hi)
    if q.granularity is None:
        raise TowerInputError("granularity", f"required (one of {', '.join(t.chain)}), or from + to")
    g = _level(t, q.granularity)
    if q.anchor is None:
        raise TowerInputError("anchor", "required with granularity: a date or datetime inside the window")
    return _window(g, q.anchor, tz)


# Exact recall's reads of one window, built once: a recall is a few small reads, and building and
# keying a statement again each call cost as much as running it (~0.3 ms each on SQLite).
_W, _E = tower_windows.c, tower_entries.c
_ONE_WINDOW = select(tower_windows).where(
    _W.type_name == bindparam("type_name"), _W.granularity == bindparam("granularity"), _W.start == bindparam("start")
)
_ONE_WINDOW_OF_GROUP = _ONE_WINDOW.where(_W.group_value == bindparam("group"))
# What a walk down the levels reads of a window: a day's walk reads some 200 windows, and decoding
# the columns it does not need was a tenth of a recall's time.
# The refs come as the driver gives them (SQLite: the JSON text, decoded here by one call; psycopg2:
# already a list), not through the JSON type's layers of processing.
_BELOW = select(_W.granularity, _W.start, _W.group_value, _W.ref_kind, type_coerce(_W.refs, Text)).where(
    _W.type_name == bindparam("type_name"),
    _W.granularity.in_(bindparam("levels", expanding=True)),
    _W.start >= bindparam("lo"),
    _W.start < bindparam("hi"),
)
_BELOW_OF_GROUP = _BELOW.where(_W.group_value == bindparam("group"))
_ENTRIES_NOW = (
    select(_E.entry_pk, _E.chars)
    .where(_E.type_name == bindparam("type_name"), _E.at >= bindparam("lo"), _E.at < bindparam("hi"))
    .order_by(_E.at, _E.entry_pk)
)
_ENTRIES_NOW_OF_GROUP = _ENTRIES_NOW.where(_E.group_value == bindparam("group"))
# A page's entries, read by their places in that same order: a page is a run of those places, so
# one LIMIT/OFFSET read replaces binding its pks as an IN list (a hundred parameters a call).
_PAGE_COLUMNS = (_E.entry_pk, _E.entry_id, _E.at, _E.group_value, _E.content, _E.chars)
_PAGE = (
    select(*_PAGE_COLUMNS)
    .where(_E.type_name == bindparam("type_name"), _E.at >= bindparam("lo"), _E.at < bindparam("hi"))
    .order_by(_E.at, _E.entry_pk)
    .limit(bindparam("n"))
    .offset(bindparam("skip"))
)
_PAGE_OF_GROUP = _PAGE.where(_E.group_value == bindparam("group"))


def _window_rows(conn: Connection, t: MemoryType, g: str, start: datetime, group: str | None) -> list[Any]:
    """A level's window (each group's row, or ``group``'s): the statement built once."""
    at = {"type_name": t.name, "granularity": g, "start": start}
    if group is None:
        return list(conn.execute(_ONE_WINDOW, at).mappings())
    return list(conn.execute(_ONE_WINDOW_OF_GROUP, at | {"group": group}).mappings())


def _range_rows(conn: Connection, t: MemoryType, g: str, lo: datetime, hi: datetime, group: str | None) -> list[Any]:
    """The windows of level ``g`` starting in [lo, hi), by one range query however wide the range:
    listing every window start of it first took hours of CPU for a range of millennia."""
    w = tower_windows.c
    q = select(tower_windows).where(w.type_name == t.name, w.granularity == g, w.start >= lo, w.start < hi)
    if group is not None:
        q = q.where(w.group_value == group)
    return list(conn.execute(q).mappings())


def _walk(
    conn: Connection, t: MemoryType, rows: list[Any], span: tuple[datetime, datetime], group: str | None
) -> list[int]:
    """From windows down to entry pks. Every level below theirs is read in one query over the span
    (a child lies inside its parent, so inside the span); the walk then follows the references, so a
    window the references do not name (built after its parent's view) is not reached."""
    pks: list[int] = []
    g = Granularity(rows[0]["granularity"]) if rows else None
    levels: list[Granularity] = []
    # (group, start) → (ref_kind, refs) of each level's windows: plain rows, not mappings, as a
    # day's walk reads some 200 of them
    below: dict[str, dict[tuple[str, datetime], tuple[str, Any]]] = defaultdict(dict)
    while g is not None and (g := child_level(t.chain, g)) is not None:
        levels.append(g)
    if levels and any(r["ref_kind"] == "window" for r in rows):
        at = {"type_name": t.name, "levels": [str(x) for x in levels], "lo": span[0], "hi": span[1]}
        q = _BELOW if group is None else _BELOW_OF_GROUP
        for level, start, grp, kind, refs in conn.execute(q, at if group is None else at | {"group": group}).all():
            below[level][(grp, start)] = (kind, json.loads(refs) if isinstance(refs, str) else refs)
    current = [(r["group_value"], r["ref_kind"], r["refs"]) for r in rows]
    for level in [*levels, None]:
        pks += [int(x) for _, kind, refs in current if kind == "entry" for x in refs]
        upper = [(grp, refs) for grp, kind, refs in current if kind == "window"]
        if not upper or level is None:
            break
        found = below[str(level)]
        wanted = {(grp, from_iso(x)) for grp, refs in upper for x in refs}
        current = [(k[0], *found[k]) for k in wanted if k in found]
    return pks


def _count_now(conn: Connection, t: MemoryType, start: datetime, end: datetime, group: str | None, fed: bool) -> int:
    """The type's entries in [start, end) now, plus, for the activity type while it is fed, the
    conversation messages not fed into it yet (they are part of the stream, only not in the view)."""
    e = tower_entries.c
    q = select(func.count()).where(e.type_name == t.name, e.at >= start, e.at < end)
    if group is not None:
        q = q.where(e.group_value == group)
    n = int(conn.execute(q).scalar_one())
    return n + (len(_unfed(conn, t, start, end, group)) if fed else 0)


def _entries_now(
    conn: Connection, t: MemoryType, start: datetime, end: datetime, group: str | None
) -> dict[int, tuple[int, int]]:
    """(place in time order, chars) of every entry of the type in [start, end) now, by pk: the
    walk's entries are looked up in it, and its size is ``_count_now``'s count. One query for both,
    where the walk's pks as an IN list were hundreds of parameters to bind each call; the order
    comes from the database, so no timestamp is decoded."""
    at = {"type_name": t.name, "lo": start, "hi": end}
    q = _ENTRIES_NOW if group is None else _ENTRIES_NOW_OF_GROUP
    rows = conn.execute(q, at if group is None else at | {"group": group}).all()
    return {int(pk): (i, int(chars)) for i, (pk, chars) in enumerate(rows)}


def _page_entries(
    conn: Connection,
    t: MemoryType,
    start: datetime,
    end: datetime,
    group: str | None,
    page: list[int],
    places: dict[int, tuple[int, int]],
) -> list[Any]:
    """The entries of ``page`` (pks in time order, each with its place in ``places``), read as the run
    of places from its first to its last. An entry appended into the window since ``places`` was read
    shifts them; whatever the run then misses is read by pk, so the page is whole either way."""
    if not page:
        return []
    first, last = places[page[0]][0], places[page[-1]][0]
    at = {"type_name": t.name, "lo": start, "hi": end, "n": last - first + 1, "skip": first}
    q = _PAGE if group is None else _PAGE_OF_GROUP
    wanted = set(page)
    run = conn.execute(q, at if group is None else at | {"group": group}).mappings().all()
    got = {r["entry_pk"]: r for r in run if r["entry_pk"] in wanted}
    if len(got) < len(wanted):
        got |= {r["entry_pk"]: r for r in entries_by_pk(conn, [pk for pk in page if pk not in got])}
    return [got[pk] for pk in page if pk in got]


def _unfed(conn: Connection, t: MemoryType, start: datetime, end: datetime, group: str | None) -> list[Any]:
    """(world_id, at) of the non-debug conversation messages in [start, end) not yet fed into the
    activity type ``t`` (its entries carry the message id)."""
    m, c, e = messages.c, conversations.c, tower_entries.c
    fed = (
        select(e.entry_pk)
        .where(e.type_name == t.name, e.group_value == c.world_id, e.entry_id == m.message_id)
        .exists()
    )
    q = (
        select(c.world_id, m.at)
        .join(conversations, c.conversation_id == m.conversation_id)
        .where(m.at >= start, m.at < end, c.debug.is_(False), ~fed)
    )
    if group is not None:
        q = q.where(c.world_id == group)
    return list(conn.execute(q))


def recall(
    store: Store,
    t: MemoryType,
    spec: Spec,
    tz: ZoneInfo,
    *,
    group: str | None = None,
    limit: int,
    cursor: object = None,
    fed: bool = False,
) -> dict[str, Any]:
    """Exact recall: the raw entries of the window, by walking its references, a page at a time.
    ``fed``: ``t`` is the activity type, fed from the conversation messages (see _count_now)."""
    grp = group
    offset = decode_cursor(cursor)
    with store.connect() as conn:
        if spec.granularity == RANGE:
            finest = t.chain[0]
            rows = _range_rows(conn, t, str(finest), window_start(finest, spec.start, tz), spec.end, grp)
        else:
            rows = _window_rows(conn, t, spec.granularity, spec.start, grp)
        if grp is not None:
            rows = [r for r in rows if r["group_value"] == grp]
        materialized = [r["materialized_at"] for r in rows]
        pks = _walk(conn, t, rows, (spec.start, spec.end), grp)
        meta = _entries_now(conn, t, spec.start, spec.end, grp)
        chosen = sorted((pk for pk in set(pks) if pk in meta), key=lambda pk: meta[pk][0])
        page = chosen[offset : offset + limit]
        entries = _page_entries(conn, t, spec.start, spec.end, grp, page, meta)
        now_count = len(meta) + (len(_unfed(conn, t, spec.start, spec.end, grp)) if fed else 0)
        unknown = _unknown_group(conn, t, grp, fed) if not chosen else {}
    not_in_view = max(0, now_count - len(chosen))
    nxt = offset + len(page)
    return {
        "type": t.name,
        "window": _spec_view(spec, tz),
        "group": grp,
        "mode": "exact",
        "total_entries": len(chosen),
        "total_chars": sum(meta[pk][1] for pk in chosen),
        "returned": len(entries),
        "next_cursor": encode_cursor(nxt) if nxt < len(chosen) else None,
        "entries": [
            {
                "entry_id": r["entry_id"],
                "at": r["at"].astimezone(tz).isoformat(),
                "group": r["group_value"],
                "content": r["content"],
                "chars": r["chars"],
            }
            for r in entries
        ],
        **_staleness(materialized, not_in_view, bool(rows), tz),
        **unknown,
    }


def _unknown_group(conn: Connection, t: MemoryType, grp: str | None, fed: bool) -> dict[str, str]:
    """An answer with nothing in it for a named group says whether the type has that group at all:
    "empty" alone reads as "nothing that week" when the group is misspelt. (The activity type's
    groups are its worlds, fed from the messages, not its entries.)"""
    if not grp or fed:
        return {}
    e = tower_entries.c
    if conn.execute(select(e.entry_pk).where(e.type_name == t.name, e.group_value == grp).limit(1)).first():
        return {}
    return {"group_note": f"no entry of {t.name} is in group {grp!r}, in this window or any other"}


def _staleness(materialized: list[datetime], not_in_view: int, any_rows: bool, tz: ZoneInfo) -> dict[str, Any]:
    """Seed: a coarse view reflects the records up to its last materialization and returns a stale
    but consistent window with no error signal; here it always says so."""
    return {
        "materialized_at": max(materialized).astimezone(tz).isoformat(timespec="seconds") if materialized else None,
        "materialized": any_rows,
        "stale": not_in_view > 0,
        "entries_not_in_view": not_in_view,
    }


def _spec_view(spec: Spec, tz: ZoneInfo) -> dict[str, str]:
    return {
        "granularity": spec.granularity,
        "start": spec.start.astimezone(tz).isoformat(),
        "end": spec.end.astimezone(tz).isoformat(),
    }


def browse(
    store: Store,
    t: MemoryType,
    tz: ZoneInfo,
    q: WindowQuery,
    *,
    limit: int,
    cursor: object = None,
    fed: bool = False,
) -> dict[str, Any]:
    """One level at a time: without an anchor, the windows of ``granularity`` (default the chain's
    coarsest); with one, that window's children at the next finer level, with entry counts."""
    if q.from_ is not None:
        raise TowerInputError("from", "windows browses a level (granularity, anchor): from + to is for recall")
    grp = q.group
    offset = decode_cursor(cursor)
    w = tower_windows.c
    level = _level(t, q.granularity if q.granularity is not None else t.chain[-1])
    parent = None
    if q.anchor is not None:
        spec = _window(level, q.anchor, tz)
        child = child_level(t.chain, level)
        parent = spec
        if child is None:
            raise TowerInputError(
                "granularity", f"{level} is the finest level: its children are raw entries (use recall)"
            )
        sel = select(tower_windows).where(
            w.type_name == t.name, w.granularity == str(child), w.start >= spec.start, w.start < spec.end
        )
    else:
        sel = select(tower_windows).where(w.type_name == t.name, w.granularity == str(level))
    if grp is not None:
        sel = sel.where(w.group_value == grp)
    with store.connect() as conn:
        rows = list(conn.execute(sel.order_by(w.start, w.group_value)).mappings())
        page = rows[offset : offset + limit]
        counts = _counts_now(conn, t, page, fed)
        # Entries of the scope that no listed window holds yet (windows not built, or built before them).
        lo, hi = (parent.start, parent.end) if parent else (EARLIEST, LATEST)
        not_in_view = max(0, _count_now(conn, t, lo, hi, grp, fed) - sum(r["entry_count"] for r in rows))
    nxt = offset + len(page)
    items = []
    for r in page:
        now_n = counts.get((r["group_value"], r["start"]), 0)
        items.append(
            {
                "granularity": r["granularity"],
                "start": r["start"].astimezone(tz).isoformat(),
                "end": r["end"].astimezone(tz).isoformat(),
                "group": r["group_value"],
                "entry_count": r["entry_count"],
                "chars": r["chars"],
                "materialized_at": r["materialized_at"].astimezone(tz).isoformat(timespec="seconds"),
                "stale": now_n > r["entry_count"],
                "entries_not_in_view": max(0, now_n - r["entry_count"]),
            }
        )
    return {
        "type": t.name,
        "window": _spec_view(parent, tz) if parent else None,
        "level": items[0]["granularity"] if items else (str(child_level(t.chain, level)) if parent else str(level)),
        "total_windows": len(rows),
        "total_entries": sum(r["entry_count"] for r in rows),
        "total_chars": sum(r["chars"] for r in rows),
        "returned": len(items),
        "next_cursor": encode_cursor(nxt) if nxt < len(rows) else None,
        "windows": items,
        "stale": not_in_view > 0,
        "entries_not_in_view": not_in_view,
    }


def _counts_now(conn: Connection, t: MemoryType, rows: list[Any], fed: bool) -> dict[tuple[str, datetime], int]:
    if not rows:
        return {}
    e = tower_entries.c
    lo, hi = min(r["start"] for r in rows), max(r["end"] for r in rows)
    ats: dict[str, list[datetime]] = defaultdict(list)
    for gv, at in conn.execute(select(e.group_value, e.at).where(e.type_name == t.name, e.at >= lo, e.at < hi)):
        ats[gv].append(at)
    for gv, at in _unfed(conn, t, lo, hi, None) if fed else []:
        ats[gv].append(at)
    for v in ats.values():
        v.sort()
    return {
        (r["group_value"], r["start"]): bisect_left(ats[r["group_value"]], r["end"])
        - bisect_left(ats[r["group_value"]], r["start"])
        for r in rows
    }


# ---- semantic recall ----------------------------------------------------------------------------------


def read_cap(t: MemoryType) -> Granularity:
    """The level whose summaries answer a read wider than the cap: the cap itself, or on a short
    chain that stops below it (``day`` alone, or ``day`` → ``month`` under the default cap ``week``)
    the chain's highest level at or under the cap; a level the chain lacks has no summary to return."""
    return summary_levels(t.chain, t.summary_cap)[-1]


def cap_span(t: MemoryType, spec: Spec, tz: ZoneInfo) -> bool:
    """A range wider than one cap-level window (or a level above the cap) is answered with the
    cap-level summaries inside it (a year → ~52 weeks), never with a new call."""
    if spec.granularity != RANGE:
        return RANK[Granularity(spec.granularity)] > RANK[t.summary_cap]
    s = window_start(t.summary_cap, spec.start, tz)
    return spec.end - spec.start > window_end(t.summary_cap, s, tz) - s


def groups_with_entries(conn: Connection, t: MemoryType, spec: Spec) -> list[str]:
    e = tower_entries.c
    q = select(e.group_value).where(e.type_name == t.name, e.at >= spec.start, e.at < spec.end).distinct()
    return sorted(conn.execute(q).scalars())


def get_summary(
    store: Store,
    t: MemoryType,
    spec: Spec,
    tz: ZoneInfo,
    *,
    group: str | None = None,
    limit: int,
    cursor: object = None,
    fed: bool = False,
) -> dict[str, Any]:
    """Semantic recall, a page at a time (the client decides how much, as for exact recall). One
    window: a page of its groups, each found or missing. A range wider than the cap: in time order,
    the cap-level summaries of the windows overlapping it and the gaps between them (stretches with
    no summary, with the entries they hold), so an empty year is said, not skipped."""
    grp = group
    offset = decode_cursor(cursor)
    with store.connect() as conn:
        unfed = len(_unfed(conn, t, spec.start, spec.end, grp)) if fed else 0
        if cap_span(t, spec, tz):
            return _cap_level(conn, t, spec, tz, grp, offset, limit, fed, unfed)
        groups = [grp] if grp is not None else groups_with_entries(conn, t, spec)
        latest = _newest_records(conn, t, spec.granularity, spec.start, spec.end, grp)
        slots = [(gv, latest.get((spec.start, gv))) for gv in groups]
        if grp is not None and slots[0][1] is None and not _count_now(conn, t, spec.start, spec.end, grp, False):
            slots = []  # the group asked for has no entries here: empty
        page = slots[offset : offset + limit]
        records = _full_records(conn, [rec.record_id for _, rec in page if rec is not None])
        found = [
            record_view(records[rec.record_id], tz, _count_now(conn, t, spec.start, spec.end, gv, fed))
            for gv, rec in page
            if rec is not None
        ]
        unknown = _unknown_group(conn, t, grp, fed) if not slots else {}
    missing = [gv for gv, rec in page if rec is None]
    n_found = sum(1 for _, rec in slots if rec is not None)
    n_missing = len(slots) - n_found
    state = "empty" if not slots else ("found" if not n_missing else ("missing" if not n_found else "partial"))
    if state == "missing" and spec.end > utcnow():
        state = "open"  # not closed yet: no summary can exist, so none is missing (seed: 只总结已关闭窗口)
    nxt = offset + len(page)
    return {
        "type": t.name,
        "window": _spec_view(spec, tz),
        "state": state,
        "total_summaries": n_found,
        "total_missing_groups": n_missing,
        "total_chars": sum(rec.chars for _, rec in slots if rec is not None),
        "returned": len(page),
        "next_cursor": encode_cursor(nxt) if nxt < len(slots) else None,
        "summaries": found,
        "missing_groups": missing,
        **_summary_staleness(found, unfed),
        **unknown,
    }


def _cap_level(
    conn: Connection,
    t: MemoryType,
    spec: Spec,
    tz: ZoneInfo,
    grp: str | None,
    offset: int,
    limit: int,
    fed: bool,
    unfed: int,
) -> dict[str, Any]:
    """The cap-level summaries of every cap window overlapping ``spec`` and the gaps between them,
    one sequence in time order, paged; no call. The level is :func:`read_cap`."""
    cap = read_cap(t)
    latest = _newest_records(conn, t, str(cap), spec.start, spec.end, grp)
    by_start: dict[datetime, list[Any]] = defaultdict(list)
    for (start, _), rec in sorted(latest.items(), key=lambda kv: kv[0]):
        by_start[start].append(rec)
    # ("summary", record), ("gap", the run of closed windows without one) or ("open", [the open
    # window]): a window not closed yet has no summary by rule, and a future one is no gap at all.
    items: list[tuple[str, Any]] = []
    run: list[tuple[datetime, datetime]] = []
    now = utcnow()
    for start, end in windows_between(cap, spec.start, spec.end, tz):
        if start > now:
            break
        if start not in by_start:
            if end > now:
                if run:
                    items.append(("gap", run))
                run = []
                items.append(("open", [(start, end)]))
            else:
                run.append((start, end))
            continue
        if run:
            items.append(("gap", run))
            run = []
        items += [("summary", rec) for rec in by_start[start]]
    if run:
        items.append(("gap", run))
    page = items[offset : offset + limit]
    records = _full_records(conn, [rec.record_id for kind, rec in page if kind == "summary"])
    views, gaps = [], []
    for kind, item in page:
        if kind == "summary":
            r = records[item.record_id]
            views.append(record_view(r, tz, _count_now(conn, t, r["start"], r["end"], r["group_value"], fed)))
        else:
            start, end = item[0][0], item[-1][1]
            gaps.append(
                {
                    "start": start.astimezone(tz).isoformat(),
                    "end": end.astimezone(tz).isoformat(),
                    "windows": len(item),
                    "entries": _count_now(conn, t, start, end, grp, fed),
                    "open": kind == "open",  # the window now: summarized once it closes
                }
            )
    nxt = offset + len(page)
    return {
        "type": t.name,
        "window": _spec_view(spec, tz),
        "state": "cap_level",
        "note": f"wider than the summary cap ({t.summary_cap})"
        + (f"; the chain's top summarized level is {cap}" if cap != t.summary_cap else "")
        + f": the {cap} summaries of the windows overlapping it, "
        f"and the gaps (stretches of {cap} windows with no summary)",
        "total_summaries": len(latest),
        "total_gaps": sum(1 for kind, _ in items if kind in ("gap", "open")),
        "total_chars": sum(rec.chars for rec in latest.values()),
        "returned": len(page),
        "next_cursor": encode_cursor(nxt) if nxt < len(items) else None,
        "summaries": views,
        "gaps": gaps,
        "missing_groups": [],
        **_summary_staleness(views, unfed),
    }


def _newest_records(
    conn: Connection, t: MemoryType, granularity: str, start: datetime, end: datetime, grp: str | None
) -> dict[tuple[datetime, str], Any]:
    """{(window start, group): (record_id, chars of its text)} of the newest record per window and
    group of ``granularity`` overlapping [start, end); one window exactly for a range key."""
    s = tower_summaries.c
    q = select(s.record_id, s.start, s.group_value, func.length(s.text).label("chars")).where(
        s.type_name == t.name, s.granularity == granularity
    )
    q = q.where(s.start == start, s.end == end) if granularity == RANGE else q.where(s.start < end, s.end > start)
    if grp is not None:
        q = q.where(s.group_value == grp)
    latest: dict[tuple[datetime, str], Any] = {}
    for r in conn.execute(q.order_by(s.start, s.group_value, s.record_id.desc())):
        latest.setdefault((r.start, r.group_value), r)
    return latest


def _full_records(conn: Connection, ids: list[int]) -> dict[int, Any]:
    s = tower_summaries.c
    return {r["record_id"]: r for r in conn.execute(select(tower_summaries).where(s.record_id.in_(ids))).mappings()}


def _summary_staleness(views: list[dict[str, Any]], unfed: int) -> dict[str, Any]:
    """A summary misses the entries appended after it; the activity type's window also misses the
    messages not fed into it yet (counted whether or not a summary exists)."""
    return {"stale": unfed > 0 or any(v["stale"] for v in views), "entries_not_in_view": unfed}
