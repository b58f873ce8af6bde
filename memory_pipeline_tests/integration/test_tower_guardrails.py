"""Seed 004 summaries under the token budget and the five guardrails, on the real PostgreSQL: only
the budget cuts (and what it cuts is counted); nothing empty or copied is appended; a round commits
at most max_commits_per_round records, children included; failed sub-day windows back off and are
given up like day windows."""

import json

from sqlalchemy import func, select

from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.tables import tower_summaries, tower_summary_attempts
from memory_pipeline_tests.conftest import cst
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
        job = tower.summarize("r/t", "day", "2026-01-05")["jobs"][0]
        assert job["state"] == "succeeded"
        assert "END-MARKER" in _user_text(fake.requests[-1])  # not cut at 2,000 characters
    prov = tower.get_summary("r/t", "day", "2026-01-05")["summaries"][0]["provenance"]
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
        assert tower.summarize("r/t", "day", "2026-01-05")["jobs"][0]["state"] == "succeeded"
        sent = _user_text(fake.requests[-1])
    assert "small one" in sent and "small two" in sent and "HUGE" not in sent
    prov = tower.get_summary("r/t", "day", "2026-01-05")["summaries"][0]["provenance"]
    assert prov == {"strategy": "direct", "chunks": 1, "inputTokens": prov["inputTokens"], "clippedEntries": 1}


def test_a_window_whose_every_entry_is_over_the_budget_fails_and_appends_nothing(store):
    tower = make_tower(store, TowerConfig(input_budget_tokens=100))
    tower.create_type("r/clip", chain=["day"], summaries=True)
    tower.append("r/clip", {"content": "x" * 600, "at": cst(2026, 1, 5, 1).isoformat()})  # 150 tokens
    job = tower.summarize("r/clip", "day", "2026-01-05")["jobs"][0]
    assert job["state"] == "failed" and job["record_id"] is None
    assert job["error"].startswith("failure 1 of 5: all 1 item(s) are over the input budget of 100 tokens")
    assert count(store, tower_summaries) == 0
    assert tower.get_summary("r/clip", "day", "2026-01-05")["state"] == "missing"
    with store.connect() as conn:
        assert conn.execute(select(func.max(tower_summary_attempts.c.failures))).scalar_one() == 1
