"""Seed 001 §5 model output and the ledger, through the one LLM client: output asked for starts at
32,768 tokens and grows on a truncated answer (65,536, 131,072), never above the model's limit or
the context left; the ledger shows every call of a batch (the model may be called more than once)
with provider-reported tokens and estimates kept apart. The provider is the local OpenAI-compatible
fake server; the offline model is the other path."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.objects import logic, offline_rules, worker
from memory_pipeline.objects.config import ObjectsConfig
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.tables import objects_failures, objects_jobs
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_objects import W, ready, states


def _ledger(store, task="objects_organize"):
    with store.connect() as conn:
        return [
            dict(r)
            for r in conn.execute(
                select(llm_ledger).where(llm_ledger.c.task == task).order_by(llm_ledger.c.call_id)
            ).mappings()
        ]


def _submission(body) -> str:
    """A provider's whole answer for the claimed page: a JSON submission (a model without tool
    calls), linking a new knowledge object."""
    claim = json.loads(body["messages"][-1]["content"])
    ev = claim["event"]
    args = {
        "token": claim["token"],
        "graph_revision": claim["graph_revision"],
        "event_id": ev["id"],
        "page_end": ev["page"][1],
        "outcome": "linked",
        "objects": [{"id": "knowledge:greenhouse", "name": "Greenhouse", "summary": "a greenhouse is planned"}],
        "evidence": [ev["id"]],
    }
    return json.dumps({"tool": "submit_graph", "arguments": args})


def _provider_octx(store, server, model="openai/fake-model") -> ObjectsContext:
    llm = LLMClient(store, model=model, api_base=server.api_base, api_key="test", max_retries=0, asset="objects_test")
    return ObjectsContext(store, llm, ObjectsConfig(retry_backoff_seconds=0))


def _register(name: str, max_output: int, window: int) -> None:
    # Imported here, not at the top: every xdist worker collects this module, and litellm's import
    # was about 4 s of CPU of each worker's collection (14.3 -> 10.5 s without it).
    import litellm

    litellm.register_model(
        {
            name: {
                "max_output_tokens": max_output,
                "max_input_tokens": window,
                "litellm_provider": "openai",
                "mode": "chat",
                "input_cost_per_token": 0.0,
                "output_cost_per_token": 0.0,
            }
        }
    )


def test_the_seed_output_numbers_grow_by_doubling_within_the_cap():
    assert (logic.OUTPUT_TOKENS_DEFAULT, logic.OUTPUT_TOKENS_MAX) == (32_768, 131_072)
    assert logic.grown_output_tokens(32_768, None) == 65_536
    assert logic.grown_output_tokens(65_536, None) == 131_072
    assert logic.grown_output_tokens(131_072, None) is None  # never above 131,072
    assert logic.grown_output_tokens(32_768, 50_000) == 50_000  # the model's limit
    assert logic.grown_output_tokens(50_000, 50_000) is None


def test_a_truncated_answer_is_asked_again_with_more_output_then_commits(store, ingest):
    octx, (e1,) = ready(store, ingest, ["we plan a greenhouse next spring"])
    with FakeOpenAI() as server:
        server.answer = _submission
        server.push("length", '{"tool": "submit_graph", "argu').push("length", '{"tool": "submit_gr')
        octx = _provider_octx(store, server)
        worker.enqueue(octx, W, "organize")
        rep = worker.run_worker(octx)
    assert [r["max_tokens"] for r in server.requests] == [32_768, 65_536, 131_072]
    assert rep.truncated_answers == 2 and rep.model_calls == 3 and rep.failures == 0
    assert states(store)[e1] == "linked" and rep.outcomes == {"linked": 1}
    rows = _ledger(store)
    # the model was called three times for one commit; the ledger shows each call, provider tokens
    assert [(r["finish_reason"], r["max_tokens"], r["tokens_source"]) for r in rows] == [
        ("length", 32_768, "provider"),
        ("length", 65_536, "provider"),
        ("stop", 131_072, "provider"),
    ]
    assert all((r["tokens_in"], r["tokens_out"]) == (21, 9) for r in rows)


def test_output_never_grows_past_the_models_limit(store, ingest):
    _register("openai/fake-out-50k", 50_000, 1_000_000)
    octx, (e1,) = ready(store, ingest, ["we plan a greenhouse next spring"])
    with FakeOpenAI() as server:
        for _ in range(3):
            server.push("length", "{")
        octx = _provider_octx(store, server, "openai/fake-out-50k")
        worker.enqueue(octx, W, "organize")
        rep = worker.run_worker(octx, max_batches=1)
    assert [r["max_tokens"] for r in server.requests] == [32_768, 50_000]  # capped, then no room to grow
    assert rep.failures == 1 and "cut at 50,000 output tokens" in rep.errors[0]
    assert states(store)[e1] == "pending"  # a failed claim writes nothing


def test_output_never_grows_past_the_context_left(store, ingest):
    _register("openai/fake-window-40k", 131_072, 40_000)
    octx, (e1,) = ready(store, ingest, ["we plan a greenhouse next spring"])
    with FakeOpenAI() as server:
        server.answer = _submission
        server.push("length", "{")
        octx = _provider_octx(store, server, "openai/fake-window-40k")
        worker.enqueue(octx, W, "organize")
        rep = worker.run_worker(octx)
    first, second = (r["max_tokens"] for r in server.requests)
    import litellm

    prompt = litellm.token_counter(
        model="openai/fake-window-40k", messages=server.requests[1]["messages"], tools=server.requests[1]["tools"]
    )
    assert first == 32_768 and second == 40_000 - prompt < 65_536  # the context left, not the doubling
    assert rep.truncated_answers == 1 and states(store)[e1] == "linked"


def test_offline_calls_are_estimates_and_a_long_answer_grows_too(store, ingest, monkeypatch):
    octx, (e1,) = ready(store, ingest, ["we plan a greenhouse next spring"])
    calls = []
    real = offline_rules.organize

    def model(**kw):  # a long submission: 10 objects of 16,000 characters, about 41,000 tokens
        calls.append(1)
        text, subs = real(**kw)
        args = subs[0]["arguments"]
        args["objects"] = [
            {"id": f"knowledge:k{i}", "name": f"K{i}", "body": "unknown " * 2_000} for i in range(10)
        ] + args.get("objects", [])
        args["attach"] = [o["id"] for o in args["objects"]]
        return offline_rules._call("submit_graph", args)

    monkeypatch.setattr(offline_rules, "organize", model)
    worker.enqueue(octx, W, "organize")
    rep = worker.run_worker(octx)
    assert len(calls) == 2 and rep.truncated_answers == 1 and states(store)[e1] == "linked"
    rows = _ledger(store)
    assert [(r["finish_reason"], r["max_tokens"], r["tokens_source"]) for r in rows] == [
        ("length", 32_768, "estimated"),
        ("tool_calls", 65_536, "estimated"),
    ]
    assert rows[0]["tokens_out"] == 32_768 and rows[1]["tokens_out"] > 32_768
    compact = _ledger(store, "objects_compact")
    assert compact and {r["tokens_source"] for r in compact} == {"estimated"}


@pytest.mark.parametrize("usage", [(120, 40), None], ids=["provider-usage", "no-usage"])
def test_provider_tokens_and_estimates_are_kept_apart_in_the_ledger(store, ingest, usage):
    octx, (e1,) = ready(store, ingest, ["we plan a greenhouse next spring"])
    with FakeOpenAI() as server:
        server.answer = _submission
        server.usage = usage
        octx = _provider_octx(store, server)
        worker.enqueue(octx, W, "organize")
        worker.run_worker(octx)
    (row,) = _ledger(store)
    if usage:
        assert (row["tokens_source"], row["tokens_in"], row["tokens_out"]) == ("provider", 120, 40)
    else:  # estimated from the prompt and the answer, and said to be an estimate
        assert row["tokens_source"] == "estimated" and row["tokens_in"] > 100 and row["tokens_out"] > 20
    assert states(store)[e1] == "linked"


def test_a_provider_outage_never_blocks_the_event_and_the_breaker_stops_the_run(store, ingest):
    """Seed 001: the 5th consecutive failed claim of a batch ends its job and blocks its events.
    The provider failing (5xx after the client's retries) is a failed claim too, recorded and backed
    off, but it never ends the job: with one world, an outage of 5 calls blocked the event while the
    same 5th failure opened the breaker. Nor does it count toward the five: counted, the first
    refusal after an outage ended the job and blocked an event never shown to the model. The next
    run after the outage links it."""
    octx, (e1,) = ready(store, ingest, ["we plan a greenhouse next spring"])
    with FakeOpenAI() as server:
        server.answer = _submission
        for _ in range(10):
            server.push("status", 500)
        llm = LLMClient(
            store, model="openai/fake-model", api_base=server.api_base, api_key="test", max_retries=0,
            asset="objects_test", breaker_failures=5, breaker_cooldown_seconds=3600,
        )  # fmt: skip
        octx = ObjectsContext(store, llm, ObjectsConfig(retry_backoff_seconds=0))
        job = worker.enqueue(octx, W, "organize")
        with pytest.raises(worker.ProviderStopped) as stopped:
            worker.run_worker(octx)
        assert len(server.requests) == 5  # the breaker's 5, then the 6th claim's call refused
        rep = stopped.value.report
        assert rep.failures == 5 and rep.blocked_events == 0 and rep.jobs_failed == 0
        assert states(store)[e1] == "pending"
        with store.connect() as conn:
            assert len(conn.execute(select(objects_failures)).all()) == 5  # each failed claim recorded
            status, failures = conn.execute(
                select(objects_jobs.c.status, objects_jobs.c.consecutive_failures).where(
                    objects_jobs.c.job_id == job["job_id"]
                )
            ).one()
        assert (status, failures) == ("queued", 0)
        assert [r["outcome"] for r in _ledger(store)] == ["error"] * 5 + ["breaker_open"]

        server.script.clear()  # the provider is back; past the cooldown the next run's trial links it
        llm.breaker_cooldown_seconds = 0
        rep = worker.run_worker(octx)
    assert states(store)[e1] == "linked" and rep.failures == 0


def test_without_a_breaker_provider_faults_count_as_failed_claims(store, ingest):
    """The breaker turned off (0) bounds nothing: the seed's five failed claims do."""
    octx, (e1,) = ready(store, ingest, ["we plan a greenhouse next spring"])
    with FakeOpenAI() as server:
        for _ in range(10):
            server.push("status", 500)
        llm = LLMClient(
            store, model="openai/fake-model", api_base=server.api_base, api_key="test", max_retries=0,
            asset="objects_test", breaker_failures=0,
        )  # fmt: skip
        octx = ObjectsContext(store, llm, ObjectsConfig(retry_backoff_seconds=0))
        worker.enqueue(octx, W, "organize")
        rep = worker.run_worker(octx)
    assert len(server.requests) == logic.MAX_CONSECUTIVE_FAILURES == 5
    assert rep.failures == 5 and states(store)[e1] == "blocked"
