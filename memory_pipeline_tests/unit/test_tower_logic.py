"""Seed 004 pure rules: names, chains, the window calendar, the token budget's plan, the guardrails'
arithmetic, the fixed sections, recall cursors, and entry validation (property-based)."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipeline.tower.logic import (
    MINUTES,
    SECTIONS,
    Granularity,
    Strategy,
    TowerInputError,
    backoff_delay,
    check_chain,
    check_limit,
    child_level,
    decode_cursor,
    encode_cursor,
    is_settled,
    keyword_overlap,
    name_problem,
    parse_sections,
    plan_chunks,
    summary_levels,
    validate_entry,
    window_end,
    window_start,
    windows_between,
)

CST = ZoneInfo("Asia/Shanghai")


@pytest.mark.parametrize("name", ["worklog", "proj/decisions", "tool/errors", "a-b_c/D9"])
def test_seed_names_are_accepted(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("name", ["../x", "/x", "x/", "a//b", "a.b", "a b", "", "x\x00", "é", 7])
def test_names_that_could_escape_a_path_or_key_are_refused(name):
    assert name_problem(name)


def test_chain_rules():
    assert check_chain(["10min", "30min", "1h", "day", "week"])[-1] == Granularity.WEEK
    for bad in ([], ["day", "day"], ["week", "day"], ["2h"], "day"):
        with pytest.raises(TowerInputError):
            check_chain(bad)
    # A month's children are its days: weeks do not fit in months.
    chain = check_chain(["day", "week", "month"])
    assert child_level(chain, Granularity.MONTH) == Granularity.DAY
    assert child_level(chain, Granularity.WEEK) == Granularity.DAY
    assert child_level(chain, Granularity.DAY) is None
    # Nothing above the cap is summarized.
    assert summary_levels(chain, Granularity.WEEK) == [Granularity.DAY, Granularity.WEEK]


def test_window_calendar_in_cst_weeks_start_monday():
    at = datetime(2026, 1, 7, 15, 47, tzinfo=CST)  # a Wednesday
    assert window_start(Granularity.MIN10, at, CST) == datetime(2026, 1, 7, 15, 40, tzinfo=CST)
    assert window_start(Granularity.H3, at, CST) == datetime(2026, 1, 7, 15, 0, tzinfo=CST)
    week = window_start(Granularity.WEEK, at, CST)
    assert week == datetime(2026, 1, 5, tzinfo=CST) and week.weekday() == 0
    assert window_end(Granularity.WEEK, week, CST) == datetime(2026, 1, 12, tzinfo=CST)
    month = window_start(Granularity.MONTH, at.astimezone(UTC), CST)
    assert month == datetime(2026, 1, 1, tzinfo=CST)
    assert window_end(Granularity.MONTH, datetime(2025, 12, 1, tzinfo=CST), CST) == datetime(2026, 1, 1, tzinfo=CST)


@pytest.mark.parametrize(
    "zone, day",
    [("America/New_York", "2026-11-01"), ("America/New_York", "2026-03-08"), ("Australia/Lord_Howe", "2026-04-05")],
)
@pytest.mark.parametrize("g", [Granularity.MIN10, Granularity.MIN30, Granularity.H1, Granularity.H3])
def test_every_instant_of_a_dst_day_is_inside_its_own_window_and_windows_tile_the_day(zone, day, g):
    """MEMORY_TIMEZONE with DST: on a fall-back day an entry of the repeated hour got the 10-minute
    window of the first one (it lay outside its own window), and a "30min" window spanned 90
    minutes. Windows of 30 minutes or less tile elapsed time; an hour is the clock's hour (two
    elapsed hours, or 90 minutes, on a fall-back day). Either way they tile the day without gaps."""
    from datetime import date

    tz = ZoneInfo(zone)
    d = date.fromisoformat(day)
    start = datetime(d.year, d.month, d.day, tzinfo=tz).astimezone(UTC)
    end = datetime(d.year, d.month, d.day + 1, tzinfo=tz).astimezone(UTC)
    tiles = windows_between(g, start, end, tz)
    assert all(a < b for a, b in tiles) and all(b1 == a2 for (_, b1), (a2, _) in zip(tiles, tiles[1:], strict=False))
    assert tiles[0][0] <= start and tiles[-1][1] >= end
    t = start
    while t < end:
        s = window_start(g, t, tz)
        e = window_end(g, s, tz)
        assert s <= t < e and (s, e) in tiles, (g, t, s, e)
        if MINUTES[g] <= 30:
            assert e - s == timedelta(minutes=MINUTES[g])
        t += timedelta(minutes=5)


def test_settle_and_backoff_defaults():
    end = datetime(2026, 1, 5, 10, 0, tzinfo=CST)
    assert not is_settled(end, end + timedelta(minutes=4), timedelta(minutes=5))
    assert is_settled(end, end + timedelta(minutes=5), timedelta(minutes=5))
    base = timedelta(minutes=10)
    assert [backoff_delay(n, base) for n in (1, 2, 3)] == [base, 2 * base, 4 * base]


def test_budget_plan_direct_map_reduce_and_clipped():
    assert plan_chunks([10, 10], 100, 8).strategy == Strategy.DIRECT
    plan = plan_chunks([40, 40, 40, 500, 40], 100, 8)
    assert plan.strategy == Strategy.MAP_REDUCE
    assert plan.clipped == 1  # the one entry over the budget alone is counted, never silently dropped
    assert sum(len(c) for c in plan.chunks) == 4
    capped = plan_chunks([60] * 10, 100, 3)
    assert len(capped.chunks) == 3 and capped.clipped == 7


def test_sections_are_fixed_keys_in_fixed_order():
    parsed = parse_sections('{"decisions": ["use postgres"], "keywords": ["db"]}')
    assert tuple(parsed) == SECTIONS
    assert parsed["decisions"] == ["use postgres"] and parsed["todos"] == []
    headline = parse_sections("postgres · deploy · latency")
    assert tuple(headline) == SECTIONS and headline["keywords"] == ["postgres", "deploy", "latency"]
    assert keyword_overlap(parsed, parsed) == 1.0


def test_json_in_a_markdown_code_fence_is_read_as_its_sections():
    """Real models wrap JSON in a fence; read as text it became one conclusion of JSON fragments."""
    for fence in ("```json\n", "```\n", "```JSON\n  "):
        parsed = parse_sections(fence + '{"decisions": ["use postgres"], "todos": []}\n```')
        assert parsed["decisions"] == ["use postgres"] and parsed["conclusions"] == [], fence
    plain = parse_sections("the ``` fence inside a sentence")
    assert plain["conclusions"] == ["the ``` fence inside a sentence"]


def test_cursor_and_limit():
    assert decode_cursor(encode_cursor(300)) == 300
    assert decode_cursor(None) == 0
    for bad in ("zz", "!!", 5):
        with pytest.raises(TowerInputError):
            decode_cursor(bad)
    assert check_limit(None, 100, 1000) == 100
    for bad in (0, 1001, True, "5"):
        with pytest.raises(TowerInputError):
            check_limit(bad, 100, 1000)


NOW = datetime(2026, 1, 15, 2, 0, tzinfo=UTC)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["content", "at", "id", "group", "extra"]),
        json_values | st.sampled_from(["2026-01-05T10:00:00+08:00", "2999-01-01T00:00:00Z", "../x", "a b"]),
    )
    | json_values
)
def test_arbitrary_entries_are_accepted_or_refused_by_field_never_a_traceback(raw):
    try:
        entry = validate_entry(raw, group_field="project", now=NOW, where="line 1")
    except TowerInputError as exc:
        assert exc.field and str(exc).startswith("line 1: field '")
    else:
        assert entry.at <= NOW + timedelta(minutes=1)


def test_an_entry_time_finer_than_a_microsecond_is_refused_not_cut():
    """The store keeps microseconds: nanoseconds were cut without a word, so a retry whose at
    differed below a microsecond was taken as the same entry instead of the conflict it is."""
    for at in ("2026-01-05T10:00:00.123456789+08:00", "2026-01-05 10:00:00,1234567Z"):
        with pytest.raises(TowerInputError, match="field 'at': is more precise than a microsecond"):
            validate_entry({"content": "x", "at": at}, group_field=None, now=NOW, where="line 1")
    kept = validate_entry(
        {"content": "x", "at": "2026-01-05T10:00:00.123456+08:00"}, group_field=None, now=NOW, where="l"
    )
    assert kept.at.microsecond == 123456


def test_the_offline_aggregate_names_its_period_fits_the_hard_cut_and_says_nothing_without_words():
    from memory_pipeline.lib.text import hard_cap
    from memory_pipeline.tower.summaries import _offline_aggregate

    material = "# day 2026-01-06\n- postgres, migration, decided\n# day 2026-01-07\n- postgres, rollback"
    answer = _offline_aggregate("week 2026-01-05", material, 600)  # summary_max_chars
    sections = parse_sections(answer)
    assert sections["conclusions"] == ["week 2026-01-05: postgres, rollback, migration, decided"]
    assert sections["keywords"] == ["postgres", "rollback", "migration", "decided"]  # said twice first
    long = "\n".join(f"- word{i}x{'y' * 12}" for i in range(200))
    assert len(_offline_aggregate("week 2026-01-05", long, 200)) <= hard_cap(200)  # valid JSON, not cut
    assert parse_sections(_offline_aggregate("week 2026-01-05", long, 200))["keywords"]
    assert _offline_aggregate("week 2026-01-05", "# day 2026-01-06\n- ok, yes", 60) == ""
