"""Seed 004 structural windows (I/O, zero LLM): for every level of a type's chain each non-empty
window holds references to the next finer level's windows, down to the raw entries.

Windows are a regenerable view of the raw series: a partition (a CST day for the levels up to
``day``, a week, a month) is read in one query and rewritten in one transaction. Each row records
when it was materialized; a read over a window that has entries past that point says so (seed:
陈旧但自洽, made explicit)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, delete, func, select

from memory_pipeline.lib.store import Store, upsert
from memory_pipeline.lib.store.tables import conversations, messages
from memory_pipeline.lib.timeutil import day_bounds, local_date, utcnow
from memory_pipeline.tower import entries as entries_io
from memory_pipeline.tower import types as types_io
from memory_pipeline.tower.logic import SUB_DAY, Granularity, child_level, window_end, window_start
from memory_pipeline.tower.tables import tower_entries, tower_summaries, tower_window_runs, tower_windows
from memory_pipeline.tower.types import MemoryType

BATCH = 5000


@dataclass
class BuildResult:
    period: str
    windows: int = 0
    entries: int = 0
    by_level: Counter[str] = field(default_factory=Counter)
    activity_fed: int = 0
    activity_archived: bool = False  # the activity type is archived: no message was fed


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat()


def from_iso(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _day_levels(t: MemoryType) -> list[Granularity]:
    return [g for g in t.chain if g in SUB_DAY]


def windows_from_entries(
    t: MemoryType, levels: Sequence[Granularity], entries: Sequence[Any], tz: ZoneInfo, now: datetime
) -> list[dict[str, Any]]:
    """Rows for ``levels`` (ascending, consecutive in the chain) from ``entries`` (entry_pk, at,
    group_value, chars): the first level refers to entries, each next level to the one below."""
    built: dict[Granularity, dict[tuple[str, datetime], dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    for g in levels:
        child = child_level(t.chain, g)
        cur: dict[tuple[str, datetime], dict[str, Any]] = {}

        def window(
            group: str, start: datetime, kind: str, cur: dict[Any, dict[str, Any]] = cur, g: Granularity = g
        ) -> dict[str, Any]:
            key = (group, start)
            if key not in cur:
                cur[key] = {
                    "type_name": t.name,
                    "granularity": str(g),
                    "start": start,
                    "group_value": group,
                    "end": window_end(g, start, tz),
                    "entry_count": 0,
                    "chars": 0,
                    "ref_kind": kind,
                    "refs": [],
                    "materialized_at": now,
                }
            return cur[key]

        if child is None or child not in built:
            for e in entries:
                w = window(e["group_value"], window_start(g, e["at"], tz), "entry")
                w["refs"].append(int(e["entry_pk"]))
                w["entry_count"] += 1
                w["chars"] += int(e["chars"])
        else:
            for (group, cstart), cw in sorted(built[child].items(), key=lambda kv: (kv[0][0], kv[0][1])):
                w = window(group, window_start(g, cstart, tz), "window")
                w["refs"].append(iso(cstart))
                w["entry_count"] += cw["entry_count"]
                w["chars"] += cw["chars"]
        built[g] = cur
        out += list(cur.values())
    return out


def _write(conn: Connection, rows: list[dict[str, Any]]) -> None:
    for i in range(0, len(rows), BATCH):
        conn.execute(tower_windows.insert(), rows[i : i + BATCH])


def _record_run(conn: Connection, grain: str, period: date, now: datetime, n: int) -> None:
    upsert(
        conn,
        tower_window_runs,
        [{"grain": grain, "period_start": period, "materialized_at": now, "windows": n}],
        keys=["grain", "period_start"],
    )


def build_day(
    store: Store, day: date, tz: ZoneInfo, *, activity_type: str | None = None, only: str | None = None
) -> BuildResult:
    """Every level up to ``day`` of every type (or ``only`` one) for CST ``day``: one read of the
    day's entries, one transaction rewriting the day's windows. With ``activity_type`` the day's
    conversation messages are fed into that type first."""
    result = BuildResult(day.isoformat())
    if activity_type:
        fed = entries_io.feed_activity(store, activity_type, day, tz)
        result.activity_fed, result.activity_archived = fed or 0, fed is None
    start, end = day_bounds(day, tz)
    now = utcnow()
    all_types = types_io.list_types(store, include_archived=True)
    chosen = [t for t in all_types if only is None or t.name == only]
    e = tower_entries.c
    with store.begin() as conn:
        q = select(e.entry_pk, e.type_name, e.at, e.group_value, e.chars).where(e.at >= start, e.at < end)
        if only is not None:
            q = q.where(e.type_name == only)
        by_type: dict[str, list[Any]] = defaultdict(list)
        for r in conn.execute(q.order_by(e.at, e.entry_pk)).mappings():
            by_type[r["type_name"]].append(r)
        rows: list[dict[str, Any]] = []
        for t in chosen:
            levels = _day_levels(t)
            if levels:
                rows += windows_from_entries(t, levels, by_type.get(t.name, []), tz, now)
            result.entries += len(by_type.get(t.name, []))
        w = tower_windows.c
        stmt = delete(tower_windows).where(
            w.granularity.in_([str(g) for g in SUB_DAY]), w.start >= start, w.start < end
        )
        if only is not None:
            stmt = stmt.where(w.type_name == only)
        conn.execute(stmt)
        _write(conn, rows)
        if only is None:
            _record_run(conn, "day", day, now, len(rows))
    result.windows = len(rows)
    result.by_level.update(r["granularity"] for r in rows)
    return result


def build_coarse(store: Store, g: Granularity, period: date, tz: ZoneInfo, *, only: str | None = None) -> BuildResult:
    """The ``week`` or ``month`` windows starting at ``period`` from the child level's windows
    (a month's children are its days), or from the raw entries when the chain has no finer level."""
    start = window_start(g, datetime(period.year, period.month, period.day, tzinfo=tz), tz)
    end = window_end(g, start, tz)
    result = BuildResult(f"{g} {period.isoformat()}")
    now = utcnow()
    chosen = [t for t in types_io.list_types(store, include_archived=True) if g in t.chain and (only in (None, t.name))]
    w, e = tower_windows.c, tower_entries.c
    with store.begin() as conn:
        rows: list[dict[str, Any]] = []
        for t in chosen:
            child = child_level(t.chain, g)
            agg: dict[str, dict[str, Any]] = {}
            if child is None:
                q = select(e.entry_pk, e.at, e.group_value, e.chars).where(
                    e.type_name == t.name, e.at >= start, e.at < end
                )
                rows += windows_from_entries(
                    t, [g], list(conn.execute(q.order_by(e.at, e.entry_pk)).mappings()), tz, now
                )
                continue
            q = (
                select(w.group_value, w.start, w.entry_count, w.chars)
                .where(w.type_name == t.name, w.granularity == str(child), w.start >= start, w.start < end)
                .order_by(w.group_value, w.start)
            )
            for r in conn.execute(q).mappings():
                row = agg.setdefault(
                    r["group_value"],
                    {
                        "type_name": t.name,
                        "granularity": str(g),
                        "start": start,
                        "group_value": r["group_value"],
                        "end": end,
                        "entry_count": 0,
                        "chars": 0,
                        "ref_kind": "window",
                        "refs": [],
                        "materialized_at": now,
                    },
                )
                row["refs"].append(iso(r["start"]))
                row["entry_count"] += r["entry_count"]
                row["chars"] += r["chars"]
            rows += list(agg.values())
        stmt = delete(tower_windows).where(w.granularity == str(g), w.start == start)
        if only is not None:
            stmt = stmt.where(w.type_name == only)
        conn.execute(stmt)
        _write(conn, rows)
        if only is None:
            _record_run(conn, str(g), period, now, len(rows))
    result.windows = len(rows)
    result.entries = sum(r["entry_count"] for r in rows)
    result.by_level.update(r["granularity"] for r in rows)
    return result


def refresh_after_late_entries(
    store: Store, type_name: str, days: set[date], tz: ZoneInfo, now: datetime
) -> tuple[int, list[date]]:
    """A late entry (a closed day already materialized) updates that type's refs at once: its day
    windows, then the week and month above. The open day waits for the minute refresh. Returns
    the windows rebuilt (every group's: the day is rebuilt whole) and the days refreshed."""
    today = local_date(now, tz)
    with store.connect() as conn:
        done = set(
            conn.execute(
                select(tower_window_runs.c.period_start).where(
                    tower_window_runs.c.grain == "day", tower_window_runs.c.period_start.in_(sorted(days))
                )
            ).scalars()
        )
    t = types_io.get(store, type_name)
    n = 0
    refreshed = sorted(day for day in days if day < today and day in done)
    for d in refreshed:
        n += build_day(store, d, tz, only=type_name).windows
        for g in (Granularity.WEEK, Granularity.MONTH):
            if g in t.chain:
                s = window_start(g, datetime(d.year, d.month, d.day, tzinfo=tz), tz)
                n += build_coarse(store, g, s.astimezone(tz).date(), tz, only=type_name).windows
    return n, refreshed


# ---- reading the view -------------------------------------------------------------------------------


def stale_days(
    store: Store, tz: ZoneInfo, now: datetime, *, activity_type: str | None, lookback_days: int = 31
) -> dict[date, int]:
    """Closed days already materialized with entries (or conversation messages, while
    ``activity_type`` is fed from them) ingested after their materialization: {day: entries past
    it}. The late-data record."""
    feed = types_io.feeds_activity(store, activity_type)
    today = local_date(now, tz)
    since = today - timedelta(days=lookback_days)
    r = tower_window_runs.c
    with store.connect() as conn:
        runs = {
            row.period_start: row.materialized_at
            for row in conn.execute(
                select(r.period_start, r.materialized_at).where(r.grain == "day", r.period_start >= since)
            )
        }
        if not runs:
            return {}
        oldest = min(runs.values())
        e, m, c = tower_entries.c, messages.c, conversations.c
        late: list[tuple[str, datetime, datetime]] = [
            (name, at, ingested)
            for name, at, ingested in conn.execute(
                select(e.type_name, e.at, e.ingested_at).where(e.ingested_at > oldest)
            )
        ]
        if feed:
            assert activity_type is not None
            late += [
                (activity_type, at, ingested)
                for at, ingested in conn.execute(
                    select(m.at, m.ingested_at)
                    .join(conversations, c.conversation_id == m.conversation_id)
                    .where(m.ingested_at > oldest, c.debug.is_(False))
                )
            ]
        past = [(name, d, ingested) for name, at, ingested in late if (d := local_date(at, tz)) < today]
        past = [(name, d, ingested) for name, d, ingested in past if d in runs and ingested > runs[d]]
        # A late entry's own type is rebuilt for its day at once (refresh_after_late_entries), which
        # the day's run record does not show: that type's windows of the day do.
        rebuilt = {key: _type_day_built(conn, *key, tz) for key in {(name, d) for name, d, _ in past}}
    out: Counter[date] = Counter()
    for name, d, ingested in past:
        built = rebuilt[(name, d)]
        if built is None or ingested > built:
            out[d] += 1
    return dict(out)


def _type_day_built(conn: Connection, type_name: str, day: date, tz: ZoneInfo) -> datetime | None:
    """When ``type_name``'s windows of CST ``day`` were last written (None: it has none)."""
    start, end = day_bounds(day, tz)
    w = tower_windows.c
    return conn.execute(
        select(func.min(w.materialized_at)).where(
            w.type_name == type_name, w.granularity.in_(SUB_DAY), w.start >= start, w.start < end
        )
    ).scalar()


def window_run(store: Store, grain: str, period: date) -> datetime | None:
    r = tower_window_runs.c
    with store.connect() as conn:
        value = conn.execute(
            select(r.materialized_at).where(r.grain == grain, r.period_start == period)
        ).scalar_one_or_none()
    return value


@dataclass
class Audit:
    audited: int = 0
    problems: list[str] = field(default_factory=list)
    stale_entries: int = 0


def audit_day(store: Store, day: date, tz: ZoneInfo, *, activity_type: str | None = None) -> Audit:
    """Refs cover exactly the day's raw entries as of the materialization (no gap, no duplicate, no
    stranger), each level refers to exactly the finer windows present, each window's entry_count and
    chars agree with its refs, and every summary's refs resolve. Entries appended after the materialization (and conversation messages of the day
    ingested after it, not yet fed into ``activity_type`` while it is fed) are counted as stale,
    not as a gap."""
    feed = types_io.feeds_activity(store, activity_type)
    start, end = day_bounds(day, tz)
    audit = Audit()
    materialized = window_run(store, "day", day)
    e, w = tower_entries.c, tower_windows.c
    with store.connect() as conn:
        types = {t.name: t for t in types_io.list_types(store, include_archived=True)}
        entry_rows = list(
            conn.execute(
                select(e.entry_pk, e.type_name, e.group_value, e.chars, e.ingested_at).where(e.at >= start, e.at < end)
            ).mappings()
        )
        wins = list(
            conn.execute(
                select(tower_windows).where(
                    w.granularity.in_([str(g) for g in SUB_DAY]), w.start >= start, w.start < end
                )
            ).mappings()
        )
        audit.problems += _summary_ref_problems(conn, start, end)
        if materialized is not None and feed:
            # Conversation messages reach the activity type only when the day is (re)built: those
            # ingested after the run are not in the view either.
            m, c = messages.c, conversations.c
            audit.stale_entries += conn.execute(
                select(func.count())
                .select_from(messages.join(conversations, c.conversation_id == m.conversation_id))
                .where(m.at >= start, m.at < end, m.ingested_at > materialized, c.debug.is_(False))
            ).scalar_one()
    # Each type's windows of the day were written at one instant (a run, or a late entry's refresh).
    seen_at: dict[str, datetime] = {}
    for row in wins:
        seen_at[row["type_name"]] = max(row["materialized_at"], seen_at.get(row["type_name"], row["materialized_at"]))
    expected: dict[tuple[str, str], set[int]] = defaultdict(set)
    in_day: set[int] = set()
    for r in entry_rows:
        in_day.add(int(r["entry_pk"]))
        as_of = seen_at.get(r["type_name"], materialized)
        if as_of is not None and r["ingested_at"] > as_of:
            audit.stale_entries += 1
            continue
        expected[(r["type_name"], r["group_value"])].add(int(r["entry_pk"]))
    by_level: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for row in wins:
        by_level[(row["type_name"], row["granularity"], row["group_value"])].append(row)
    audit.audited = len(wins)
    for name, t in types.items():
        levels = _day_levels(t)
        if not levels:
            continue
        finest = levels[0]
        groups = {g for (tn, g) in expected if tn == name} | {
            g for (tn, lv, g) in by_level if tn == name and lv == str(finest)
        }
        for group in sorted(groups):
            refs: Counter[int] = Counter()
            for row in by_level.get((name, str(finest), group), []):
                refs.update(int(x) for x in row["refs"])
            want = expected.get((name, group), set())
            if gap := want - set(refs):
                audit.problems.append(f"{name} [{group}] {finest}: {len(gap)} entr(ies) in no window, e.g. {min(gap)}")
            if dup := [pk for pk, n in refs.items() if n > 1]:
                audit.problems.append(f"{name} [{group}] {finest}: entry {dup[0]} in {refs[dup[0]]} windows")
            if extra := set(refs) - in_day:
                audit.problems.append(f"{name} [{group}] {finest}: {len(extra)} ref(s) to entries not in the day")
            for g in levels[1:]:
                child = child_level(t.chain, g)
                present = {iso(r["start"]) for r in by_level.get((name, str(child), group), [])}
                referred: Counter[str] = Counter()
                for row in by_level.get((name, str(g), group), []):
                    referred.update(row["refs"])
                if missing := present - set(referred):
                    audit.problems.append(f"{name} [{group}] {g}: {len(missing)} {child} window(s) not referred to")
                if bad := set(referred) - present:
                    audit.problems.append(f"{name} [{group}] {g}: {len(bad)} ref(s) to absent {child} windows")
                if any(n > 1 for n in referred.values()):
                    audit.problems.append(f"{name} [{group}] {g}: a {child} window referred to twice")
    audit.problems += _count_problems(wins, wins, types, {int(r["entry_pk"]): int(r["chars"]) for r in entry_rows})
    return audit


def _count_problems(
    rows: list[Any], finer: list[Any], types: dict[str, MemoryType], chars_of: dict[int, int]
) -> list[str]:
    """Each window's entry_count and chars (what `windows` shows a client) agree with its refs: the
    entries it refers to, or the sums of the ``finer`` windows it refers to."""
    by_start = {(r["type_name"], r["granularity"], r["group_value"], iso(r["start"])): r for r in finer}
    out = []
    for r in rows:
        if r["ref_kind"] == "entry":
            n, chars = len(r["refs"]), sum(chars_of.get(int(x), 0) for x in r["refs"])
        else:
            t = types.get(r["type_name"])
            child = child_level(t.chain, Granularity(r["granularity"])) if t else None
            kids = [by_start.get((r["type_name"], str(child), r["group_value"], x)) for x in r["refs"]]
            n, chars = sum(k["entry_count"] for k in kids if k), sum(k["chars"] for k in kids if k)
        if (r["entry_count"], r["chars"]) != (n, chars):
            out.append(
                f"{r['type_name']} [{r['group_value']}] {r['granularity']} {iso(r['start'])}: entry_count "
                f"{r['entry_count']} and chars {r['chars']}, but its refs hold {n} entries and {chars} chars"
            )
    return out


def _summary_ref_problems(conn: Connection, start: datetime, end: datetime) -> list[str]:
    s, e = tower_summaries.c, tower_entries.c
    rows = list(conn.execute(select(s.record_id, s.ref_kind, s.refs).where(s.start >= start, s.start < end)))
    entry_refs = {int(x) for r in rows if r.ref_kind == "entry" for x in r.refs}
    record_refs = {int(x) for r in rows if r.ref_kind == "summary" for x in r.refs}
    problems = []
    found: set[int] = set()
    ids = sorted(entry_refs)
    for i in range(0, len(ids), BATCH):
        found |= set(conn.execute(select(e.entry_pk).where(e.entry_pk.in_(ids[i : i + BATCH]))).scalars())
    if missing := entry_refs - found:
        problems.append(f"summaries refer to {len(missing)} missing entr(ies), e.g. {min(missing)}")
    if record_refs:
        have = set(conn.execute(select(s.record_id).where(s.record_id.in_(sorted(record_refs)))).scalars())
        if missing_r := record_refs - have:
            problems.append(f"summaries refer to {len(missing_r)} missing summary record(s)")
    return problems


def audit_coarse(store: Store, g: Granularity, period: date, tz: ZoneInfo) -> Audit:
    """A week or month window refers to exactly the finer windows present inside it, and its
    entry_count and chars agree with what it refers to."""
    start = window_start(g, datetime(period.year, period.month, period.day, tzinfo=tz), tz)
    end = window_end(g, start, tz)
    audit = Audit()
    w = tower_windows.c
    with store.connect() as conn:
        types = {t.name: t for t in types_io.list_types(store, include_archived=True)}
        rows = list(conn.execute(select(tower_windows).where(w.granularity == str(g), w.start == start)).mappings())
        finer: list[Any] = []
        for row in rows:
            t = types.get(row["type_name"])
            child = child_level(t.chain, g) if t else None
            if child is None:
                continue
            kids = list(
                conn.execute(
                    select(tower_windows).where(
                        w.type_name == row["type_name"],
                        w.granularity == str(child),
                        w.group_value == row["group_value"],
                        w.start >= start,
                        w.start < end,
                    )
                ).mappings()
            )
            finer += kids
            present = {iso(k["start"]) for k in kids}
            if set(row["refs"]) != present or len(row["refs"]) != len(set(row["refs"])):
                audit.problems.append(
                    f"{row['type_name']} [{row['group_value']}] {g} {period}: refs differ from the {child} windows present"
                )
        e = tower_entries.c
        pks = sorted({int(x) for r in rows if r["ref_kind"] == "entry" for x in r["refs"]})
        chars_of: dict[int, int] = {}
        for i in range(0, len(pks), BATCH):
            q = select(e.entry_pk, e.chars).where(e.entry_pk.in_(pks[i : i + BATCH]))
            chars_of.update({int(pk): int(n) for pk, n in conn.execute(q)})
        audit.problems += _count_problems(rows, finer, types, chars_of)
        audit.problems += _summary_ref_problems(conn, start, end)
    audit.audited = len(rows)
    return audit
