"""Calendar logic in the configured zone (Asia/Shanghai by default). Pure functions."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

DEFAULT_TZ = "Asia/Shanghai"
BUCKET_MINUTES = 30
BUCKETS_PER_DAY = 24 * 60 // BUCKET_MINUTES


def zone(name: str = DEFAULT_TZ) -> ZoneInfo:
    return ZoneInfo(name)


def utcnow() -> datetime:
    return datetime.now(UTC)


# Instants the store accepts: from the Unix epoch to the end of year 9998 (UTC). Year 9999 would
# overflow the end of its own year (and every zone east of UTC); years before 1970 are no
# conversation this store can hold.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)  # exclusive
RANGE_TEXT = "supported: 1970-01-01 to 9998-12-31 UTC"


def instant_problem(dt: datetime) -> str | None:
    """Why ``dt`` cannot be stored or converted to any zone ("has ..." / "is ..."), or None."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        return "has no time zone offset"
    try:
        utc = dt.astimezone(UTC)
    except OverflowError:
        return f"is out of range ({RANGE_TEXT})"
    if not EARLIEST <= utc < LATEST:
        return f"is out of range ({RANGE_TEXT})"
    return None


_OFFSET = re.compile(r"[+-][\d:.,]+$")  # the offset that ends an aware datetime's text
_ISO_OFFSET = re.compile(r"[+-]\d\d(:?\d\d)?")
_NOT_ISO = "is not an ISO 8601 datetime (want e.g. 2026-01-15T10:00:00+08:00)"


def iso_offset(value: str) -> bool:
    """Whether the offset ending the text of an aware datetime is ISO 8601's ±HH:MM (±HHMM, ±HH):
    Python also reads one with seconds (+08:00:30, +08:00:30.5), which is refused everywhere."""
    offset = _OFFSET.search(value)
    return offset is None or _ISO_OFFSET.fullmatch(offset.group()) is not None


def parse_instant(text: object) -> datetime:
    """An aware datetime from ISO 8601 text with an offset (``Z`` allowed), within the supported
    range. The ValueError says what is wrong ("is ..." / "has ...") without echoing the text."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("is empty or not a string")
    value = text.strip()
    value = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(_NOT_ISO) from None
    if dt.tzinfo is not None and not iso_offset(value):
        raise ValueError(_NOT_ISO)
    problem = instant_problem(dt)
    if problem:
        raise ValueError(problem)
    return dt


def require_aware(dt: datetime, what: str = "datetime") -> datetime:
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"{what} must carry a time zone, got naive {dt.isoformat()}")
    return dt


def local_date(dt: datetime, tz: ZoneInfo) -> date:
    return require_aware(dt).astimezone(tz).date()


def day_start(d: date, tz: ZoneInfo) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=tz)


def day_bounds(d: date, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """[start, end) of a local calendar day."""
    return day_start(d, tz), day_start(d + timedelta(days=1), tz)


def month_start(d: date) -> date:
    return d.replace(day=1)


def next_month(d: date) -> date:
    d = month_start(d)
    return date(d.year + 1, 1, 1) if d.month == 12 else date(d.year, d.month + 1, 1)


def prev_month(d: date) -> date:
    d = month_start(d)
    return date(d.year - 1, 12, 1) if d.month == 1 else date(d.year, d.month - 1, 1)


def month_bounds(d: date, tz: ZoneInfo) -> tuple[datetime, datetime]:
    return day_start(month_start(d), tz), day_start(next_month(d), tz)


def year_bounds(d: date, tz: ZoneInfo) -> tuple[datetime, datetime]:
    return day_start(date(d.year, 1, 1), tz), day_start(date(d.year + 1, 1, 1), tz)


def fixed_offset(local: datetime) -> datetime:
    """``local`` with its zone's offset at that instant as a fixed tzinfo. Two datetimes of one
    ZoneInfo compare and hash by wall time, fold ignored: on a DST fall-back day the first and the
    repeated 01:30 were one dict key (one 90-minute chunk, or a KeyError). With fixed offsets they
    compare by instant; the label (``isoformat``) is unchanged."""
    offset = local.utcoffset()
    assert offset is not None
    return local.replace(tzinfo=timezone(offset), fold=0)


def window_floor(dt: datetime, tz: ZoneInfo, minutes: int) -> datetime:
    """Start of the local window of ``minutes`` (dividing the day) holding ``dt``, the fold kept:
    the repeated hour of a fall-back day has windows of its own (the chunks' buckets, the tower's
    10- and 30-minute windows)."""
    local = require_aware(dt).astimezone(tz)
    m = local.hour * 60 + local.minute
    m -= m % minutes
    return fixed_offset(local.replace(hour=m // 60, minute=m % 60, second=0, microsecond=0))


def elapsed_end(start: datetime, minutes: int) -> datetime:
    """``minutes`` after ``start`` in elapsed time (wall time would make a fall-back day's repeated
    half-hours end an hour late)."""
    return (start.astimezone(UTC) + timedelta(minutes=minutes)).astimezone(start.tzinfo)


def bucket_start(dt: datetime, tz: ZoneInfo) -> datetime:
    """Start of the local half-hour bucket holding ``dt``."""
    return window_floor(dt, tz, BUCKET_MINUTES)


def bucket_end(start: datetime) -> datetime:
    return elapsed_end(start, BUCKET_MINUTES)


def bucket_label(start: datetime) -> str:
    """ISO minute precision with offset, as in the seed: ``2026-07-18T06:00+08:00``."""
    return start.isoformat(timespec="minutes")


def buckets_of_day(d: date, tz: ZoneInfo) -> list[datetime]:
    start = day_start(d, tz)
    # Walk in UTC so a DST zone still gets wall-clock-correct buckets.
    out, cur = [], start.astimezone(UTC)
    end = day_start(d + timedelta(days=1), tz).astimezone(UTC)
    while cur < end:
        out.append(fixed_offset(cur.astimezone(tz)))
        cur += timedelta(minutes=BUCKET_MINUTES)
    return out


def closed_buckets(d: date, now: datetime, tz: ZoneInfo) -> list[datetime]:
    """Buckets of day ``d`` whose end is not after ``now``: only closed windows are summarized."""
    return [b for b in buckets_of_day(d, tz) if bucket_end(b) <= now]


def period_start(window: str, d: date) -> date:
    if window == "day":
        return d
    if window == "month":
        return month_start(d)
    if window == "year":
        return date(d.year, 1, 1)
    raise ValueError(f"unknown window {window!r}")


def period_bounds(window: str, start: date, tz: ZoneInfo) -> tuple[datetime, datetime]:
    if window == "day":
        return day_bounds(start, tz)
    if window == "month":
        return month_bounds(start, tz)
    if window == "year":
        return year_bounds(start, tz)
    raise ValueError(f"unknown window {window!r}")


def expected_periods(window: str, first: date, last: date, today: date) -> list[date]:
    """Closed period starts of ``window`` touching [first, last], capped below the open period of
    ``today``: a day ending today, the current month and the current year are never generated."""
    out: list[date] = []
    cur = period_start(window, first)
    open_start = period_start(window, today)
    while cur <= last and cur < open_start:
        out.append(cur)
        if window == "day":
            cur += timedelta(days=1)
        elif window == "month":
            cur = next_month(cur)
        else:
            cur = date(cur.year + 1, 1, 1)
    return out
