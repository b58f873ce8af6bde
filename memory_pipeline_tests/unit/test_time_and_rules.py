"""Pure rules of seed 000: buckets, gates, fingerprints, keys, TTLs, truncation, cascade dates."""

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from memory_pipeline.lib import timeutil as tu
from memory_pipeline.lib.settings import ConfigError
from memory_pipeline.lib.text import hard_cap, hard_cut
from memory_pipeline.temporal import logic
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.config import load as load_temporal_config
from memory_pipeline_tests.conftest import CST, cst


def test_buckets_are_cst_half_hours():
    at = datetime(2026, 7, 17, 22, 12, tzinfo=UTC)  # 06:12 CST on the 18th
    b = tu.bucket_start(at, CST)
    assert tu.bucket_label(b) == "2026-07-18T06:00+08:00"
    assert tu.bucket_end(b) == cst(2026, 7, 18, 6, 30)
    assert tu.bucket_label(tu.bucket_start(cst(2026, 7, 18, 6, 30), CST)) == "2026-07-18T06:30+08:00"
    assert tu.bucket_label(tu.bucket_start(cst(2026, 7, 18, 6, 29, 59), CST)) == "2026-07-18T06:00+08:00"
    assert tu.BUCKET_MINUTES == 30
    assert len(tu.buckets_of_day(date(2026, 7, 18), CST)) == 48


def test_cst_day_boundary_is_utc_16h():
    start, end = tu.day_bounds(date(2026, 7, 18), CST)
    assert start.astimezone(UTC) == datetime(2026, 7, 17, 16, tzinfo=UTC)
    assert end - start == timedelta(days=1)
    assert tu.local_date(datetime(2026, 7, 17, 15, 59, tzinfo=UTC), CST) == date(2026, 7, 17)
    assert tu.local_date(datetime(2026, 7, 17, 16, 0, tzinfo=UTC), CST) == date(2026, 7, 18)


def test_closed_buckets_never_include_the_open_one():
    closed = tu.closed_buckets(date(2026, 7, 18), cst(2026, 7, 18, 6, 45), CST)
    assert tu.bucket_label(closed[-1]) == "2026-07-18T06:00+08:00"
    assert len(closed) == 13  # 00:00 .. 06:00
    assert tu.closed_buckets(date(2026, 7, 18), cst(2026, 7, 18, 0, 29), CST) == []


def test_expected_periods_never_reach_the_open_window():
    today = date(2026, 1, 15)
    days = tu.expected_periods("day", date(2026, 1, 10), date(2026, 3, 1), today)
    assert days[0] == date(2026, 1, 10) and days[-1] == date(2026, 1, 14)
    assert tu.expected_periods("month", date(2025, 11, 3), date(2026, 6, 1), today) == [
        date(2025, 11, 1),
        date(2025, 12, 1),
    ]
    assert tu.expected_periods("year", date(2024, 5, 1), date(2026, 12, 31), today) == [
        date(2024, 1, 1),
        date(2025, 1, 1),
    ]


def test_inclusion_rules():
    assert logic.is_eligible_conversation("local", False)
    assert logic.is_eligible_conversation("remote:coding", False)
    assert logic.is_eligible_conversation("discord", False)
    assert not logic.is_eligible_conversation("local", True)
    assert not logic.is_eligible_conversation("cron", False)
    assert logic.is_material("user", "hello")
    assert logic.is_material("assistant", "done", [{"name": "x"}])
    assert not logic.is_material("assistant", "", [{"name": "x"}])
    assert not logic.is_material("assistant", "   ")
    assert not logic.is_material("tool", "result text")
    assert not logic.is_material("system", "be nice")


def test_watermark_gate_is_max_of_watermark_and_day_start():
    day = date(2026, 7, 18)
    assert logic.watermark_gate(None, day, CST) == cst(2026, 7, 18)
    assert logic.watermark_gate(cst(2026, 7, 17, 23, 50), day, CST) == cst(2026, 7, 18)
    assert logic.watermark_gate(cst(2026, 7, 18, 6, 10), day, CST) == cst(2026, 7, 18, 6, 10)
    # The day start is inclusive, the watermark exclusive.
    assert logic.after_gate(cst(2026, 7, 18), None, day, CST)
    assert not logic.after_gate(cst(2026, 7, 18, 6, 10), cst(2026, 7, 18, 6, 10), day, CST)
    assert logic.after_gate(cst(2026, 7, 18, 6, 11), cst(2026, 7, 18, 6, 10), day, CST)


def test_plan_chunks_replays_the_tick_over_closed_buckets():
    day = date(2026, 7, 18)
    msgs = [
        ("a", cst(2026, 7, 18, 6, 5)),
        ("b", cst(2026, 7, 18, 6, 20)),
        ("c", cst(2026, 7, 18, 7, 40)),
        ("y", cst(2026, 7, 17, 23, 59)),
    ]  # yesterday: never in today's chunks
    plan = logic.plan_chunks(msgs, day, cst(2026, 7, 18, 8, 0), CST)
    assert [(tu.bucket_label(p.bucket), p.seq, p.message_ids, p.late) for p in plan] == [
        ("2026-07-18T06:00+08:00", 0, ("a", "b"), 0),
        ("2026-07-18T07:30+08:00", 0, ("c",), 0),
    ]
    assert plan[0].watermark_message_id == "b" and plan[0].watermark_at == cst(2026, 7, 18, 6, 20)
    # At 07:45 the 07:30 bucket is still open: only the first chunk.
    assert len(logic.plan_chunks(msgs, day, cst(2026, 7, 18, 7, 45), CST)) == 1
    # With a and b chunked (watermark at b) only c remains.
    state = dict(chunked_ids={"a", "b"}, bucket_seqs={cst(2026, 7, 18, 6): 0}, watermark_at=cst(2026, 7, 18, 6, 20))
    again = logic.plan_chunks(msgs, day, cst(2026, 7, 18, 8, 0), CST, **state)
    assert [(p.message_ids, p.seq) for p in again] == [(("c",), 0)]
    # Everything chunked: no chunk.
    done = dict(state, chunked_ids={"a", "b", "c"}, watermark_at=cst(2026, 7, 18, 7, 40))
    assert logic.plan_chunks(msgs, day, cst(2026, 7, 18, 9, 0), CST, **done) == []


def test_plan_chunks_appends_late_arrivals_by_source_set_not_by_timestamp():
    day = date(2026, 7, 18)
    chunked = dict(
        chunked_ids={"a", "b", "c"},
        bucket_seqs={cst(2026, 7, 18, 6): 0, cst(2026, 7, 18, 7, 30): 2},
        watermark_at=cst(2026, 7, 18, 7, 40),
    )
    msgs = [
        ("a", cst(2026, 7, 18, 6, 5)),
        ("b", cst(2026, 7, 18, 6, 20)),
        ("c", cst(2026, 7, 18, 7, 40)),
        ("late-early", cst(2026, 7, 18, 6, 10)),  # an earlier bucket, after a later one was chunked
        ("same-instant", cst(2026, 7, 18, 7, 40)),  # exactly at the watermark
        ("after-wm", cst(2026, 7, 18, 7, 45)),  # after the gate, but its bucket has chunks already
        ("new", cst(2026, 7, 18, 8, 5)),  # the normal path: after the gate
        ("open", cst(2026, 7, 18, 8, 31)),  # the open bucket waits
        ("never", cst(2026, 7, 18, 2, 0)),  # a bucket nobody chunked yet
    ]
    plan = logic.plan_chunks(msgs, day, cst(2026, 7, 18, 8, 40), CST, **chunked)
    assert [(tu.bucket_label(p.bucket), p.seq, p.message_ids, p.late) for p in plan] == [
        ("2026-07-18T02:00+08:00", 0, ("never",), 1),
        ("2026-07-18T06:00+08:00", 1, ("late-early",), 1),
        ("2026-07-18T07:30+08:00", 3, ("same-instant", "after-wm"), 2),
        ("2026-07-18T08:00+08:00", 0, ("new",), 0),
    ]
    assert plan[1].watermark_message_id == "late-early" and plan[1].watermark_at == cst(2026, 7, 18, 6, 10)
    planned = [i for p in plan for i in p.message_ids]
    assert len(planned) == len(set(planned)) and not set(planned) & chunked["chunked_ids"]
    # Ticking again with those chunks added plans nothing but the bucket that closed since.
    after = dict(
        chunked_ids=chunked["chunked_ids"] | set(planned),
        bucket_seqs={p.bucket: p.seq for p in plan},
        watermark_at=cst(2026, 7, 18, 8, 5),
    )  # the newest watermark
    assert logic.plan_chunks(msgs, day, cst(2026, 7, 18, 8, 40), CST, **after) == []
    assert [p.message_ids for p in logic.plan_chunks(msgs, day, cst(2026, 7, 18, 9), CST, **after)] == [("open",)]


def test_pack_keeps_order_and_progress():
    assert logic.pack([3, 3, 3, 3], 6) == [[0, 1], [2, 3]]
    assert logic.pack([5, 9, 2], 6) == [[0], [1], [2]]  # an item over the budget stands alone
    assert logic.pack([5, 9, 2], 6, min_group=2) == [[0, 1], [2]]  # a reduction always shrinks
    assert logic.pack([], 6) == []
    groups = logic.pack([1] * 10, 3)
    assert [i for g in groups for i in g] == list(range(10)) and all(len(g) <= 3 for g in groups)


def test_peer_sources_fp_excludes_the_viewer_and_is_canonical():
    a = ("conv-a", cst(2026, 7, 18, 6, 30), "planning the garden")
    b = ("conv-b", cst(2026, 7, 18, 6, 30), "fixing the deploy")
    v = ("viewer", cst(2026, 7, 18, 6, 30), "my own chat")
    fp = logic.peer_sources_fp([a, b, v], "viewer")
    assert fp == logic.peer_sources_fp([v, b, a], "viewer") == logic.peer_sources_fp([a, b], None)
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert fp != logic.peer_sources_fp([a, b, v], "conv-a")
    assert fp != logic.peer_sources_fp([a, (b[0], b[1], "fixing the deploy!"), v], "viewer")


def test_cache_keys_follow_the_seed_layout():
    fp = "0123456789abcdef"
    key = logic.peer_roll_key("anima:temporal", "w1", date(2026, 7, 18), cst(2026, 7, 18, 6, 0), fp)
    assert key == "anima:temporal:w1:peer_roll:2026-07-18:2026-07-18T06:00+08:00:0123456789abcdef"
    today = date(2026, 7, 18)
    assert (
        logic.sys_roll_key("anima:temporal", "w1", "past_days", today)
        == "anima:temporal:w1:sys_roll:past_days:2026-07-18"
    )
    assert logic.sys_roll_key("p", "w1", "past_months", today) == "p:w1:sys_roll:past_months:2026-07"
    assert logic.sys_roll_key("p", "w1", "past_years", today) == "p:w1:sys_roll:past_years:2026"


def test_ttls():
    assert logic.SYS_ROLL_TTL_SECONDS == {"past_days": 86400, "past_months": 31 * 86400, "past_years": 366 * 86400}
    assert TemporalSummaryConfig().peer_roll_ttl_seconds == 36 * 3600


def test_sys_roll_scopes():
    today = date(2026, 7, 18)
    assert logic.sys_roll_scope("past_days", today) == ("day", date(2026, 7, 1), today)
    assert logic.sys_roll_scope("past_months", today) == ("month", date(2026, 1, 1), date(2026, 7, 1))
    assert logic.sys_roll_scope("past_years", today) == ("year", None, date(2026, 1, 1))


def test_hard_cut_is_ceil_one_and_a_half_times_the_cap():
    assert hard_cap(100) == 150 and hard_cap(50) == 75 and hard_cap(33) == 50 and hard_cap(1500) == 2250
    assert len(hard_cut("x" * 400, 100)) == 150
    assert hard_cut("short headline", 100) == "short headline"
    assert len(hard_cut("字" * 400, 50)) == 75


def test_system_block_near_to_far_and_truncation():
    block = logic.assemble_system_block({"past_years": "Y", "past_days": "D", "past_months": "M"}, 1500)
    assert block.text == "<temporal_summary>\nPast days: D\nPast months: M\nPast years: Y\n</temporal_summary>"
    assert block.rolls_used == ("past_days", "past_months", "past_years") and not block.truncated
    assert logic.assemble_system_block({"past_days": None, "past_months": "", "past_years": None}, 1500).text == ""
    long = logic.assemble_system_block({"past_days": "d" * 900, "past_months": "m" * 900}, 1500)
    assert long.truncated and len(long.text) == 1500
    assert long.text.startswith("<temporal_summary>") and long.text.endswith("</temporal_summary>")
    assert logic.truncation_source_ref(date(2026, 7, 18)) == "temporal_summary:system_truncated:2026-07-18"


def test_config_defaults_and_file(tmp_path):
    c = TemporalSummaryConfig()
    assert (
        c.chunk_max_chars,
        c.peer_roll_max_chars,
        c.global_day_max_chars,
        c.month_max_chars,
        c.year_max_chars,
        c.system_prompt_max_chars,
    ) == (50, 100, 100, 100, 100, 1500)
    assert c.enabled and c.redis_key_prefix == "anima:temporal"
    f = tmp_path / "memory.yaml"
    f.write_text("memory:\n  temporal_summary:\n    enabled: false\n    chunk_max_chars: 40\n")
    loaded = load_temporal_config(f)
    assert loaded.enabled is False and loaded.chunk_max_chars == 40 and loaded.month_max_chars == 100


@pytest.mark.parametrize(
    "yaml_body, message",
    [
        ("chunk_chars: 40", "unknown key(s) in memory.temporal_summary: chunk_chars"),
        ("month_max_chars: -1", "memory.temporal_summary.month_max_chars: must be a positive integer, got -1"),
        ("enabled: 'no'", "memory.temporal_summary.enabled: expected bool, got str 'no'"),
        ("chunk_max_chars: true", "memory.temporal_summary.chunk_max_chars: expected int, got bool True"),
        ("chunk_max_chars: 1.5", "memory.temporal_summary.chunk_max_chars: expected int, got float 1.5"),
        ("redis_key_prefix: 'a b'", "redis_key_prefix: must be a non-empty string without spaces"),
        ("redis_key_prefix: 7", "memory.temporal_summary.redis_key_prefix: expected str, got int 7"),
    ],
)
def test_config_types_are_strict_and_errors_name_the_key(tmp_path, yaml_body, message):
    f = tmp_path / "memory.yaml"
    f.write_text("memory:\n  temporal_summary:\n    " + yaml_body + "\n")
    with pytest.raises(ConfigError) as exc:
        load_temporal_config(f)
    assert str(exc.value).startswith(f"{f}: ") and message in str(exc.value)


@pytest.mark.parametrize(
    "content, message",
    [
        ("memory: [1, 2]", "expected a mapping with a 'memory' key"),
        ("memory:\n  temporal_summary: 3", "memory.temporal_summary must be a mapping, got int"),
        ("memory: {", "not valid YAML"),
    ],
)
def test_config_file_shape_errors_name_the_file(tmp_path, content, message):
    f = tmp_path / "memory.yaml"
    f.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_temporal_config(f)


def test_a_config_file_that_is_not_yaml_is_one_line_naming_the_line_and_column(tmp_path):
    """It was the parser's four lines (its "in <file>, line 3, column 17" twice)."""
    f = tmp_path / "memory.yaml"
    f.write_text("memory:\n  sleep:\n    pinned_top: [1\n")
    with pytest.raises(ConfigError) as exc:
        load_temporal_config(f)
    said = str(exc.value)
    assert "\n" not in said, said
    assert (
        said == f"{f}:4:1: not valid YAML (while parsing a flow sequence expected ',' or ']', but got '<stream end>')"
    )


@pytest.mark.parametrize("name", ["Mars/Olympus", "America", "../etc", ""])
def test_a_bad_memory_timezone_is_a_config_error(monkeypatch, name):
    from memory_pipeline.lib import settings

    monkeypatch.setenv("MEMORY_TIMEZONE", name or " ")
    with pytest.raises(ConfigError, match="MEMORY_TIMEZONE: unknown time zone"):
        settings.timezone_name()


def test_localtime_is_refused_as_a_memory_timezone(monkeypatch):
    """ZoneInfo reads 'localtime' (Debian's zoneinfo links it to /etc/localtime), but the store
    records the name: two machines set to it would cut two calendars under one recorded zone."""
    from memory_pipeline.lib import settings

    monkeypatch.setenv("MEMORY_TIMEZONE", "localtime")
    with pytest.raises(ConfigError, match="MEMORY_TIMEZONE: 'localtime' is this machine's own setting"):
        settings.timezone_name()


@pytest.mark.parametrize(
    "text,problem",
    [
        ("garbage", "is not an ISO 8601 datetime"),
        # Python reads an offset with seconds; ISO 8601's are ±HH:MM
        ("2026-01-15T10:00:00+08:00:30", "is not an ISO 8601 datetime"),
        ("2026-01-15T10:00:00-080030", "is not an ISO 8601 datetime"),
        ("2026-01-15T10:00:00+08:00:00.5", "is not an ISO 8601 datetime"),
        ("2026-01-15T10:00", "has no time zone offset"),
        ("0001-01-01T00:00+08:00", "is out of range"),
        ("9999-12-31T23:00-08:00", "is out of range"),
        ("9999-01-01T00:00Z", "is out of range"),
        ("1969-12-31T23:59:59Z", "is out of range"),
    ],
)
def test_instants_outside_the_supported_range_are_refused(text, problem):
    with pytest.raises(ValueError, match=problem):
        tu.parse_instant(text)


def test_instants_at_the_edges_convert_to_every_zone():
    for text in ("1970-01-01T00:00Z", "9998-12-31T23:59:59Z", "2026-01-15T10:00z"):
        at = tu.parse_instant(text)
        assert at.astimezone(CST) and at.astimezone(timezone(timedelta(hours=-23, minutes=-59)))


def test_missing_children_are_named_in_one_line():
    two = [("aria", "2025-12-30"), ("aria", "2025-12-31")]
    assert logic.missing_children_message("month", "2025-12", two) == (
        "month 2025-12: 2 child row(s) missing: aria 2025-12-30, aria 2025-12-31; "
        "run those day partitions first (or select them in the same launch)"
    )
    many = [(f"w{i:04d}", f"2025-12-{d:02d}") for i in range(100) for d in range(1, 32)]
    line = logic.missing_children_message("month", "2025-12", many)
    assert "\n" not in line and len(line) < 400
    assert line.startswith("month 2025-12: 3100 child row(s) missing in 31 day partition(s) 2025-12-01...2025-12-31: ")
    assert "w0000 2025-12-10 (+3090 more); run those day partitions first" in line
    year = logic.missing_children_message("year", "2025", [("aria", "2025-11"), ("aria", "2025-12")])
    assert year.endswith(
        "aria 2025-11, aria 2025-12; run those month partitions first (or select them in the same launch)"
    )
