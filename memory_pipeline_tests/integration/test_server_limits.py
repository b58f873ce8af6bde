"""The memory server's limits under abuse (issue 19), over HTTP with the SDK's client: a body over
the limit is answered 413 before anything runs (declared or chunked); a token over its rate gets a
tool error naming the limit, its session open and other tokens served; a call past the timeout gets
one line while the server serves others, and its write lands whole; a client killed mid-call leaves
no traceback in the log and nothing half-written. Every call is one log line (never the token, never
an argument's content) and counted at /metrics, which needs an --all-worlds token."""

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime

import httpx
import pytest
from sqlalchemy import select, text
from typer.testing import CliRunner

from memory_pipeline.access import tokens
from memory_pipeline.cli import app
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.server.app import make_uvicorn
from memory_pipeline.server.limits import Limits, TokenBuckets
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.tables import tower_entries
from memory_pipeline_tests.conftest import CST, event
from memory_pipeline_tests.integration.test_memory_server import ACCEPT, INITIALIZE, _calls, _free_port

NOTES = "agent/notes"  # grouped by world (the activity type takes only its feed)
SECRET = "quokkasecret"  # in arguments of the logged calls; never in the log or /metrics


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not any(r is record for r in self.records[-5:]):  # seen at each logger it passes
            self.records.append(record)

    def calls(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.name == "memory_pipeline.server"]

    def troubles(self) -> list[str]:
        """Every record with a traceback, or at WARNING and above, from any logger."""
        return [
            f"{r.name}: {r.getMessage()}"
            for r in self.records
            if r.exc_info or r.exc_text or r.levelno >= logging.WARNING
        ]


@pytest.fixture
def limited(store, ingest, redis_url, monkeypatch):
    """``start(**limits)``: a server over worlds wa and wb with those limits, and the log of every
    logger (the SDK's, uvicorn's and ours) captured from then on."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    at = datetime(2026, 1, 5, 10, 0, tzinfo=CST)
    ingest([event("wa", "wa.s1", "user", "hello", at, mid="wa1"), event("wb", "wb.s1", "user", "hi", at, mid="wb1")])
    bearer = {k: tokens.create(store, [w], name=k)[1] for k, w in (("a", "wa"), ("b", "wb"), ("ops", "*"))}
    tower = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="limits_test", partition=p))
    tower.create_type(NOTES, group_field="world")
    handler = _Records()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn"), logging.getLogger("memory_pipeline.server")]
    levels = [lg.level for lg in loggers]
    running: list[tuple] = []

    def start(**limits) -> dict:
        port = _free_port()
        srv = make_uvicorn(tower, "127.0.0.1", port, limits=Limits(**limits))
        for lg in loggers:  # after uvicorn configured its loggers (its own do not propagate to the root)
            lg.addHandler(handler)
            lg.setLevel(logging.INFO)
        thread = threading.Thread(target=srv.run, daemon=True)
        thread.start()
        running.append((srv, thread))
        _wait_for(lambda: srv.started, "the server never started")
        url = f"http://127.0.0.1:{port}"
        return {"url": url, "bearer": bearer, "log": handler, "store": store}

    yield start
    for srv, thread in running:
        srv.should_exit = True
        thread.join(timeout=10)
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)
    tower.close()


def _run(calls):
    """A client's calls, bounded: a server that stopped answering fails the test, never hangs it."""
    return asyncio.run(asyncio.wait_for(calls, timeout=60))


def _wait_for(condition, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _metrics(served, token: str | None = "ops") -> httpx.Response:
    headers = {"Authorization": f"Bearer {served['bearer'][token]}"} if token else {}
    return httpx.get(served["url"] + "/metrics", headers=headers, timeout=10)


def _sample(served, name: str, **labels) -> float:
    """One sample of /metrics (0 when absent: a counter not yet incremented)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{{re.escape(want)}\}})? (\S+)$" if want else rf"^{name} (\S+)$")
    found = [float(m.group(1)) for line in _metrics(served).text.splitlines() if (m := pattern.match(line))]
    return found[0] if found else 0.0


def _all_entries(store) -> list[str]:
    with store.connect() as conn:
        return [str(c) for c in conn.execute(select(tower_entries.c.content)).scalars()]


def _entries(store, label: str) -> int:
    """How many entries of the appends labelled ``label`` are stored."""
    return sum(c.startswith(label + " #") for c in _all_entries(store))


def _append(label: str, n: int = 3) -> tuple[str, dict]:
    entries = [{"content": f"{label} #{i}", "group": "wa"} for i in range(n)]
    return ("mem/append", {"type": NOTES, "entries": entries})


class _EntriesLocked:
    """Holds tower_entries locked against writes (EXCLUSIVE: reads go on): a tool appending to it
    waits, a real slow call, until ``release()``."""

    def __init__(self, store):
        self.conn = store.engine.connect()
        self.tx = self.conn.begin()
        self.conn.execute(text("LOCK TABLE tower_entries IN EXCLUSIVE MODE"))

    def release(self) -> None:
        if self.tx.is_active:
            self.tx.rollback()
            self.conn.close()


@pytest.fixture
def entries_locked(store):
    lock = _EntriesLocked(store)
    yield lock
    lock.release()


# ---- request body ---------------------------------------------------------------------------------


def test_a_body_over_the_limit_is_413_before_anything_runs_declared_or_chunked(limited):
    served = limited(max_body_bytes=64 * 1024)
    headers = {**ACCEPT, "Authorization": f"Bearer {served['bearer']['a']}"}
    url = served["url"] + "/mcp"
    with httpx.Client(timeout=10) as client:
        opened = client.post(url, json=INITIALIZE, headers=headers)
        assert opened.status_code == 200
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
        client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)

        def append(content: str, id_: int) -> bytes:
            call = {
                "jsonrpc": "2.0",
                "id": id_,
                "method": "tools/call",
                "params": dict(zip(("name", "arguments"), _append(content, 1), strict=True)),
            }
            return json.dumps(call).encode()

        big = append(SECRET + "x" * 70 * 1024, 2)
        declared = client.post(url, content=big, headers=session)
        chunked = client.post(url, content=iter([big[i : i + 8192] for i in range(0, len(big), 8192)]), headers=session)
        small = client.post(url, content=append("small enough", 3), headers=session)
    assert declared.status_code == 413 and chunked.status_code == 413, (declared, chunked)
    assert "content-length" not in chunked.request.headers  # sent chunked indeed
    for refused in (declared, chunked):
        assert refused.text.strip() and "\n" not in refused.text.strip(), refused.text
    assert small.status_code == 200 and '"isError":false' in small.text.replace(" ", ""), small.text
    assert _entries(served["store"], "small enough") == 1  # the same call under the limit runs
    assert not [e for e in _all_entries(served["store"]) if SECRET in e]
    assert _sample(served, "memory_server_calls_total", tool="mem/append", outcome="ok") == 1  # one call ran


def test_a_body_with_nan_a_number_past_range_or_nested_too_deep_is_a_parse_error_naming_it(limited):
    """Python's JSON parser takes NaN and Infinity (and reads 1e400 as infinity), and the SDK then
    passed them on as null: an entry's number was stored as null without a word. A body nested
    thousands of levels deep, or with an integer of 5,000 digits, was an HTTP 500 (the SDK's parser
    raised). All are now refused before the SDK parses the body."""
    served = limited()
    headers = {**ACCEPT, "Authorization": f"Bearer {served['bearer']['a']}"}
    url = served["url"] + "/mcp"

    def call(entry_content: str, id_: int) -> bytes:  # the content spliced in raw: json.dumps would quote it
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": id_,
                "method": "tools/call",
                "params": {"name": "mem/append", "arguments": {"type": NOTES, "entries": [{"content": "@"}]}},
            }
        )
        return body.replace('"@"', entry_content).replace('"entries": [{', '"entries": [{"group": "wa", ').encode()

    deep = "[" * 3000 + "]" * 3000
    with httpx.Client(timeout=10) as client:
        opened = client.post(url, json=INITIALIZE, headers=headers)
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
        client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        answers = {
            name: client.post(url, content=call(raw, i), headers=session)
            for i, (name, raw) in enumerate(
                [
                    ("NaN", '{"x": NaN}'),
                    ("-Infinity", '{"x": [1, -Infinity]}'),
                    ("1e400", '{"x": 1e400}'),
                    ("long mantissa", '{"x": ' + "9" * 299 + "e20}"),  # no 3-digit exponent: it passed, as null
                    ("digits", '{"x": ' + "7" * 5000 + "}"),
                    ("deep", deep),
                ],
                start=2,
            )
        }
        # not UTF-8 (latin-1's é): the SDK answered HTTP 500, its traceback in the log
        answers["latin-1"] = client.post(
            url, content=call('{"x": "café"}', 8).decode().encode("latin-1"), headers=session
        )
        fine = client.post(url, content=call('{"x": 1.5, "note": "NaN and Infinity as text"}', 9), headers=session)
    for name, answer in answers.items():
        assert answer.status_code == 400, (name, answer.status_code, answer.text)
        error = answer.json()["error"]
        assert error["code"] == -32700, error
        wanted = {
            "deep": "nested deeper than 48 levels",
            "1e400": "1e400 is beyond a 64-bit float's range",
            "long mantissa": "9999 is beyond a 64-bit float's range",
            "latin-1": "the body is not UTF-8 (byte ",
            "digits": "cannot read: Exceeds the limit (4300 digits)",
        }.get(name, f"{name} is not a JSON number")
        assert wanted in error["message"], error
    assert fine.status_code == 200 and '"isError":false' in fine.text.replace(" ", ""), fine.text
    with served["store"].connect() as conn:
        stored = [c for c in conn.execute(select(tower_entries.c.content)).scalars()]
    assert stored == [{"x": 1.5, "note": "NaN and Infinity as text"}], stored  # only the call that was JSON
    # The token is checked first: without one in force, a bad body gets 401 and learns nothing more.
    with httpx.Client(timeout=10) as client:
        for bearer in (None, "not-a-token"):
            auth = {"Authorization": f"Bearer {bearer}"} if bearer else {}
            for path in ("/mcp", "/"):
                answer = client.post(served["url"] + path, content=call('{"x": NaN}', 10), headers={**ACCEPT, **auth})
                assert answer.status_code == 401, (bearer, path, answer.status_code, answer.text)
    assert not [t for t in served["log"].troubles() if "Traceback" in t or "RecursionError" in t]


def test_arguments_the_sdk_would_refuse_without_a_word_are_named(limited):
    """A tool call's arguments that are no object, or a key holding a lone surrogate, got the SDK's
    -32602 "Invalid request parameters" with empty data: the client learnt nothing of what was
    wrong. Same code and shape (HTTP 200, the session open), with what is wrong. A lone surrogate
    in a value reaches the tool, which names it."""
    served = limited()
    headers = {**ACCEPT, "Authorization": f"Bearer {served['bearer']['a']}"}
    url = served["url"] + "/mcp"
    cases = {
        '["x"]': "params.arguments: expected an object (the tool's arguments by name), got array",
        '"x"': "params.arguments: expected an object (the tool's arguments by name), got string",
        "7": "params.arguments: expected an object (the tool's arguments by name), got number",
        '{"\\ud800x": 1, "type": "agent/notes"}': 'params.arguments: the argument name "\\ud800x" holds a lone '
        "surrogate at position 0 (not Unicode text)",
    }
    with httpx.Client(timeout=10) as client:
        opened = client.post(url, json=INITIALIZE, headers=headers)
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
        client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        answers = {}
        for i, raw in enumerate(cases, start=2):
            body = '{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "mem/append", "arguments": %s}}'
            answers[raw] = client.post(url, content=(body % (i, raw)).encode(), headers=session)
        value = '{"type": "agent/notes", "entries": [{"group": "wa", "content": {"x": "\\ud800"}}]}'
        body = '{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "mem/append", "arguments": %s}}'
        in_value = client.post(url, content=(body % value).encode(), headers=session)
        still = json.dumps(_append("still open", 1)[1])
        fine = client.post(url, content=(body.replace('"id": 9', '"id": 10') % still).encode(), headers=session)
    for (raw, said), (i, answer) in zip(cases.items(), enumerate(answers.values(), start=2), strict=True):
        assert answer.status_code == 200, (raw, answer.status_code, answer.text)
        error = answer.json()["error"]
        assert answer.json()["id"] == i and error["code"] == -32602, answer.text
        assert error["message"] == f"Invalid request parameters: {said}" and error["data"] == said, (raw, error)
    assert "contains a lone surrogate" in in_value.text and '"isError":true' in in_value.text.replace(" ", "")
    assert fine.status_code == 200 and '"isError":false' in fine.text.replace(" ", ""), fine.text


# ---- rate ------------------------------------------------------------------------------------------


def test_a_token_over_its_rate_is_refused_before_the_tool_runs_and_others_are_served(limited):
    served = limited(rate=0.001, burst=3)  # no call refills within the test: the 4th call is over
    calls = [("mem/list_types", {})] * 3 + [_append("over the rate", 3), ("mem/list_types", {})]
    _, results = _run(_calls(served["url"], served["bearer"]["a"], calls))
    assert [e for e, _ in results] == [False, False, False, True, True], results
    for _, line in results[3:]:
        assert "rate limit: token 'a' is over 0.001 calls/s (burst 3); retry in" in line and "\n" not in line, line
    assert _entries(served["store"], "over the rate") == 0  # refused before it ran
    _, (other,) = _run(_calls(served["url"], served["bearer"]["b"], [("mem/list_types", {})]))
    assert other[0] is False, other  # the limit is per token
    assert _sample(served, "memory_server_calls_total", tool="mem/list_types", outcome="rate_limited") == 1
    assert _sample(served, "memory_server_calls_total", tool="mem/append", outcome="rate_limited") == 1
    assert _sample(served, "memory_server_calls_total", tool="mem/list_types", outcome="ok") == 4
    assert any(
        "token=a tool=mem/append world=- " in c and c.endswith("outcome=rate_limited") for c in served["log"].calls()
    )


def test_the_token_bucket_refills_at_its_rate_up_to_its_burst():
    now = [0.0]
    buckets = TokenBuckets(rate=2, burst=3, clock=lambda: now[0])
    assert [buckets.take("a") for _ in range(3)] == [0, 0, 0]
    assert buckets.take("a") == pytest.approx(0.5) and buckets.take("b") == 0
    now[0] = 0.5  # one call's worth
    assert buckets.take("a") == 0 and buckets.take("a") == pytest.approx(0.5)
    now[0] = 100.0  # never more than the burst
    assert [buckets.take("a") for _ in range(4)][-1] == pytest.approx(0.5)


# ---- time ------------------------------------------------------------------------------------------


def test_a_call_past_the_timeout_gets_one_line_others_are_served_and_its_write_lands_whole(limited, entries_locked):
    served = limited(call_timeout=1)
    token = served["bearer"]["a"]

    async def drive() -> tuple:
        slow = asyncio.create_task(_calls(served["url"], token, [_append("slow write", 3)]))
        await asyncio.to_thread(_wait_for, lambda: _sample(served, "memory_server_calls_running") == 1, "no call ran")
        _, (other,) = await _calls(served["url"], served["bearer"]["b"], [("objects/status", {"world": "wb"})])
        return other, (await slow)[1][0]

    other, (is_error, line) = _run(drive())
    assert other[0] is False, other  # served while the slow call waited on the lock
    assert is_error and "call timed out after 1 s (the server's --call-timeout)" in line and "\n" not in line, line
    assert _entries(served["store"], "slow write") == 0
    assert _sample(served, "memory_server_calls_running") == 1  # its thread still waits
    entries_locked.release()
    _wait_for(lambda: _sample(served, "memory_server_calls_running") == 0, "the abandoned call never returned")
    assert _entries(served["store"], "slow write") == 3  # whole: all three entries of the one call
    assert _sample(served, "memory_server_calls_total", tool="mem/append", outcome="timeout") == 1
    assert any(
        c.startswith("call token=a tool=mem/append ") and c.endswith("outcome=timeout") for c in served["log"].calls()
    )
    assert not served["log"].troubles(), served["log"].troubles()


# ---- a client killed mid-call --------------------------------------------------------------------------

CLIENT = """
import asyncio, json, os
from mcp import ClientSession
import httpx
from mcp.client.streamable_http import streamable_http_client

async def main():
    headers = {"Authorization": "Bearer " + os.environ["MP_TOKEN"]}
    timeout = httpx.Timeout(30, read=300)  # the SDK client's own
    async with httpx.AsyncClient(headers=headers, timeout=timeout) as http, streamable_http_client(os.environ["MP_URL"], http_client=http) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("mem/append", json.loads(os.environ["MP_ARGS"]))

asyncio.run(main())
"""


def test_a_client_killed_mid_call_leaves_no_traceback_and_nothing_half_written(limited, entries_locked):
    served = limited(call_timeout=60)
    env = {
        **os.environ,
        "MP_URL": served["url"],
        "MP_TOKEN": served["bearer"]["a"],
        "MP_ARGS": json.dumps(_append("killed mid-call", 3)[1]),
    }
    client = subprocess.Popen([sys.executable, "-c", CLIENT], env=env)
    try:
        _wait_for(lambda: _sample(served, "memory_server_calls_running") == 1, "the client's call never ran")
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=10)
    _, (during,) = _run(_calls(served["url"], served["bearer"]["b"], [("objects/status", {"world": "wb"})]))
    assert during[0] is False, during  # served while the dead client's call still waits on the lock
    assert _entries(served["store"], "killed mid-call") == 0
    entries_locked.release()
    _wait_for(lambda: _sample(served, "memory_server_calls_running") == 0, "the dead client's call never returned")
    _wait_for(lambda: any("tool=mem/append" in c for c in served["log"].calls()), "the call was never logged")
    assert _entries(served["store"], "killed mid-call") == 3  # the call, its client gone, completed whole
    _, (after,) = _run(_calls(served["url"], served["bearer"]["a"], [("mem/list_types", {})]))
    assert after[0] is False, after
    assert not served["log"].troubles(), served["log"].troubles()


# ---- the call log and /metrics ------------------------------------------------------------------------


def test_every_call_is_one_log_line_and_counted_without_the_token_or_any_content(limited):
    served = limited()
    _, results = _run(
        _calls(
            served["url"],
            served["bearer"]["a"],
            [
                ("memory/search", {"world": "wa", "query": f"zebra {SECRET}"}),
                ("memory/search", {"world": "wa", "query": f"zebra {SECRET}", "k": "5"}),
                ("memory/search", {"world": "wb", "query": f"zebra {SECRET}"}),
                ("objects/status", {"world": "wa\nforged=1"}),
            ],
        )
    )
    assert [e for e, _ in results] == [False, True, True, True], results
    calls = served["log"].calls()
    pattern = r"call token=a tool=memory/search world={} ms=\d+ outcome={}"
    assert re.fullmatch(pattern.format("wa", "ok"), calls[0]), calls
    assert re.fullmatch(pattern.format("wa", "invalid"), calls[1]), calls
    assert re.fullmatch(pattern.format("wb", "refused"), calls[2]), calls
    assert re.fullmatch(r"call token=a tool=objects/status world=- ms=\d+ outcome=refused", calls[3]), calls
    text = "\n".join(r.getMessage() for r in served["log"].records)
    assert SECRET not in text and served["bearer"]["a"] not in text
    assert _metrics(served, token=None).status_code == 401
    # every world's calls are counted there: a world's token may not read them (its own world's token
    # would learn when the other worlds call)
    scoped = _metrics(served, token="a")
    assert scoped.status_code == 403 and "insufficient_scope" in scoped.text and "memory_server" not in scoped.text
    page = _metrics(served)
    assert page.status_code == 200 and "text/plain" in page.headers["content-type"]
    assert SECRET not in page.text and set(re.findall(r'(\w+)="', page.text)) == {"tool", "outcome", "le"}
    assert _sample(served, "memory_server_calls_total", tool="memory/search", outcome="ok") == 1
    assert _sample(served, "memory_server_calls_total", tool="memory/search", outcome="invalid") == 1
    assert _sample(served, "memory_server_calls_total", tool="memory/search", outcome="refused") == 1
    assert _sample(served, "memory_server_call_seconds_count", tool="memory/search") == 3


def test_an_append_logs_the_worlds_it_wrote_to(limited):
    """mem/append names no world argument: its worlds are its entries' groups, given or read from
    the type's group field (it logged world=-)."""
    served = limited()
    by_field = {"type": NOTES, "entries": [{"content": {"world": "wa", "note": SECRET}}]}
    given = {"type": NOTES, "entries": [{"content": "x", "group": "wa"}]}
    two = {"type": NOTES, "entries": [{"content": "y", "group": "wb"}, {"content": {"world": "wa"}}]}
    _, mine = _run(_calls(served["url"], served["bearer"]["a"], [("mem/append", by_field), ("mem/append", given)]))
    _, ops = _run(_calls(served["url"], served["bearer"]["ops"], [("mem/append", two)]))
    refused = {"type": NOTES, "entries": [{"content": "z", "group": "wb"}]}
    _, theirs = _run(_calls(served["url"], served["bearer"]["a"], [("mem/append", refused)]))
    assert [e for e, _ in mine + ops + theirs] == [False, False, False, True], (mine, ops, theirs)
    calls = [c for c in served["log"].calls() if "tool=mem/append" in c]
    pattern = r"call token={} tool=mem/append world={} ms=\d+ outcome={}"
    assert re.fullmatch(pattern.format("a", "wa", "ok"), calls[0]), calls
    assert re.fullmatch(pattern.format("a", "wa", "ok"), calls[1]), calls
    assert re.fullmatch(pattern.format("ops", "wa,wb", "ok"), calls[2]), calls
    assert re.fullmatch(pattern.format("a", "wb", "refused"), calls[3]), calls  # as memory/search names it
    assert SECRET not in "\n".join(calls)


def test_serve_takes_the_limits_and_refuses_a_bad_one_in_one_line():
    runner = CliRunner()
    for cmd in ("serve", "mcp"):
        out = " ".join(runner.invoke(app, [cmd, "--help"]).output.split())
        for option in ("--max-body-bytes", "--rate-limit", "--rate-burst", "--call-timeout"):
            assert option in out, (cmd, option)
    for args, problem in (
        (["--call-timeout", "0"], "call timeout must be a positive number of seconds"),
        (["--rate-limit", "-1"], "rate limit must be >= 0 calls/s"),
        (["--max-body-bytes", "0"], "max body bytes must be at least 1"),
    ):
        refused = runner.invoke(app, ["serve", *args])
        assert refused.exit_code == 2 and problem in " ".join(refused.output.split()), refused.output
