"""Property tests of the CST calendar math (seed 000: 30-minute buckets, closed windows only)."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipeline.lib import timeutil as tu

CST = ZoneInfo("Asia/Shanghai")
days = st.dates(min_value=date(2000, 1, 1), max_value=date(2090, 12, 31))
instants = st.datetimes(min_value=datetime(2000, 1, 2), max_value=datetime(2090, 12, 30), timezones=st.just(UTC))


@given(days)
def test_a_cst_day_has_48_contiguous_half_hour_buckets(d):
    buckets = tu.buckets_of_day(d, CST)
    assert len(buckets) == 48
    start, end = tu.day_bounds(d, CST)
    assert buckets[0] == start and tu.bucket_end(buckets[-1]) == end
    assert all(tu.bucket_end(a) == b for a, b in zip(buckets, buckets[1:], strict=False))
    assert all(b.minute in (0, 30) and b.utcoffset() == timedelta(hours=8) for b in buckets)


@given(instants)
def test_every_instant_lies_in_exactly_its_bucket(at):
    b = tu.bucket_start(at, CST)
    assert b <= at < tu.bucket_end(b)
    assert tu.local_date(at, CST) == b.date()


@given(days, instants)
def test_closed_buckets_end_by_now(d, now):
    closed = tu.closed_buckets(d, now, CST)
    assert all(tu.bucket_end(b) <= now for b in closed)
    rest = tu.buckets_of_day(d, CST)[len(closed) :]
    assert all(tu.bucket_end(b) > now for b in rest)


near = st.dates(min_value=date(2024, 1, 1), max_value=date(2028, 12, 31))


@settings(deadline=None, max_examples=60)
@given(st.sampled_from(["day", "month", "year"]), near, near, near)
def test_expected_periods_never_reach_the_open_window(window, a, b, today):
    first, last = min(a, b), max(a, b)
    periods = tu.expected_periods(window, first, last, today)
    assert periods == sorted(set(periods))
    open_start = tu.period_start(window, today)
    assert all(p < open_start and p <= last for p in periods)
    for p in periods:
        start, end = tu.period_bounds(window, p, CST)
        assert start < end and tu.local_date(end - timedelta(seconds=1), CST) >= p
