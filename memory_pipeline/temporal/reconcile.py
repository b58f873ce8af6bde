"""Late data and new worlds: which materialized day / month / year periods no longer match their
input, found set-based from the ``temporal_period_runs`` records (no Dagster).

Only a closed period with a record (a completed run over all worlds) is judged; a period never
materialized is *Backfill missing*'s business, not the reconcile's.

- day: an eligible message (conversation not debug, platform != cron) timestamped in the CST day
  was ingested after the record's ``materialized_at`` (late data), or a world that existed before
  the day's end (``worlds.first_event_at``) has no row for it (a world that appeared, or whose
  first event moved earlier, after the day was materialized);
- month / year: a child row (day / month, placeholders included) was written after the record's
  ``materialized_at``, or a child period is itself stale (the month above a stale day, the year
  above a stale month). Such a parent *waits* for its children: repair them first; once they are
  written the parent is stale by its changed children, or not at all when they did not change.

A few queries in all, whatever the number of periods (ranges passed as one VALUES list, in batches
of ``BATCH``). The system rolls need a rebuild when a stale period lies in one of today's roll
scopes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from sqlalchemy import (
    CTE,
    ColumnElement,
    Connection,
    Date,
    ScalarSelect,
    String,
    and_,
    column,
    exists,
    func,
    or_,
    select,
    values,
)

from memory_pipeline.lib import settings
from memory_pipeline.lib.kinds import Window
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import UTCDateTime, conversations, counted_conversations, messages, worlds
from memory_pipeline.lib.text import short_hash
from memory_pipeline.lib.timeutil import expected_periods, local_date, next_month, period_bounds, utcnow
from memory_pipeline.temporal import logic
from memory_pipeline.temporal.tables import temporal_period_runs, temporal_summaries

BATCH = 1000  # periods per VALUES list (keeps bind parameters well under SQLite's and psycopg2's limits)
KEY_FORMAT = logic.KEY_FORMAT
period_key = logic.period_key


def next_period(window: str, period_start: date) -> date:
    if window == Window.DAY:
        return period_start + timedelta(days=1)
    if window == Window.MONTH:
        return next_month(period_start)
    return date(period_start.year + 1, 1, 1)


def spans(window: str, starts: list[date]) -> list[tuple[date, date]]:
    """Runs of consecutive periods, in order, as (first, last): one operation run each."""
    out: list[tuple[date, date]] = []
    for d in sorted(set(starts)):
        if out and next_period(window, out[-1][1]) == d:
            out[-1] = (out[-1][0], d)
        else:
            out.append((d, d))
    return out


@dataclass(frozen=True)
class StalePeriod:
    window: str
    period_start: date
    reasons: tuple[str, ...]
    # Changes whenever the cause changes (newer late data, another missing world, another child
    # write, a new run record): a sensor keys its request on it, so one staleness is requested once.
    marker: str
    # Keys of stale child periods: repair them first (a month above a stale day, a year above a
    # stale month). Empty when the period can be repaired now.
    waits_for: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return period_key(self.window, self.period_start)

    @property
    def ready(self) -> bool:
        return not self.waits_for


@dataclass
class Staleness:
    periods: list[StalePeriod] = field(default_factory=list)
    # Roll kinds (past_days / past_months / past_years) of ``today`` that read a stale period.
    system_rolls: tuple[str, ...] = ()
    today: date | None = None

    def of(self, window: str) -> list[StalePeriod]:
        return [p for p in self.periods if p.window == window]

    @property
    def days(self) -> list[date]:
        return [p.period_start for p in self.of(Window.DAY)]

    @property
    def months(self) -> list[date]:
        return [p.period_start for p in self.of(Window.MONTH)]

    @property
    def years(self) -> list[date]:
        return [p.period_start for p in self.of(Window.YEAR)]

    @property
    def reasons(self) -> list[tuple[str, str, str]]:
        """(window, partition key, reason) rows, days first."""
        return [(str(p.window), p.key, r) for p in self.periods for r in p.reasons]

    @property
    def ready(self) -> list[StalePeriod]:
        """What can be repaired now: stale periods with no stale period below them."""
        return [p for p in self.periods if p.ready]

    @property
    def needs_system_rolls(self) -> bool:
        return bool(self.system_rolls)

    def __bool__(self) -> bool:
        return bool(self.periods)


_Row = TypeVar("_Row")
DayRecord = tuple[date, datetime, datetime, datetime]  # period_start, lo, hi, materialized_at
ParentRecord = tuple[str, date, str, date, date, datetime]  # window, start, child, first, last, materialized_at


def _batches(rows: list[_Row]) -> list[list[_Row]]:
    return [rows[i : i + BATCH] for i in range(0, len(rows), BATCH)]


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def late_messages(conn: Connection, days: list[DayRecord]) -> dict[date, tuple[int, datetime]]:
    """Per recorded day (period_start, lo, hi, materialized_at): eligible messages ingested after the
    day's materialized_at (count, newest). The days are one VALUES list per ``BATCH``, each probed
    by a correlated subquery: a range scan of ``ix_messages_at`` per day on SQLite and PostgreSQL
    alike (a join on the range would leave the plan to the planner). The newest first, then the
    count only for the few days that have one."""
    newest: dict[date, datetime] = {}
    for batch in _batches(days):
        r = _day_ranges(batch)
        q = select(r.c.p, _late(r, func.max(messages.c.ingested_at))).select_from(r)
        newest.update({p: at for p, at in conn.execute(q) if at is not None})
    out: dict[date, tuple[int, datetime]] = {}
    for batch in _batches([d for d in days if d[0] in newest]):
        r = _day_ranges(batch)
        q = select(r.c.p, _late(r, func.count())).select_from(r)
        out.update({p: (n, newest[p]) for p, n in conn.execute(q) if n})
    return out


def _day_ranges(batch: list[DayRecord]) -> CTE:
    return (
        values(
            column("p", Date),
            column("lo", UTCDateTime),
            column("hi", UTCDateTime),
            column("materialized_at", UTCDateTime),
            name="r",
        )
        .data(batch)
        .cte("r")
    )


def _late(r: CTE, aggregate: ColumnElement[Any]) -> ScalarSelect[Any]:
    """``aggregate`` over the eligible messages of r's day ingested after its materialized_at."""
    return (
        select(aggregate)
        .select_from(messages)
        .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
        .where(messages.c.at >= r.c.lo, messages.c.at < r.c.hi, messages.c.ingested_at > r.c.materialized_at)
        .where(counted_conversations())
        .scalar_subquery()
    )


def missing_worlds(
    conn: Connection, periods: list[tuple[date, datetime]], window: str = Window.DAY
) -> dict[date, tuple[int, str, str]]:
    """Per (period_start, end) of ``window``: worlds that existed before its end but have no row
    (count, first, last id)."""
    out: dict[date, tuple[int, str, str]] = {}
    for batch in _batches(periods):
        r = values(column("period_start", Date), column("hi", UTCDateTime), name="r").data(batch).cte("r")
        t = temporal_summaries.c
        has_row = exists().where(
            t.world_id == worlds.c.world_id, t.window == window, t.period_start == r.c.period_start
        )
        q = (
            select(r.c.period_start, func.count(), func.min(worlds.c.world_id), func.max(worlds.c.world_id))
            .select_from(r)
            .join(worlds, worlds.c.first_event_at < r.c.hi)
            .where(~has_row)
            .group_by(r.c.period_start)
        )
        out.update({p: (n, lo, hi) for p, n, lo, hi in conn.execute(q)})
    return out


def changed_children(conn: Connection, parents: list[ParentRecord]) -> dict[tuple[str, date], tuple[int, datetime]]:
    """Per recorded month / year: child rows written after its materialized_at (count, newest)."""
    out: dict[tuple[str, date], tuple[int, datetime]] = {}
    for batch in _batches(parents):
        r = (
            values(
                column("window", String),
                column("period_start", Date),
                column("child", String),
                column("first", Date),
                column("last", Date),
                column("materialized_at", UTCDateTime),
                name="r",
            )
            .data(batch)
            .cte("r")
        )
        t = temporal_summaries.c
        q = (
            select(r.c.window, r.c.period_start, func.count(), func.max(t.updated_at))
            .select_from(r)
            .join(
                temporal_summaries,
                and_(
                    t.window == r.c.child,
                    t.period_start >= r.c.first,
                    t.period_start <= r.c.last,
                    t.updated_at > r.c.materialized_at,
                ),
            )
            .group_by(r.c.window, r.c.period_start)
        )
        out.update({(w, p): (n, newest) for w, p, n, newest in conn.execute(q)})
    return out


def _parent_start(window: str, child_start: date) -> date:
    return child_start.replace(day=1) if window == Window.MONTH else date(child_start.year, 1, 1)


def stale_periods(store: Store, tz: ZoneInfo, now: datetime | None = None) -> Staleness:
    """Every closed, materialized day / month / year whose rows no longer match their input, with
    the reasons, days first, oldest first. Never an open or future period."""
    now = min(now or utcnow(), utcnow())  # never a future 'now'
    today = local_date(now, tz)
    with store.connect() as conn:
        records: dict[tuple[str, date], dict[str, Any]] = {}
        for run in conn.execute(select(temporal_period_runs)).mappings():
            lo, hi = period_bounds(run["window"], run["period_start"], tz)
            if hi <= now:  # closed only: an open period is never stale
                records[(run["window"], run["period_start"])] = dict(run) | {"lo": lo, "hi": hi}
        days = sorted(
            (p, rec["lo"], rec["hi"], rec["materialized_at"]) for (w, p), rec in records.items() if w == Window.DAY
        )
        late = late_messages(conn, days) if days else {}
        missing = missing_worlds(conn, [(p, hi) for p, _lo, hi, _at in days]) if days else {}
        parents: list[ParentRecord] = []
        for (w, p), rec in sorted(records.items()):
            if w in (Window.MONTH, Window.YEAR):
                last = next_period(w, p) - timedelta(days=1)
                parents.append((w, p, logic.CHILD_WINDOW[Window(w)], p, last, rec["materialized_at"]))
        changed = changed_children(conn, parents) if parents else {}

    stale: dict[tuple[str, date], StalePeriod] = {}
    for p in sorted(set(late) | set(missing)):
        rec, reasons = records[(Window.DAY, p)], []
        if p in late:
            n, newest = late[p]
            at = newest.astimezone(tz).isoformat(timespec="seconds")
            reasons.append(f"{n} message(s) ingested after the day was materialized (newest {at})")
        if p in missing:
            n, first_id, last_id = missing[p]
            names = first_id if n == 1 else f"{first_id} .. {last_id}"
            reasons.append(f"{n} world(s) without a row ({names})")
        cause: list[object] = [
            _iso(rec["materialized_at"]),
            _iso(late.get(p, (0, None))[1]),
            list(missing.get(p, (0, None, None))),
        ]
        stale[(Window.DAY, p)] = StalePeriod(Window.DAY, p, tuple(reasons), short_hash(cause))

    for window in (Window.MONTH, Window.YEAR):
        child = logic.CHILD_WINDOW[window]
        below: dict[date, list[str]] = defaultdict(list)
        for (w, p), sp in sorted(stale.items()):
            if w == child:
                below[_parent_start(window, p)].append(sp.key)
        for p in sorted({p for w, p in records if w == window} & (set(below) | {p for w, p in changed if w == window})):
            rec, reasons = records[(window, p)], []
            n_changed, newest_child = changed.get((window, p), (0, None))
            if n_changed and newest_child is not None:
                reasons.append(
                    f"{n_changed} {child} row(s) written after the {window} was materialized "
                    f"(newest {newest_child.astimezone(tz).isoformat(timespec='seconds')})"
                )
            waits = tuple(below.get(p, ()))
            if waits:
                reasons.append(
                    f"{len(waits)} stale {child}(s) below: {', '.join(waits[:3])}{' ...' if len(waits) > 3 else ''}"
                )
            cause = [_iso(rec["materialized_at"]), _iso(newest_child), n_changed]
            stale[(window, p)] = StalePeriod(window, p, tuple(reasons), short_hash(cause), waits)

    periods = [stale[k] for k in sorted(stale, key=lambda k: (list(Window).index(Window(k[0])), k[1]))]
    rolls = []
    for kind in logic.SYS_ROLL_KINDS:
        roll_window, roll_first, roll_end = logic.sys_roll_scope(kind, today)
        if any(
            sp.window == roll_window
            and sp.period_start < roll_end
            and (roll_first is None or sp.period_start >= roll_first)
            for sp in periods
        ):
            rolls.append(str(kind))
    return Staleness(periods, tuple(rolls), today)


def incomplete_periods(store: Store, tz: ZoneInfo, now: datetime | None = None) -> dict[str, list[date]]:
    """Closed days, months and years with rows but no run that vouched for every world's: no run
    record (a world's hard failure, a run over some worlds only), or a row from an answer the
    provider cut or left empty. The reconcile judges only recorded periods and ``never_materialized``
    only periods without rows, so neither names them; ``backfill`` (mode changed) re-runs them."""
    now = min(now or utcnow(), utcnow())
    today = local_date(now, tz)
    first_day = date.fromisoformat(settings.partition_start())
    ts, r = temporal_summaries.c, temporal_period_runs.c
    out: dict[str, list[date]] = {}
    with store.connect() as conn:
        recorded = set(conn.execute(select(r.window, r.period_start)).tuples().all())
        for window in (Window.DAY, Window.MONTH, Window.YEAR):
            closed_before = expected_periods(str(window), first_day, today, today)
            if not closed_before:
                continue
            q = select(ts.period_start).where(
                ts.window == str(window), ts.period_start >= first_day, ts.period_start <= closed_before[-1]
            )
            written = set(conn.execute(q.distinct()).scalars())
            unrecorded = {p for p in written if (str(window), p) not in recorded}
            found = sorted(unrecorded | unvouched_periods(conn, str(window), sorted(written - unrecorded)))
            if found:
                out[str(window)] = found
    return out


def never_materialized(store: Store, tz: ZoneInfo, now: datetime | None = None) -> dict[str, list[date]]:
    """Closed days, months and years (from MEMORY_PARTITION_START) with no summary row nor run
    record, that hold counted messages or lie in a closed month or year that does: nothing was ever
    materialized for them, so nothing reads them as stale either. A month's run reads every day of
    it from the first event on, and a year's every month (placeholders included), so those are
    listed too: the backfills named, run in order, build the month. One indexed probe of the
    messages per period without rows (and per closed month and year above one)."""
    now = min(now or utcnow(), utcnow())
    today = local_date(now, tz)
    first_day = date.fromisoformat(settings.partition_start())
    ts = temporal_summaries.c
    with store.connect() as conn:
        first_at = conn.execute(select(func.min(messages.c.at))).scalar()
        if first_at is None:
            return {}
        # A month's run needs the rows of its days from the first event on (none before it), a year's
        # those of its months.
        first = max(local_date(first_at, tz), first_day)
        done = {(str(w), p) for w, p in conn.execute(select(ts.window, ts.period_start).distinct())}
        done |= {
            (str(w), p)
            for w, p in conn.execute(select(temporal_period_runs.c.window, temporal_period_runs.c.period_start))
        }
        closed = {w: set(expected_periods(str(w), first, today, today)) for w in (Window.MONTH, Window.YEAR)}
        held: dict[tuple[Window, date], bool] = {}

        def holds(window: Window, start: date) -> bool:
            if (window, start) not in held:
                lo, hi = period_bounds(window, start, tz)
                probe = (
                    select(messages.c.message_id)
                    .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
                    .where(messages.c.at >= lo, messages.c.at < hi, counted_conversations())
                    .limit(1)
                )
                held[(window, start)] = conn.execute(probe).first() is not None
            return held[(window, start)]

        def needed(window: Window, start: date) -> bool:
            month, year = (Window.MONTH, start.replace(day=1)), (Window.YEAR, start.replace(month=1, day=1))
            above = {Window.DAY: [month, year], Window.MONTH: [year], Window.YEAR: []}[window]
            return holds(window, start) or any(p in closed[w] and holds(w, p) for w, p in above)

        out: dict[str, list[date]] = {}
        for window in (Window.DAY, Window.MONTH, Window.YEAR):
            for start in expected_periods(str(window), first, today, today):
                if (str(window), start) not in done and needed(window, start):
                    out.setdefault(str(window), []).append(start)
    return out


def unvouched_periods(conn: Connection, window: str, periods: Sequence[date]) -> set[date]:
    """Of ``periods``, those with a row written from an answer the provider cut or left empty: it
    has no material fingerprint, so no run takes it as done (asked again)."""
    t = temporal_summaries.c
    # A model's row (a summary, or its empty_summary placeholder) with no fingerprint; the
    # placeholders of no material (no_sessions, empty, ...) have none by design.
    answered = or_(t.empty_reason.is_(None), t.empty_reason == str(logic.EmptyReason.EMPTY_SUMMARY))
    out: set[date] = set()
    for i in range(0, len(periods), BATCH):
        q = select(t.period_start).where(
            t.window == window, t.period_start.in_(list(periods[i : i + BATCH])), t.material_fp.is_(None), answered
        )
        out |= set(conn.execute(q.distinct()).scalars())
    return out


def changed_periods(
    store: Store,
    tz: ZoneInfo,
    window: str,
    periods: list[date],
    built_with: tuple[str, str, str],
    now: datetime | None = None,
) -> dict[date, str]:
    """Of ``periods`` of ``window``, those a run would change, with the reason: no record (never
    materialized over all worlds, or a run that failed for some worlds), a record built with
    another (model, prompt version, settings fingerprint) than ``built_with``, or stale (late
    data, a new world, child rows written since). The others are skipped by an incremental run:
    their rows are what a run would write. A few queries, whatever the number of periods."""
    r = temporal_period_runs.c
    recs: dict[date, tuple[Any, ...]] = {}
    with store.connect() as conn:
        for i in range(0, len(periods), BATCH):
            q = select(r.period_start, r.model, r.prompt_version, r.config_fp).where(
                r.window == window, r.period_start.in_(periods[i : i + BATCH])
            )
            recs.update({p: tuple(rest) for p, *rest in conn.execute(q)})
        unvouched = unvouched_periods(conn, window, periods)
    stale = {sp.period_start: sp for sp in stale_periods(store, tz, now).of(window)}
    out = {}
    for p in periods:
        if p not in recs:
            # A run records a period only when it vouches for every world's row: a hard failure or
            # an answer the provider cut leaves none, as does a run over some worlds only.
            out[p] = "no record: never completed over all worlds (not run, a failure, or an answer the provider cut)"
        elif recs[p] != tuple(built_with):
            out[p] = "built with another model, prompt version or settings"
        elif p in unvouched:
            out[p] = "a row written from an answer the provider cut or left empty (asked again)"
        elif p in stale:
            out[p] = "; ".join(stale[p].reasons)
    return out
