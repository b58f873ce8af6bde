"""The LLM resource over litellm against a local OpenAI-compatible server, and its ledger."""

import logging
import threading
import time
from dataclasses import replace

import pytest
from sqlalchemy import select

from memory_pipeline.lib.llm import LLMClient, LLMHardFailure, LLMProviderDown, LLMRequest, offline
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline_tests.fake_openai import FakeOpenAI

REQ = LLMRequest(
    task="day", system="spec", user="material about tomatoes", prompt_version="t-1", max_chars=20, world_id="w1"
)


def _client(store, server, **kw):
    kw.setdefault("max_retries", 2)
    kw.setdefault("backoff_seconds", 0.01)
    kw.setdefault("timeout_seconds", 5)
    return LLMClient(
        store,
        model="openai/fake-model",
        api_base=server.api_base,
        api_key="test",
        asset="temporal_day_summaries",
        partition="2026-07-18",
        **kw,
    )


def _ledger(store):
    with store.connect() as conn:
        return [dict(r) for r in conn.execute(select(llm_ledger).order_by(llm_ledger.c.call_id)).mappings()]


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s


def test_success_records_the_servers_usage_and_hard_cuts(store, server):
    server.push("ok", "x" * 100)
    result = _client(store, server).complete(REQ)
    assert result.text == "x" * 30  # ceil(20 * 1.5)
    assert (result.tokens_in, result.tokens_out) == (21, 9)
    (row,) = _ledger(store)
    assert (row["asset"], row["partition"], row["model"], row["outcome"]) == (
        "temporal_day_summaries",
        "2026-07-18",
        "openai/fake-model",
        "ok",
    )
    assert (row["tokens_in"], row["tokens_out"], row["attempts"], row["world_id"]) == (21, 9, 1, "w1")
    assert row["latency_ms"] >= 0
    sent = server.requests[0]
    assert sent["model"] == "fake-model"
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]


def test_same_prompt_is_served_from_cache_unless_forced(store, server):
    client = _client(store, server)
    client.complete(REQ)
    again = client.complete(REQ)
    assert again.cached and len(server.requests) == 1
    client.complete(REQ, force=True)
    assert len(server.requests) == 2
    assert [r["outcome"] for r in _ledger(store)] == ["ok", "cache_hit", "ok"]


def test_429_is_retried_with_backoff(store, server):
    server.push("status", 429).push("ok", "fine")
    result = _client(store, server).complete(REQ)
    assert result.text == "fine" and len(server.requests) == 2
    assert _ledger(store)[0]["attempts"] == 2


def test_a_429_waits_the_retry_after_the_provider_asked_for(store, server, caplog):
    """Retry-After: 2 was ignored (the retry came after the client's own 0.01 s backoff). Now the
    retry waits what the header asks, up to 60 s; a longer wait asked for falls back to the backoff."""
    server.push("retry_after", 2).push("ok", "after the wait")
    with caplog.at_level(logging.WARNING):
        assert _client(store, server).complete(REQ).text == "after the wait"
    (said,) = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert "retrying in 2.00s" in said, said
    server.push("retry_after", 3600).push("ok", "soon")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert _client(store, server).complete(replace(REQ, user="other")).text == "soon"
    (said,) = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert "retrying in 0.01s" in said, said


def test_persistent_500_is_a_hard_failure_with_an_error_row(store, server):
    for _ in range(3):
        server.push("status", 500)
    with pytest.raises(LLMHardFailure, match="after 3 attempt"):
        _client(store, server).complete(REQ)
    (row,) = _ledger(store)
    assert row["outcome"] == "error" and row["attempts"] == 3 and "500" in row["error"]
    assert len(server.requests) == 3  # max_retries=2: one call and two retries, nothing hidden below


def test_timeout_is_a_hard_failure_naming_its_limit_and_a_retry_says_what_the_call_was_for(store, server, caplog):
    import logging

    server.push("sleep", 3).push("sleep", 3)
    with caplog.at_level(logging.WARNING), pytest.raises(LLMHardFailure) as info:
        _client(store, server, timeout_seconds=0.5, max_retries=1).complete(REQ)
    assert _ledger(store)[0]["outcome"] == "error"
    # "Request timed out" said neither the limit nor its setting; the retry line said no partition
    assert "(after 0.5 s: MEMORY_LLM_TIMEOUT_SECONDS)" in str(info.value), info.value
    assert "[temporal_day_summaries, 2026-07-18, world w1]; retrying in" in caplog.text, caplog.text


def test_a_refused_connection_names_the_endpoint(store):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = LLMClient(
        store, model="openai/fake-model", api_base=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0
    )
    with pytest.raises(LLMHardFailure) as info:
        client.complete(REQ)
    assert f"Connection error. (endpoint http://127.0.0.1:{port}/v1)" in str(info.value), info.value


def test_no_api_key_is_said_by_its_setting_and_not_retried(store, server, monkeypatch):
    """litellm reports a missing key as a server error: it was retried 4 times, and its text named only
    OPENAI_API_KEY, which is not this project's setting."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = LLMClient(store, model="openai/fake-model", api_base=server.api_base, max_retries=3, backoff_seconds=0.01)
    with pytest.raises(LLMHardFailure) as info:
        client.complete(REQ)
    assert "after 1 attempt(s)" in str(info.value) and server.requests == []
    assert "no API key: MEMORY_LLM_API_KEY is unset or empty" in str(info.value), info.value
    assert _ledger(store)[0]["outcome"] == "error"


def test_malformed_body_is_a_hard_failure(store, server):
    for _ in range(3):
        server.push("malformed")
    with pytest.raises(LLMHardFailure) as info:
        _client(store, server).complete(REQ)
    assert _ledger(store)[-1]["outcome"] == "error"
    # said as what it is, not as litellm's "InternalServerError ... <APIResponse [200 OK] type=...>"
    said = str(info.value)
    assert "malformed answer: HTTP 200 with a body that is no chat completion (Expecting value" in said, said
    assert f"(endpoint {server.api_base})" in said and "APIResponse" not in said, said


def test_a_completion_without_a_choice_is_retried_and_counted_by_the_breaker(store, server):
    """HTTP 200 whose `choices` is empty: it was a ValueError naming Python's IndexError, never
    retried and never counted, so a provider answering only that ran every call of a range."""
    server.push("no_choices").push("ok", "an answer")
    client = _client(store, server, breaker_failures=2)
    assert client.complete(REQ).text == "an answer" and len(server.requests) == 2  # retried
    for _ in range(6):
        server.push("no_choices")
    for _ in range(2):
        with pytest.raises(LLMHardFailure, match="malformed answer: HTTP 200 with a chat completion holding no answer"):
            client.complete(replace(REQ, user=f"other {_}"))
    with pytest.raises(LLMProviderDown, match="malformed answer"):  # the breaker counted both
        client.complete(replace(REQ, user="a third"))
    assert len(server.requests) == 2 + 2 * 3


def test_a_call_interrupted_by_a_signal_still_leaves_its_ledger_row(store, server, monkeypatch):
    """Ctrl-C or SIGTERM mid-call (a BaseException: KeyboardInterrupt, Dagster's interrupt) left no
    row although the request had reached the provider. The interrupt itself goes on unchanged."""
    client = _client(store, server)

    def interrupted(req, timeout):
        raise KeyboardInterrupt

    monkeypatch.setattr(client, "_call", interrupted)
    with pytest.raises(KeyboardInterrupt):
        client.complete(REQ)
    (row,) = _ledger(store)
    assert (row["outcome"], row["error"], row["attempts"]) == (
        "error",
        "interrupted during the call (KeyboardInterrupt)",
        1,
    )
    assert (row["asset"], row["partition"], row["model"]) == (
        "temporal_day_summaries",
        "2026-07-18",
        "openai/fake-model",
    )


def test_a_usage_report_no_call_can_have_is_estimated_not_added_up(store, server, caplog):
    """prompt_tokens -50 and completion_tokens 10^12 were stored as given: `status` then totalled
    a trillion tokens out. Such a report is ignored (warned) and the tokens estimated."""
    client = _client(store, server)
    for usage in ((-50, 10), (10, 10**12)):
        server.usage = usage
        with caplog.at_level(logging.WARNING):
            client.complete(replace(REQ, user=f"material {usage}"))
    rows = _ledger(store)
    assert [r["tokens_source"] for r in rows] == ["estimated", "estimated"]
    assert all(0 < r["tokens_in"] < 1000 and 0 < r["tokens_out"] < 1000 for r in rows), rows
    assert sum("usage report for day ignored" in r.getMessage() for r in caplog.records) == 2
    server.usage = (120, 40)
    client.complete(replace(REQ, user="a sane report"))
    assert (_ledger(store)[-1]["tokens_source"], _ledger(store)[-1]["tokens_in"]) == ("provider", 120)


def test_tool_calls_come_back_parsed(store, server):
    server.push("tools", [("create_semantic_memory", {"text": "likes tomatoes", "importance": 3})])
    tools = [
        {
            "type": "function",
            "function": {
                "name": "create_semantic_memory",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}, "importance": {"type": "integer"}},
                },
            },
        }
    ]
    req = LLMRequest(task="extract", system="s", user="u", prompt_version="t-1", tools=tools)
    result = _client(store, server).complete(req)
    assert result.tool_calls == [
        {
            "id": "call_0",
            "name": "create_semantic_memory",
            "arguments": {"text": "likes tomatoes", "importance": 3},
            "raw_arguments": '{"text": "likes tomatoes", "importance": 3}',  # the string as received
        }
    ]
    assert server.requests[0]["tools"][0]["function"]["name"] == "create_semantic_memory"
    assert _ledger(store)[0]["tokens_in"] == 21


def test_a_deadline_bounds_a_call_and_its_retries(store, server):
    server.hold("material about tomatoes")  # the provider never answers
    client = _client(store, server, timeout_seconds=600, max_retries=3, backoff_seconds=0.2)
    failed: list[str] = []

    def call():
        try:
            # 4 s: room on a loaded machine for the call to start (litellm's first import included)
            client.complete(replace(REQ, deadline=time.monotonic() + 4))
        except LLMHardFailure as exc:
            failed.append(str(exc))

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(60)  # the 4 s left end the call, not the client's 600 s timeout
    alive = caller.is_alive()
    server.release()
    assert not alive and len(failed) == 1 and "Timeout" in failed[0]
    (row,) = _ledger(store)
    assert row["outcome"] == "error" and row["attempts"] <= 2  # no retry starts past the deadline


def test_offline_model_is_deterministic_and_within_target(store):
    client = LLMClient(store)
    assert client.model == offline.NAME == "offline/deterministic-extractive-v8"
    material = "We staked the tomatoes. Tomatoes need sun. The compost is warm. Compost turned twice."
    a = offline.headline(material, 30)
    assert a == offline.headline(material, 30) and a.startswith("compost, tomatoes")
    assert len(a) <= 30
    assert offline.headline("", 50) == "" and offline.headline("ok, yes. no!", 50) == ""
    result = client.complete(LLMRequest("day", "spec", material, "t-1", max_chars=30))
    assert result.text == a and _ledger(store)[0]["model"] == offline.NAME


KEY = "sk-test-0123456789abcdefSECRET"


@pytest.mark.parametrize("status, retries", [(401, 0), (500, 1)], ids=["auth-error", "retried-server-error"])
def test_an_error_echoing_the_key_is_stored_and_raised_redacted(store, server, caplog, status, retries):
    """The provider echoes the key and a credentialed URL: neither reaches the ledger, the
    exception (nor its chain), nor the logs."""
    import logging
    import traceback

    for _ in range(retries + 1):
        server.push("echo_key", status)
    client = LLMClient(
        store,
        model="openai/fake-model",
        api_base=server.api_base,
        api_key=KEY,
        max_retries=retries,
        backoff_seconds=0.01,
        timeout_seconds=5,
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(LLMHardFailure) as info:
        client.complete(REQ)
    assert len(server.requests) == retries + 1
    printed = "".join(traceback.format_exception(info.value))
    (row,) = _ledger(store)
    for text in (str(info.value), printed, row["error"], caplog.text):
        assert KEY not in text and "proxy-pass-123" not in text
    # The rest of the provider's message is kept: what happened, with the secrets blanked.
    assert "Incorrect API key provided: Bearer ***" in row["error"]
    assert "https://svc-user:***@llm-proxy.internal/v1" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    if retries:
        assert "retrying" in caplog.text and "Bearer ***" in caplog.text


# --- output length and where the tokens come from ------------------------------------------------
def test_max_tokens_is_sent_a_truncated_answer_says_length_and_is_not_reused(store, server):
    req = LLMRequest(task="day", system="spec", user="material", prompt_version="t-1", max_tokens=500)
    server.push("length", "half an answ").push("ok", "a whole answer")
    client = _client(store, server)
    cut = client.complete(req)
    assert server.requests[0]["max_tokens"] == 500
    assert cut.truncated and cut.finish_reason == "length" and cut.text == "half an answ"
    whole = client.complete(req)  # not served from the cache: the caller must be able to ask again
    assert not whole.cached and not whole.truncated and whole.finish_reason == "stop"
    assert client.complete(req).cached  # a whole answer is reused as before
    rows = _ledger(store)
    assert [(r["outcome"], r["finish_reason"], r["max_tokens"]) for r in rows] == [
        ("ok", "length", 500),
        ("ok", "stop", 500),
        ("cache_hit", None, 500),
    ]
    # a request without max_tokens sends none (the provider's default) and keeps its old cache key
    client.complete(REQ)
    assert "max_tokens" not in server.requests[-1]
    # cut at the provider's own limit: not reused either
    other = replace(REQ, user="other material")
    server.push("length", "cut by the provider")
    assert client.complete(other).truncated
    assert not client.complete(other).cached and len(server.requests) == 5


def test_an_answer_the_providers_filter_cut_is_a_failed_call_with_its_tokens_and_is_never_cached(store, server):
    """finish_reason content_filter: it was written, cached and vouched for as a whole summary. It is
    a failure of that request (the next run asks again), its tokens kept in the ledger, and not the
    provider failing: the breaker does not count it."""
    server.push("filtered", "Garden day: tomat").push("ok", "a whole answer")
    client = _client(store, server, breaker_failures=1)
    with pytest.raises(LLMHardFailure, match="content filter cut or withheld the answer") as failed:
        client.complete(REQ)
    assert not failed.value.provider_fault
    assert client.complete(REQ).text == "a whole answer"  # asked again (not cached), breaker closed
    rows = _ledger(store)
    assert [(r["outcome"], r["finish_reason"]) for r in rows] == [("error", "content_filter"), ("ok", "stop")]
    assert rows[0]["tokens_out"] > 0 and "finish_reason content_filter" in rows[0]["error"]
    assert client.stats.failures == 1 and client.stats.calls == 1


def test_provider_usage_is_provider_tokens_a_missing_usage_is_estimated(store, server):
    client = _client(store, server)
    reported = client.complete(REQ)
    assert (reported.tokens_in, reported.tokens_out, reported.tokens_source) == (21, 9, "provider")
    server.usage = None  # the provider reports no usage (litellm then says zeros)
    req = LLMRequest(task="day", system="spec", user="material about tomatoes " * 50, prompt_version="t-1")
    estimated = client.complete(req)
    assert estimated.tokens_source == "estimated" and estimated.tokens_in > 50 and estimated.tokens_out > 0
    client.complete(REQ)  # cached: no tokens spent, no source
    rows = _ledger(store)
    assert [(r["outcome"], r["tokens_source"]) for r in rows] == [
        ("ok", "provider"),
        ("ok", "estimated"),
        ("cache_hit", None),
    ]
    assert (rows[1]["tokens_in"], rows[1]["tokens_out"]) == (estimated.tokens_in, estimated.tokens_out)


def test_offline_tokens_are_estimates_and_it_stops_at_max_tokens(store):
    client = LLMClient(store)
    long_answer = "x" * 4_000  # about 1,000 tokens

    def rule(_req):
        return long_answer, [{"id": "offline-0", "name": "submit", "arguments": {}}]

    tools = [{"type": "function", "function": {"name": "submit", "parameters": {"type": "object"}}}]
    req = LLMRequest(task="t", system="s", user="u", prompt_version="t-1", tools=tools, offline_answer=rule)
    whole = client.complete(req)
    assert whole.tokens_source == "estimated" and whole.tokens_out == 1_000 and whole.tool_calls
    assert whole.finish_reason == "tool_calls" and not whole.truncated
    cut = client.complete(LLMRequest(**{**req.__dict__, "max_tokens": 600}))
    assert cut.truncated and cut.tokens_out == 600 and len(cut.text) == 2_400
    assert cut.tool_calls == []  # an incomplete tool call is not handed on
    rows = _ledger(store)
    assert [(r["tokens_source"], r["finish_reason"], r["max_tokens"]) for r in rows] == [
        ("estimated", "tool_calls", None),
        ("estimated", "length", 600),
    ]


def test_output_limit_is_the_models_max_output_and_the_context_left(store, server):
    import litellm

    litellm.register_model(
        {
            "openai/fake-limited": {
                "max_output_tokens": 50_000,
                "max_input_tokens": 60_000,
                "litellm_provider": "openai",
                "mode": "chat",
                "input_cost_per_token": 0.0,
                "output_cost_per_token": 0.0,
            }
        }
    )
    assert LLMClient(store).output_limit(REQ) is None  # the offline model has no limit
    assert _client(store, server).output_limit(REQ) is None  # a model litellm does not know
    limited = LLMClient(store, model="openai/fake-limited", api_base=server.api_base, api_key="test")
    assert limited.output_limit(REQ) == 50_000  # a short prompt: the model's own limit
    big = LLMRequest(task="day", system="spec", user="tomato " * 20_000, prompt_version="t-1")
    counted = litellm.token_counter(model="openai/fake-limited", messages=big.messages())
    assert 10_000 < counted < 60_000
    assert limited.output_limit(big) == 60_000 - counted  # the context left after the prompt


def _down(server, requests: int = 100) -> None:
    """The provider answers 500 to every request (until the script runs out)."""
    for _ in range(requests):
        server.push("status", 500)


def test_the_breaker_opens_after_n_failed_calls_and_refuses_without_a_request(store, server):
    _down(server)
    client = _client(store, server, max_retries=1, breaker_failures=3)
    for _ in range(3):
        with pytest.raises(LLMHardFailure):
            client.complete(REQ)
    assert len(server.requests) == 6  # 3 calls of 2 attempts each
    with pytest.raises(LLMProviderDown) as refused:
        client.complete(replace(REQ, user="another day"))
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"LLM provider openai/fake-model at {server.api_base} is failing: InternalServerError: ")
    assert "scripted 500" in line
    assert line.endswith("(3 consecutive failures)")
    # What the run stops with: that line, then what it leaves, in the caller's (the domain's) words.
    assert refused.value.stopping("the days not done are left") == f"{line}; stopping: the days not done are left"
    # Shared by every client of the process for that endpoint: another domain's client is refused too.
    other = LLMClient(
        store, model="openai/fake-model", api_base=server.api_base, api_key="k2", asset="sleep", breaker_failures=3
    )
    with pytest.raises(LLMProviderDown):
        other.complete(REQ)
    assert len(server.requests) == 6  # no request sent by a refused call
    rows = _ledger(store)
    assert [r["outcome"] for r in rows] == ["error"] * 3 + ["breaker_open"] * 2
    assert rows[3]["attempts"] == 0 and rows[3]["error"] == line and rows[4]["asset"] == "sleep"
    assert client.stats.refused == 1 and client.stats.ledger_rows == 4
    # Another endpoint (or model) has its own breaker.
    with FakeOpenAI() as healthy:
        assert _client(store, healthy, breaker_failures=3).complete(REQ).text


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_refused_key_or_an_unknown_model_opens_the_breaker_too(store, server, status):
    """Not retried, but the same for every call: a backfill with a bad key or model stops after N
    calls instead of paying every partition's."""
    for _ in range(10):
        server.push("status", status)
    client = _client(store, server, max_retries=3, breaker_failures=3)
    for i in range(3):
        with pytest.raises(LLMHardFailure):
            client.complete(replace(REQ, user=f"day {i}"))
    assert len(server.requests) == 3  # not retried
    with pytest.raises(LLMProviderDown) as refused:
        client.complete(replace(REQ, user="day 3"))
    assert refused.value.args[0].endswith("(3 consecutive failures)")
    assert len(server.requests) == 3


def test_a_model_naming_no_provider_opens_the_breaker_and_a_request_specific_refusal_does_not(store, server):
    unknown = LLMClient(store, model="notaprovider/xyz", asset="test", max_retries=0, breaker_failures=2)
    for i in range(2):
        with pytest.raises(LLMHardFailure) as failed:
            unknown.complete(replace(REQ, user=f"day {i}"))
        assert "\n" not in str(failed.value)  # litellm's several lines ("Pass model as E.g. ..."), as one
    with pytest.raises(LLMProviderDown):
        unknown.complete(replace(REQ, user="day 2"))
    # 400 is the request's own fault (too long, refused content): the next call may pass.
    for _ in range(4):
        server.push("status", 400)
    client = _client(store, server, max_retries=0, breaker_failures=2)
    for i in range(4):
        with pytest.raises(LLMHardFailure):
            client.complete(replace(REQ, user=f"bad {i}"))
    assert len(server.requests) == 4


def test_a_success_resets_the_count_and_a_trial_after_the_cooldown_closes_it(store, server):
    client = _client(store, server, max_retries=0, breaker_failures=3, breaker_cooldown_seconds=3600)
    for step in ("status", "status", "ok", "status", "status", "ok"):
        server.push(step, 500 if step == "status" else "fine")
    outcomes = []
    for i in range(6):
        try:
            client.complete(replace(REQ, user=f"day {i}"))
            outcomes.append("ok")
        except LLMHardFailure:
            outcomes.append("failed")
    assert outcomes == ["failed", "failed", "ok", "failed", "failed", "ok"]  # never 3 in a row: never open
    assert len(server.requests) == 6
    # Open it; within the cooldown every call is refused.
    _down(server, 3)
    for i in range(3):
        with pytest.raises(LLMHardFailure):
            client.complete(replace(REQ, user=f"down {i}"))
    with pytest.raises(LLMProviderDown):
        client.complete(REQ)
    assert len(server.requests) == 9
    # Past the cooldown (0 here), one call tries again; its success closes the breaker.
    trial = _client(store, server, max_retries=0, breaker_failures=3, breaker_cooldown_seconds=0)
    assert trial.complete(replace(REQ, user="back")).text
    assert client.complete(replace(REQ, user="back again")).text  # closed for every client
    assert len(server.requests) == 11


def test_a_failed_trial_keeps_it_open_and_zero_turns_it_off(store, server):
    _down(server)
    client = _client(store, server, max_retries=0, breaker_failures=2, breaker_cooldown_seconds=0)
    for i in range(3):  # the third is the trial after the (zero) cooldown: it fails, still open
        with pytest.raises(LLMHardFailure):
            client.complete(replace(REQ, user=f"down {i}"))
    assert len(server.requests) == 3
    off = _client(store, server, max_retries=0, breaker_failures=0)
    for i in range(4):
        with pytest.raises(LLMHardFailure):
            off.complete(replace(REQ, user=f"off {i}"))
    assert len(server.requests) == 7


def test_status_shows_the_ledger_per_model_with_what_litellm_priced(store, server, monkeypatch, redis_url, tmp_path):
    """One asset, three models: one litellm has a price for, one it has none for, the offline
    model. `memory-pipeline status` gives each its own row, the priced one's cost summed from the
    ledger, the others "—" (no price reported), never a 0 that would read as free."""
    from typer.testing import CliRunner

    from memory_pipeline.cli import app

    for model in ("openai/gpt-4o-mini", "openai/fake-model"):
        client = LLMClient(store, model=model, api_base=server.api_base, api_key="k", asset="a_test", partition="p")
        client.complete(REQ)
        client.complete(replace(REQ, user="other material"))
    LLMClient(store, asset="a_test", partition="p").complete(REQ)
    with store.connect() as conn:
        priced = [
            r.cost_usd
            for r in conn.execute(select(llm_ledger.c.cost_usd).where(llm_ledger.c.model == "openai/gpt-4o-mini"))
        ]
    assert len(priced) == 2 and all(c and c > 0 for c in priced)

    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    out = CliRunner().invoke(app, ["status"])
    assert out.exit_code == 0, out.output
    rows = {
        tuple(cell.strip() for cell in line.split("│")[1:3]): [cell.strip() for cell in line.split("│")[3:-1]]
        for line in out.output.splitlines()
        if line.count("│") >= 8 and "a_test" in line
    }
    offline_model = LLMClient(store).model
    assert set(rows) == {("a_test", "openai/gpt-4o-mini"), ("a_test", "openai/fake-model"), ("a_test", offline_model)}
    assert rows[("a_test", "openai/gpt-4o-mini")][:2] == ["ok", "2"]
    assert float(rows[("a_test", "openai/gpt-4o-mini")][-1]) == pytest.approx(sum(priced), abs=1e-6)
    assert rows[("a_test", "openai/fake-model")][-1] == "—" and rows[("a_test", offline_model)][-1] == "—"
