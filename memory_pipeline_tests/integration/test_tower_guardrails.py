"""Seed 004 summaries under the token budget and the five guardrails, on the real PostgreSQL: only
the budget cuts (and what it cuts is counted); nothing empty or copied is appended; a round commits
at most max_commits_per_round records, children included; failed sub-day windows back off and are
given up like day windows."""

import json
from datetime import date, timedelta

from sqlalchemy import func, select

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.tower import summaries
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.logic import Granularity, WindowQuery
from memory_pipeline.tower.summaries import SummaryContext
from memory_pipeline.tower.tables import tower_summaries, tower_summary_attempts
from memory_pipeline_tests.conftest import CST, cst
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_tower import count, make_tower

ANSWER = json.dumps({"conclusions": ["the window was summarized"], "keywords": ["summary"]})


def _user_text(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "user")


def test_a_long_entry_within_the_budget_reaches_the_model_whole(store):
    long_text = "word " * 2400 + "END-MARKER"  # 12,010 characters, about 3,000 tokens: within 4,000
    with FakeOpenAI(default_text=ANSWER) as fake:
        tower = make_tower(store, model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0)
        tower.create_type("r/t", chain=["day"], summaries=True)
        tower.append("r/t", {"content": long_text, "at": cst(2026, 1, 5, 1).isoformat()})
        job = tower.summarize("r/t", WindowQuery.parse("day", "2026-01-05"))["jobs"][0]
        assert job["state"] == "succeeded"
        assert "END-MARKER" in _user_text(fake.requests[-1])  # not cut at 2,000 characters
    prov = tower.get_summary("r/t", WindowQuery.parse("day", "2026-01-05"))["summaries"][0]["provenance"]
    assert prov["strategy"] == "direct" and prov["clippedEntries"] == 0 and prov["inputTokens"] > 3000


def test_an_entry_over_the_budget_is_left_out_and_counted(store):
    with FakeOpenAI(default_text=ANSWER) as fake:
        tower = make_tower(store, model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0)
        tower.create_type("r/t", chain=["day"], summaries=True)
        tower.append(
            "r/t",
            [
                {"content": "HUGE " * 4000, "at": cst(2026, 1, 5, 1).isoformat()},  # ~5,000 tokens alone
                {"content": "small one", "at": cst(2026, 1, 5, 2).isoformat()},
                {"content": "small two", "at": cst(2026, 1, 5, 3).isoformat()},
            ],
        )
        assert tower.summarize("r/t", WindowQuery.parse("day", "2026-01-05"))["jobs"][0]["state"] == "succeeded"
        sent = _user_text(fake.requests[-1])
    assert "small one" in sent and "small two" in sent and "HUGE" not in sent
    prov = tower.get_summary("r/t", WindowQuery.parse("day", "2026-01-05"))["summaries"][0]["provenance"]
    assert prov == {"strategy": "direct", "chunks": 1, "inputTokens": prov["inputTokens"], "clippedEntries": 1}


def test_a_window_whose_every_entry_is_over_the_budget_fails_and_appends_nothing(store):
    tower = make_tower(store, TowerConfig(input_budget_tokens=100))
    tower.create_type("r/clip", chain=["day"], summaries=True)
    tower.append("r/clip", {"content": "x" * 600, "at": cst(2026, 1, 5, 1).isoformat()})  # 150 tokens
    job = tower.summarize("r/clip", WindowQuery.parse("day", "2026-01-05"))["jobs"][0]
    assert job["state"] == "failed" and job["record_id"] is None
    assert job["error"].startswith("failure 1 of 5: all 1 item(s) are over the input budget of 100 tokens")
    assert count(store, tower_summaries) == 0
    assert tower.get_summary("r/clip", WindowQuery.parse("day", "2026-01-05"))["state"] == "missing"
    with store.connect() as conn:
        assert conn.execute(select(func.max(tower_summary_attempts.c.failures))).scalar_one() == 1


def test_a_fresh_success_counts_as_committed_never_as_failed(store):
    tower = make_tower(store)
    tower.append(
        "worklog", {"content": {"project": "a", "did": "wrote the report"}, "at": cst(2026, 1, 5, 9).isoformat()}
    )
    sctx = SummaryContext(store, LLMClient(store), tower.cfg, CST)
    first = summaries.summarize_period(sctx, Granularity.DAY, date(2026, 1, 5), cst(2026, 1, 6, 0, 10))
    assert (first.committed, first.failed, first.reused, first.reasons) == (1, 0, 0, [])
    again = summaries.summarize_period(sctx, Granularity.DAY, date(2026, 1, 5), cst(2026, 1, 6, 0, 20))
    assert (again.committed, again.failed, again.reused, again.reasons) == (0, 0, 1, [])


def test_an_empty_summary_fails_and_appends_nothing(store):
    """The offline model finds no content word in "w1 ok": its answer is empty, so is every section."""
    tower = make_tower(store)
    tower.create_type("r/tiny", chain=["day"], summaries=True)
    tower.append("r/tiny", {"content": "w1 ok", "at": cst(2026, 1, 5, 1).isoformat()})
    job = tower.summarize("r/tiny", WindowQuery.parse("day", "2026-01-05"))["jobs"][0]
    assert job["state"] == "failed" and job["record_id"] is None
    assert job["error"] == "failure 1 of 5: the model's summary is empty (no section has an item): nothing appended"
    assert count(store, tower_summaries) == 0
    assert tower.get_summary("r/tiny", WindowQuery.parse("day", "2026-01-05"))["state"] == "missing"


def test_a_round_commits_at_most_20_records_children_made_bottom_up_included(store):
    tower = make_tower(store)
    tower.create_type("r/many", chain=["1h", "day"], summaries=True, group_field="g")
    tower.append(
        "r/many",
        [
            {"content": f"g{g} hour {h}", "group": f"g{g}", "at": cst(2026, 1, 5, 9 + h).isoformat()}
            for g in range(30)
            for h in range(3)
        ],
    )
    sctx = SummaryContext(store, LLMClient(store), tower.cfg, CST)
    now = cst(2026, 1, 6, 0, 10)  # the day 2026-01-05 has settled; each group needs 3 hours + 1 day
    assert tower.cfg.max_commits_per_round == 20
    first = summaries.semantic_tick(sctx, now)
    assert (first.committed, len(first.written), count(store, tower_summaries)) == (20, 20, 20)
    assert first.deferred == 25  # 5 groups done (4 records each), the other 25 wait
    rounds = [first]
    while rounds[-1].deferred:
        rounds.append(summaries.semantic_tick(sctx, now))
    assert [r.committed for r in rounds] == [20] * 6 and count(store, tower_summaries) == 120
    assert summaries.semantic_tick(sctx, now).committed == 0


def test_a_round_that_fills_up_inside_a_window_defers_its_aggregate_and_keeps_the_children(store):
    tower = make_tower(store, TowerConfig(max_commits_per_round=6))
    tower.create_type("r/many", chain=["1h", "day"], summaries=True, group_field="g")
    tower.append(
        "r/many",
        [
            {"content": f"g{g} hour {h}", "group": f"g{g}", "at": cst(2026, 1, 5, 9 + h).isoformat()}
            for g in range(2)
            for h in range(3)
        ],
    )
    sctx = SummaryContext(store, LLMClient(store), tower.cfg, CST)
    now = cst(2026, 1, 6, 0, 10)
    first = summaries.semantic_tick(sctx, now)  # g0: 3 hours + day; g1: 2 of its 3 hours
    assert (first.committed, first.deferred) == (6, 1)
    second = summaries.semantic_tick(sctx, now)  # g1: the last hour + the day, from the kept children
    assert (second.committed, second.deferred) == (2, 0)
    day = tower.get_summary("r/many", WindowQuery.parse("day", "2026-01-05", group="g1"))["summaries"][0]
    assert len(day["refs"]["ids"]) == 3 and count(store, tower_summaries) == 8


def test_failed_10_minute_windows_back_off_from_10_min_and_are_given_up_after_5(store):
    with FakeOpenAI() as fake:
        for _ in range(100):
            fake.push("status", 400)
        tower = make_tower(store)
        tower.create_type("r/10m", chain=["10min"], summaries=True)
        base = cst(2026, 1, 5, 10)
        tower.append(
            "r/10m", [{"content": f"e{i}", "at": (base + timedelta(minutes=i)).isoformat()} for i in range(60)]
        )
        llm = LLMClient(store, model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0)
        sctx = SummaryContext(store, llm, TowerConfig(), CST)
        first_window = summaries.level_key(summaries.types_io.get(store, "r/10m"), Granularity.MIN10, base, "", CST)
        attempted_at = []
        for k in range(21):  # ticks 10 min apart from 10:15 to 13:35
            now = base + timedelta(minutes=15 + 10 * k)
            before = _failures(store, first_window)
            summaries.semantic_tick(sctx, now)
            if _failures(store, first_window) > before:
                attempted_at.append(f"{now:%H:%M}")
            if k == 2:  # 10:35: the 10:00 window is backing off, listed with who retries it
                (row,) = [r for r in summaries.retrying(store, CST) if r["window"].endswith("10:00+08:00")]
                assert row["failures"] == 2 and row["retried_by"] == "the semantic tick"
                assert row["next_attempt_at"] == "2026-01-05T10:45:00+08:00"
        # Backoff doubling from 10 min (+10, +20, +40, +80), given up at the 5th consecutive failure.
        assert attempted_at == ["10:15", "10:25", "10:45", "11:25", "12:45"]
        given = summaries.given_up(store, CST)
        assert len(given) == 6 and {g["failures"] for g in given} == {5}  # every 10-min window of the hour
        assert all("400" in g["reason"] for g in given) and summaries.retrying(store, CST) == []
        asked = len(fake.requests)
        summaries.semantic_tick(sctx, base + timedelta(hours=5))
        assert len(fake.requests) == asked  # given up: no more calls


def _failures(store, key) -> int:
    with store.connect() as conn:
        row = summaries.attempts(conn, key)
    return row["failures"] if row else 0


def test_an_aggregate_identical_to_its_only_child_is_refused_at_write_time(store):
    same = json.dumps({"conclusions": ["same text every time"]})
    with FakeOpenAI(default_text=same) as fake:
        tower = make_tower(store, model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0)
        tower.create_type("r/echo", chain=["day", "week"], summaries=True)
        tower.append("r/echo", {"content": "one day only", "at": cst(2026, 1, 6, 10).isoformat()})
        job = tower.summarize("r/echo", WindowQuery.parse("week", "2026-01-05"))["jobs"][0]
        assert job["state"] == "failed" and job["record_id"] is None
        assert "the aggregate's text is identical to its child day 2026-01-06" in job["error"]
        assert job["error"].startswith("failure 1 of 5:")  # counts for the backoff
        with store.connect() as conn:
            kept = list(conn.execute(select(tower_summaries.c.granularity)).scalars())
        assert kept == ["day"]  # the child stays; no week record
        assert tower.get_summary("r/echo", WindowQuery.parse("week", "2026-01-05"))["state"] == "missing"
        # The retry asks the model afresh (the cached copy would be refused again) and succeeds.
        fake.default_text = json.dumps({"conclusions": ["a week with one day of work"]})
        retry = tower.summarize("r/echo", WindowQuery.parse("week", "2026-01-05"))["jobs"][0]
        assert retry["state"] == "succeeded" and retry["llm_calls"] == 1
    week = tower.get_summary("r/echo", WindowQuery.parse("week", "2026-01-05"))["summaries"][0]
    day = tower.get_summary("r/echo", WindowQuery.parse("day", "2026-01-06"))["summaries"][0]
    assert week["text"] != day["text"] and week["refs"]["ids"] == [day["record_id"]]
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(tower_summary_attempts)).scalar_one() == 0


def test_a_jobs_llm_calls_are_its_ledger_rows_children_and_the_failed_call_included(store):
    """A week of two days bottom-up: both children answered, the aggregate fails. The job made three
    calls (three ledger rows) and says so."""
    from memory_pipeline.lib.store.tables import llm_ledger

    with FakeOpenAI() as fake:
        fake.answer = lambda body: json.dumps({"conclusions": [f"summary of {len(fake.requests)} requests"]})
        tower = make_tower(store, model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0)
        tower.create_type("r/weekly", chain=["day", "week"], summaries=True)
        tower.append(
            "r/weekly",
            [{"content": f"chose postgres on day {d}", "at": cst(2026, 1, d, 10).isoformat()} for d in (5, 6)],
        )
        fake.push("ok", json.dumps({"conclusions": ["day 5"]})).push("ok", json.dumps({"conclusions": ["day 6"]}))
        fake.push("status", 400)
        job = tower.summarize("r/weekly", WindowQuery.parse("week", "2026-01-05"))["jobs"][0]
        assert job["state"] == "failed" and job["record_id"] is None
        with store.connect() as conn:
            outcomes = list(conn.execute(select(llm_ledger.c.outcome).order_by(llm_ledger.c.call_id)).scalars())
        assert outcomes == ["ok", "ok", "error"] and job["llm_calls"] == 3
        retry = tower.summarize("r/weekly", WindowQuery.parse("week", "2026-01-05"))["jobs"][0]
        assert retry["state"] == "succeeded" and retry["llm_calls"] == 1  # the children are reused: no call
    assert count(store, llm_ledger) == 4
