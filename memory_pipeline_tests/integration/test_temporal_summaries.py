"""Per-world day/month/year rows: placeholders exactly where seed 000 writes them."""

from collections import Counter
from datetime import date, timedelta

import pytest
from sqlalchemy import select, update

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store.tables import llm_ledger, messages
from memory_pipeline.temporal import chunks, context, prompts, summaries
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.logic import EmptyReason
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline_tests.conftest import conversation, cst, event
from memory_pipeline_tests.fake_openai import FakeOpenAI

DAY = date(2026, 7, 18)


def _rows(store, window="day", period=DAY) -> dict:
    with store.connect() as conn:
        rows = (
            conn.execute(
                select(temporal_summaries).where(
                    temporal_summaries.c.window == window, temporal_summaries.c.period_start == period
                )
            )
            .mappings()
            .all()
        )
    return {r["world_id"]: dict(r) for r in rows}


@pytest.fixture
def worlds_day(ingest):
    """w_ok talks; w_tools has only tool turns; w_excluded only debug/cron; w_quiet talked the day before."""
    ingest(
        conversation("w_ok", "ok-1", cst(2026, 7, 18, 9), ["planning the garden beds", "tomatoes go by the fence"])
        + conversation(
            "w_ok", "ok-2", cst(2026, 7, 18, 20), ["compost is too wet", "add dry leaves"], platform="discord"
        )
        + [
            event("w_ok", "ok-1", "tool", "weather: sunny", cst(2026, 7, 18, 9, 1)),
            event("w_ok", "ok-1", "assistant", "", cst(2026, 7, 18, 9, 2), tool_calls=[{"name": "weather"}]),
        ]
        + [
            event("w_tools", "t-1", "assistant", "", cst(2026, 7, 18, 10), tool_calls=[{"name": "search"}]),
            event("w_tools", "t-1", "tool", "3 results", cst(2026, 7, 18, 10, 1)),
        ]
        + conversation("w_excluded", "x-debug", cst(2026, 7, 18, 11), ["debug dump", "state ok"], debug=True)
        + conversation("w_excluded", "x-cron", cst(2026, 7, 18, 12), ["nightly report", "sent"], platform="cron")
        + conversation("w_excluded", "x-cron2", cst(2026, 7, 18, 13), ["backup", "done"], platform="CRON")  # cron too
        + conversation("w_quiet", "q-1", cst(2026, 7, 17, 12), ["yesterday only", "indeed"])
        + conversation("w_late", "l-1", cst(2026, 7, 19, 8), ["starts after the day", "fine"])
    )


def test_day_rows_and_placeholders(ctx, store, worlds_day):
    result = summaries.regenerate_day(ctx, DAY)
    rows = _rows(store)
    assert set(rows) == {"w_ok", "w_tools", "w_excluded", "w_quiet"}  # w_late did not exist yet
    ok = rows["w_ok"]
    assert ok["content"] and ok["empty_reason"] is None and len(ok["content"]) <= 150
    assert ok["source_count"] == 2 and ok["source_kind"] == "message" and len(ok["source_ids"]) == 4
    assert rows["w_tools"]["empty_reason"] == EmptyReason.EMPTY
    assert rows["w_excluded"]["empty_reason"] == EmptyReason.NO_SESSIONS
    assert rows["w_quiet"]["empty_reason"] == EmptyReason.NO_SESSIONS
    for w in ("w_tools", "w_excluded", "w_quiet"):
        assert rows[w]["content"] == "" and rows[w]["source_count"] == 0
    assert result.placeholders == {"empty": 1, "no_sessions": 2} and result.non_empty == 1
    assert summaries.audit_period(store, "day", DAY, ctx.tz) == []


def test_candidates_are_chosen_by_message_timestamp_not_updated_at(ctx, store, worlds_day):
    from memory_pipeline.lib.store.tables import conversations

    with store.begin() as conn:  # a conversation touched later must not move into another day
        conn.execute(update(conversations).values(updated_at=cst(2026, 7, 25)))
    summaries.regenerate_day(ctx, DAY)
    assert _rows(store)["w_ok"]["empty_reason"] is None
    summaries.regenerate_day(ctx, date(2026, 7, 25))
    assert _rows(store, period=date(2026, 7, 25))["w_ok"]["empty_reason"] == EmptyReason.NO_SESSIONS


def test_regeneration_is_idempotent_and_free_when_unchanged(ctx, store, worlds_day):
    summaries.regenerate_day(ctx, DAY)
    first = _rows(store)
    again = summaries.regenerate_day(ctx, DAY)
    assert again.written == 0 and again.unchanged == 4 and again.reused == 1
    assert _rows(store) == first
    with store.connect() as conn:
        outcomes = [r for (r,) in conn.execute(select(llm_ledger.c.outcome))]
    assert outcomes == ["ok"]  # keyed by model, prompt version and material fingerprint: no call at all


def test_new_material_for_a_closed_day_changes_the_fingerprint(ctx, store, ingest, worlds_day):
    summaries.regenerate_day(ctx, DAY)
    before = _rows(store)["w_ok"]
    ingest([event("w_ok", "ok-3", "user", "late import of a harvest chat", cst(2026, 7, 18, 23, 0))])
    again = summaries.regenerate_day(ctx, DAY)
    after = _rows(store)["w_ok"]
    assert again.reused == 0 and again.written == 1
    assert after["material_fp"] != before["material_fp"] and after["source_count"] == 3
    assert after["created_at"] == before["created_at"] and after["updated_at"] > before["updated_at"]


def test_empty_llm_output_is_empty_summary_and_success_clears_it(store, redis_url, worlds_day):
    from memory_pipeline.lib.cache import KVCache
    from memory_pipeline_tests.conftest import CST

    with FakeOpenAI() as server:
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", backoff_seconds=0.01)
        ctx = context.TemporalContext(store, llm, KVCache(redis_url), TemporalSummaryConfig(), CST)
        server.push("ok", "   ")
        empty = summaries.regenerate_day(ctx, DAY, ["w_ok"])
        assert empty.empty_answers == ["w_ok"]  # said: the run's metadata and log name the world
        # Only the task spec and the material: no identity layer, no resident memory.
        (sent,) = server.requests
        assert [m["role"] for m in sent["messages"]] == ["system", "user"]
        assert sent["messages"][0]["content"] == prompts.spec("day", 100)
        material = sent["messages"][1]["content"]
        assert material.splitlines()[0] == "# local conversation" and "planning the garden beds" in material
        assert "weather" not in material  # tool-only turns are not material
        row = _rows(store)["w_ok"]
        assert (row["content"], row["empty_reason"], row["source_count"]) == ("", EmptyReason.EMPTY_SUMMARY, 0)
        # Not vouched for: no fingerprint, and the empty answer was not cached, so the next run asks
        # again without --force-llm (a cached empty answer stood for ever, reported as a success).
        assert row["material_fp"] is None
        server.push("ok", "Garden beds planned; compost too wet")
        again = summaries.regenerate_day(ctx, DAY, ["w_ok"])
        assert len(server.requests) == 2 and again.empty_answers == [] and again.reused == 0
        row = _rows(store)["w_ok"]
        assert row["empty_reason"] is None and row["content"] == "Garden beds planned; compost too wet"
        assert row["source_count"] == 2 and row["material_fp"] is not None


def test_llm_hard_failure_writes_no_placeholder_and_fails_the_partition(store, redis_url, worlds_day):
    from memory_pipeline.lib.cache import KVCache
    from memory_pipeline_tests.conftest import CST

    with FakeOpenAI() as server:
        llm = LLMClient(
            store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=1, backoff_seconds=0.01
        )
        ctx = context.TemporalContext(store, llm, KVCache(redis_url), TemporalSummaryConfig(), CST)
        server.push("status", 500).push("status", 500)
        with pytest.raises(summaries.PartitionFailure, match="w_ok"):
            summaries.regenerate_day(ctx, DAY)
    rows = _rows(store)
    assert "w_ok" not in rows  # no placeholder for a hard failure
    assert rows["w_tools"]["empty_reason"] == EmptyReason.EMPTY  # the other worlds are written


def test_disabled_writes_nothing(store, redis_url, worlds_day):
    from memory_pipeline.lib.cache import KVCache
    from memory_pipeline_tests.conftest import CST

    ctx = context.TemporalContext(
        store, LLMClient(store), KVCache(redis_url), TemporalSummaryConfig(enabled=False), CST
    )
    assert summaries.regenerate_day(ctx, DAY).disabled
    assert summaries.regenerate_rollup(ctx, "month", date(2026, 7, 1)).disabled
    assert chunks.run_tick(ctx, DAY).chunks_written == 0
    assert _rows(store) == {} and _rows(store, "month", date(2026, 7, 1)) == {}


def _days(ctx, first: date, last: date):
    d = first
    while d <= last:
        summaries.regenerate_day(ctx, d)
        d += timedelta(days=1)


def test_month_reads_days_and_year_reads_months_ignoring_empty_children(ctx, store, ingest):
    ingest(
        conversation("w1", "a", cst(2025, 12, 3, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "b", cst(2025, 12, 20, 9), ["compost turned", "compost warm"])
        + conversation("w2", "c", cst(2025, 11, 30, 9), ["only november talk", "yes november"])
    )
    _days(ctx, date(2025, 11, 1), date(2025, 12, 31))
    month = summaries.regenerate_rollup(ctx, "month", date(2025, 12, 1))
    rows = _rows(store, "month", date(2025, 12, 1))
    w1 = rows["w1"]
    assert w1["empty_reason"] is None and w1["source_kind"] == "day" and w1["source_count"] == 2
    day_ids = {r["summary_id"] for r in _rows(store, "day", date(2025, 12, 3)).values() if r["world_id"] == "w1"}
    assert day_ids <= set(w1["source_ids"])
    assert rows["w2"]["empty_reason"] == EmptyReason.NO_DAYS  # only empty day placeholders in December
    assert month.placeholders == {"no_days": 1}
    summaries.regenerate_rollup(ctx, "month", date(2025, 11, 1))
    year = summaries.regenerate_rollup(ctx, "year", date(2025, 1, 1))
    yrows = _rows(store, "year", date(2025, 1, 1))
    assert yrows["w1"]["source_kind"] == "month" and yrows["w1"]["source_count"] == 1
    assert yrows["w2"]["source_count"] == 1 and year.non_empty == 2
    for window, period in (("month", date(2025, 12, 1)), ("year", date(2025, 1, 1))):
        assert summaries.audit_period(store, window, period, ctx.tz) == []


def test_year_without_months_is_no_months(ctx, store, ingest):
    ingest(conversation("w1", "a", cst(2024, 12, 31, 9), ["old talk", "old reply"]))
    year = summaries.regenerate_rollup(ctx, "year", date(2025, 1, 1))
    assert _rows(store, "year", date(2025, 1, 1))["w1"]["empty_reason"] == EmptyReason.NO_MONTHS
    assert year.placeholders == {"no_months": 1}


def test_missing_children_names_what_a_cascade_waits_for(ctx, store, ingest):
    ingest(conversation("w1", "a", cst(2025, 12, 30, 9), ["late december", "indeed"]))
    missing = summaries.missing_children(ctx, "month", date(2025, 12, 1))
    assert missing == [("w1", "2025-12-30"), ("w1", "2025-12-31")]  # the world starts on the 30th
    _days(ctx, date(2025, 12, 30), date(2025, 12, 31))
    assert summaries.missing_children(ctx, "month", date(2025, 12, 1)) == []


def test_audit_catches_rows_without_sources_and_future_periods(ctx, store, worlds_day):
    summaries.regenerate_day(ctx, DAY)
    with store.begin() as conn:
        conn.execute(
            update(temporal_summaries)
            .where(temporal_summaries.c.world_id == "w_ok")
            .values(source_ids=[], source_count=0)
        )
    problems = summaries.audit_period(store, "day", DAY, ctx.tz)
    assert problems == ["w_ok day 2026-07-18: non-empty row without sources"]
    with store.connect() as conn:
        tool_turn = conn.execute(select(messages.c.message_id).where(messages.c.role == "tool")).scalars().first()
        debug_turn = (
            conn.execute(select(messages.c.message_id).where(messages.c.conversation_id == "x-debug")).scalars().first()
        )
        quiet_turn = (
            conn.execute(select(messages.c.message_id).where(messages.c.conversation_id == "q-1")).scalars().first()
        )
    with store.begin() as conn:
        conn.execute(
            update(temporal_summaries)
            .where(temporal_summaries.c.world_id == "w_ok")
            .values(source_ids=[tool_turn, debug_turn, quiet_turn, "no-such-id"], source_count=2)
        )
    assert summaries.audit_period(store, "day", DAY, ctx.tz) == [
        "w_ok day 2026-07-18: conversation ok-1 (2 material message(s)) is not among the sources",
        "w_ok day 2026-07-18: conversation ok-2 (2 material message(s)) is not among the sources",
        "w_ok day 2026-07-18: 1 source message(s) do not exist",
        "w_ok day 2026-07-18: 2 source message(s) outside the window or world",
        "w_ok day 2026-07-18: 2 source message(s) are debug, cron or not material",
    ]
    assert any(
        "not closed" in p for p in summaries.audit_period(store, "day", date.today() + timedelta(days=3), ctx.tz)
    )


def test_an_open_window_is_never_summarized(ctx):
    from datetime import datetime

    today = datetime.now(ctx.tz).date()
    with pytest.raises(summaries.OpenWindowError, match=f"day {today.isoformat()} is not closed yet"):
        summaries.regenerate_day(ctx, today)
    with pytest.raises(summaries.OpenWindowError, match="month"):
        summaries.regenerate_rollup(ctx, "month", today.replace(day=1))
    with pytest.raises(summaries.OpenWindowError, match="year"):
        summaries.regenerate_rollup(ctx, "year", today.replace(month=1, day=1))
    summaries.regenerate_day(ctx, today - timedelta(days=1))  # yesterday is closed


def _busy_day(ingest, afternoon: int = 40) -> None:
    """w1 on DAY: one long morning conversation (120 turns from 06:00, about 16,000 characters of
    material) and ``afternoon`` short ones from 13:00; every conversation has its own topic."""
    morning = [f"sourdough step {i:03d}: " + "hydration levain autolyse folding " * 3 for i in range(120)]
    events = conversation("w1", "morning", cst(2026, 7, 18, 6), morning, step=timedelta(minutes=2))
    for i in range(afternoon):
        texts = [f"afternoon topic{i:02d} turn {j}: " + f"garden{i:02d} compost trellis " * 2 for j in range(6)]
        events += conversation("w1", f"pm{i:02d}", cst(2026, 7, 18, 13, 0) + timedelta(minutes=5 * i), texts)
    ingest(events)


def _material_ids(store, conversation_id: str | None = None) -> list[str]:
    q = select(messages.c.message_id).where(messages.c.role.in_(("user", "assistant")))
    q = q.order_by(messages.c.at, messages.c.message_id)
    if conversation_id:
        q = q.where(messages.c.conversation_id == conversation_id)
    with store.connect() as conn:
        return list(conn.execute(q).scalars())


def _ledger_tasks(store) -> Counter:
    with store.connect() as conn:
        return Counter(conn.execute(select(llm_ledger.c.task).where(llm_ledger.c.outcome == "ok")).scalars())


def test_a_busy_day_covers_every_conversation_with_per_conversation_calls(store, redis_url, ingest):
    from memory_pipeline.lib.cache import KVCache
    from memory_pipeline_tests.conftest import CST

    _busy_day(ingest)
    with FakeOpenAI() as server:
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k")
        ctx = context.TemporalContext(store, llm, KVCache(redis_url), TemporalSummaryConfig(), CST)
        result = summaries.regenerate_day(ctx, DAY)
        tasks = {prompts.spec(t, 100): t for t in prompts.SPECS}
        sent = [(tasks[r["messages"][0]["content"]], r["messages"][1]["content"]) for r in server.requests]
    # The morning alone exceeds day_material_max_chars (12,000): it went in two consecutive parts;
    # each afternoon conversation on its own; then the day from those 42 partial summaries.
    assert _ledger_tasks(store) == Counter({"day_conversation": 40, "day_part": 2, "day_reduce": 1})
    assert (result.over_budget, result.partial_summaries) == (1, 42)
    lines_sent = [ln for task, text in sent if task in ("day_conversation", "day_part") for ln in text.splitlines()]
    lines_sent = [ln for ln in lines_sent if ln.startswith("[")]
    assert len(lines_sent) == len(set(lines_sent)) == len(_material_ids(store))  # every message once
    parts = [text for task, text in sent if task == "day_part"]
    assert parts[0].startswith("# local conversation, part 1 of 2\n[06:00] user: sourdough step 000")
    assert all(len(text) <= ctx.cfg.day_material_max_chars for _, text in sent)
    (reduce_material,) = [text for task, text in sent if task == "day_reduce"]
    headers = [ln for ln in reduce_material.splitlines() if ln.startswith("# ")]
    assert headers[:2] == [
        "# 06:00-08:50 local conversation, part 1 of 2",
        "# 08:52-09:58 local conversation, part 2 of 2",
    ]
    assert len(headers) == 42 and headers[-1] == "# 16:15-16:30 local conversation"
    row = _rows(store)["w1"]
    assert row["source_ids"] == _material_ids(store) and row["source_count"] == 41
    assert set(_material_ids(store, "morning")) <= set(row["source_ids"])
    assert summaries.audit_period(store, "day", DAY, CST) == []
    # Unchanged: the fingerprint covers all of it, so the row is reused without a single call.
    again = summaries.regenerate_day(ctx, DAY)
    assert (again.reused, again.partial_summaries, sum(_ledger_tasks(store).values())) == (1, 0, 43)
    # A row that leaves a conversation out, or part of one, is a problem the day check reports.
    morning = set(_material_ids(store, "morning"))
    with store.begin() as conn:
        conn.execute(
            update(temporal_summaries)
            .where(temporal_summaries.c.world_id == "w1")
            .values(source_ids=[i for i in row["source_ids"] if i not in morning][1:])
        )
    assert summaries.audit_period(store, "day", DAY, CST) == [
        "w1 day 2026-07-18: conversation morning (120 material message(s)) is not among the sources",
        "w1 day 2026-07-18: conversation pm00: 1 of 6 material message(s) not among the sources",
    ]


def test_partial_summaries_are_reduced_again_while_they_exceed_the_budget(ctx, store, ingest):
    _busy_day(ingest, afternoon=12)
    ctx.cfg = TemporalSummaryConfig(day_material_max_chars=1500)
    result = summaries.regenerate_day(ctx, DAY)
    tasks = _ledger_tasks(store)
    assert set(tasks) == {"day_part", "day_conversation", "day_group", "day_reduce"} and tasks["day_reduce"] == 1
    assert tasks["day_conversation"] == 12 and tasks["day_part"] >= 10  # the morning is ~16,000 characters
    assert result.partial_summaries == sum(tasks.values()) - 1
    row = _rows(store)["w1"]
    assert row["content"] and row["source_ids"] == _material_ids(store) and row["source_count"] == 13
    assert summaries.audit_period(store, "day", DAY, ctx.tz) == []
    # Another budget splits differently: the fingerprint changes and the day is built again.
    ctx.cfg = TemporalSummaryConfig(day_material_max_chars=3000)
    assert summaries.regenerate_day(ctx, DAY).reused == 0
    ctx.cfg = TemporalSummaryConfig()
    assert summaries.regenerate_day(ctx, DAY).over_budget == 1  # 12,000 still does not hold the day


def test_a_placeholder_that_contradicts_the_material_is_a_problem(ctx, store, ingest, worlds_day):
    summaries.regenerate_day(ctx, DAY)
    ingest(conversation("w_quiet", "q-2", cst(2026, 7, 18, 15), ["a late import", "of a real chat"]))
    assert summaries.audit_period(store, "day", DAY, ctx.tz) == [
        "w_quiet day 2026-07-18: placeholder no_sessions but 1 conversation(s) have material"
    ]
    summaries.regenerate_day(ctx, DAY)
    assert summaries.audit_period(store, "day", DAY, ctx.tz) == []
