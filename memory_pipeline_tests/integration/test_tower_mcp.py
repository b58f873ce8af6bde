"""Seed 004 MCP endpoint: the server started over the real store, every one of the 13 mem/* tools
driven by the SDK's own client over streamable HTTP, at the seed's address and at /mcp."""

import asyncio
import json
import logging
import re
import socket
import threading
import time
from datetime import date

import pytest
from mcp import ClientSession
from sqlalchemy import func, select

from memory_pipeline.access import tokens
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.server.app import TOOL_NAMES as SERVER_TOOLS
from memory_pipeline.server.app import make_uvicorn
from memory_pipeline.server.tower_tools import TOOL_NAMES
from memory_pipeline.tower import windows
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.tables import (
    tower_entries,
    tower_jobs,
    tower_summaries,
    tower_window_runs,
    tower_windows,
)
from memory_pipeline_tests.conftest import CST
from memory_pipeline_tests.mcp_client import mcp_streams


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(store):
    yield from _serve(store, TowerConfig())


# The bearer token of each server these tests start (an --all-worlds token: the tower tools' full
# meaning, every group of every type; the world scoping is test_memory_server.py's).
_TOKENS: dict[str, str] = {}


def _client(url: str):
    base = next(b for b in _TOKENS if url.startswith(b))
    return mcp_streams(url, headers={"Authorization": f"Bearer {_TOKENS[base]}"})


def _serve(store, cfg: TowerConfig):
    tower = Tower(store, cfg, CST, lambda p: LLMClient(store, asset="mcp_test", partition=p))
    _, token = tokens.create(store, ["*"], name=f"tower-mcp-{_free_port()}")
    port = _free_port()
    srv = make_uvicorn(tower, "127.0.0.1", port)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started
    _TOKENS[f"http://127.0.0.1:{port}"] = token
    yield f"http://127.0.0.1:{port}", tower
    srv.should_exit = True
    thread.join(timeout=10)
    tower.close()


def _data(result):
    assert not result.isError, result.content[0].text
    return json.loads(result.content[0].text)


async def _drive(url: str, tower: Tower) -> dict:
    out: dict = {}
    async with _client(url) as (read, write, _), ClientSession(read, write) as session:
        init = await session.initialize()
        caps = init.capabilities
        # Nothing server-initiated carries memory: no resource subscriptions, no resources or prompts.
        out["subscribe"] = bool(caps.resources and caps.resources.subscribe)
        out["resources"] = (await session.list_resources()).resources
        out["prompts"] = (await session.list_prompts()).prompts
        tools = await session.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["described"] = all(t.description for t in tools.tools)
        call = session.call_tool
        out["create"] = _data(
            await call("mem/create_type", {"name": "proj/decisions", "summaries": True, "chain": ["1h", "day", "week"]})
        )
        out["list"] = _data(await call("mem/list_types", {}))
        out["get"] = _data(await call("mem/get_type", {"name": "proj/decisions"}))
        out["update"] = _data(await call("mem/update_type", {"name": "proj/decisions", "changes": {"retention": "2y"}}))
        entries = [
            {"content": f"chose postgres {i}", "at": f"2026-01-05T{9 + i:02d}:00:00+08:00", "id": f"m{i}"}
            for i in range(3)
        ]
        out["append"] = _data(await call("mem/append", {"type": "proj/decisions", "entries": entries}))
        out["bad_append"] = await call(
            "mem/append", {"type": "proj/decisions", "entries": [{"content": "x", "at": "soon"}]}
        )
        out["bad_name"] = await call("mem/create_type", {"name": "../etc"})
        tower_build(tower)
        out["windows"] = _data(
            await call("mem/windows", {"type": "proj/decisions", "granularity": "day", "anchor": "2026-01-05"})
        )
        out["recall"] = _data(
            await call(
                "mem/recall", {"type": "proj/decisions", "granularity": "day", "anchor": "2026-01-05", "limit": 2}
            )
        )
        out["missing"] = _data(
            await call("mem/get_summary", {"type": "proj/decisions", "granularity": "day", "anchor": "2026-01-05"})
        )
        out["summarize"] = _data(
            await call("mem/summarize", {"type": "proj/decisions", "granularity": "week", "anchor": "2026-01-05"})
        )
        job_id = out["summarize"]["jobs"][0]["job_id"]
        for _ in range(100):
            out["status"] = _data(await call("mem/job_status", {"job_id": job_id}))
            if out["status"]["state"] not in ("queued", "running"):
                break
            await asyncio.sleep(0.1)
        out["found"] = _data(
            await call("mem/get_summary", {"type": "proj/decisions", "granularity": "week", "anchor": "2026-01-05"})
        )
        out["recompute"] = _data(
            await call("mem/recompute", {"type": "proj/decisions", "granularity": "day", "anchor": "2026-01-05"})
        )
        await asyncio.sleep(0.5)
        out["jobs"] = _data(await call("mem/list_jobs", {"type": "proj/decisions"}))
        out["delete"] = _data(await call("mem/delete_type", {"name": "proj/decisions"}))
    return out


def tower_build(tower: Tower) -> None:
    from memory_pipeline.tower import windows

    windows.build_day(tower.store, __import__("datetime").date(2026, 1, 5), CST)


def test_every_tool_over_http_at_the_seed_address(server):
    url, tower = server
    out = asyncio.run(_drive(url, tower))  # the seed's address: http://127.0.0.1:8900 (here a free port)
    tower_tools = [t for t in out["tools"] if t.startswith("mem/")]
    assert tower_tools == sorted(TOOL_NAMES) and len(tower_tools) == 13 and out["described"]
    assert out["tools"] == sorted(SERVER_TOOLS)
    assert not out["subscribe"] and out["resources"] == [] and out["prompts"] == []
    assert out["create"]["name"] == "proj/decisions" and out["create"]["summaries"] is True
    assert {"worklog", "agent/activity", "proj/decisions"} <= {t["name"] for t in out["list"]["types"]}
    assert out["get"]["chain"] == ["1h", "day", "week"] and out["update"]["retention"] == "2y"
    assert out["append"]["inserted"] == 3
    assert out["bad_append"].isError and "entries[0]: field 'at'" in out["bad_append"].content[0].text
    assert out["bad_name"].isError and "field 'name'" in out["bad_name"].content[0].text
    assert out["windows"]["total_entries"] == 3 and out["windows"]["level"] == "1h"
    assert out["recall"]["returned"] == 2 and out["recall"]["total_entries"] == 3 and out["recall"]["next_cursor"]
    assert out["missing"]["state"] == "missing"
    assert out["status"]["state"] == "succeeded" and out["status"]["record_id"]
    found = out["found"]["summaries"][0]
    assert set(found["provenance"]) == {"strategy", "chunks", "inputTokens", "clippedEntries"}
    assert found["source"] == "chain"
    assert out["recompute"]["jobs"][0]["kind"] == "recompute"
    assert {j["kind"] for j in out["jobs"]["jobs"]} == {"summarize", "recompute"}
    assert out["delete"]["archived"] is True
    # every time an agent reads is in the configured zone, to the second (they were UTC, microseconds)
    times = [out["create"]["created_at"], out["delete"]["updated_at"], found["created_at"], out["status"]["updated_at"]]
    times += [t for j in out["jobs"]["jobs"] for t in (j["created_at"], j["updated_at"])]
    times += [out["recall"]["materialized_at"], *(w["materialized_at"] for w in out["windows"]["windows"])]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00", t) for t in times), times


def test_the_endpoint_also_answers_at_mcp(server):
    url, _ = server

    async def tools() -> list[str]:
        async with _client(url + "/mcp") as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            return [t.name for t in (await session.list_tools()).tools]

    assert sorted(asyncio.run(tools())) == sorted(SERVER_TOOLS)


def _count(store, table) -> int:
    with store.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def _ledger_rows(store) -> int:
    return _count(store, llm_ledger)


async def _session_calls(url: str, calls: list[tuple[str, dict]]) -> list[dict]:
    async with _client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        return [_data(await session.call_tool(name, args)) for name, args in calls]


def test_the_mcp_process_runs_no_scheduler(store):
    """With the shortest refresh and tick the config allows, entries appended over MCP to a closed,
    settled day of a summarizing type and to the open day, and a few seconds with the server up:
    no window, no window run, no summary, no job and no ledger row appear unless a tool asks."""
    cfg = TowerConfig(structural_refresh_seconds=1, semantic_tick_minutes=1, settle_minutes=0)
    gen = _serve(store, cfg)
    url, tower = next(gen)
    try:
        today = utcnow().astimezone(CST)
        entries = [
            {"content": {"project": "alpha", "did": f"work {i}"}, "at": f"2026-01-05T{9 + i:02d}:00:00+08:00"}
            for i in range(3)
        ] + [{"content": {"project": "alpha", "did": "now"}, "at": today.isoformat()}]
        (appended,) = asyncio.run(_session_calls(url, [("mem/append", {"type": "worklog", "entries": entries})]))
        assert appended["inserted"] == 4 and appended["late_windows_refreshed"] == 0
        time.sleep(3)  # three structural refresh periods with the server up
        assert _count(store, tower_entries) == 4
        for table in (tower_windows, tower_window_runs, tower_summaries, tower_jobs, llm_ledger):
            assert _count(store, table) == 0, table.name
        assert tower._pool is None  # no job worker either: it starts with the first job a tool asks for
    finally:
        next(gen, None)


def test_over_mcp_only_summarize_recompute_and_summarize_on_miss_call_the_llm(server, store):
    url, tower = server
    entries = [
        {"content": {"project": p, "did": f"{p} chose postgres on day {d}"}, "at": f"2026-01-0{d}T10:00:00+08:00"}
        for d in (5, 6)
        for p in ("alpha", "beta")
    ]
    asyncio.run(_session_calls(url, [("mem/append", {"type": "worklog", "entries": entries})]))
    for d in (5, 6):  # the windows (zero LLM), so the reads below have something to return
        windows.build_day(store, date(2026, 1, d), CST)
    day = {"type": "worklog", "granularity": "day", "anchor": "2026-01-05"}
    reads = asyncio.run(
        _session_calls(
            url,
            [
                ("mem/list_types", {}),
                ("mem/get_type", {"name": "worklog"}),
                ("mem/windows", {"type": "worklog", "granularity": "week", "anchor": "2026-01-05"}),
                ("mem/recall", {**day, "limit": 1}),
                (
                    "mem/recall",
                    {"type": "worklog", "from": "2026-01-05T00:00:00+08:00", "to": "2026-01-07T00:00:00+08:00"},
                ),
                ("mem/get_summary", day),
                ("mem/get_summary", {"type": "worklog", "granularity": "week", "anchor": "2026-01-05"}),
                ("mem/list_jobs", {}),
            ],
        )
    )
    assert reads[3]["total_entries"] == 2 and reads[4]["total_entries"] == 4
    assert reads[5]["state"] == "missing" and reads[6]["state"] == "missing"  # stated, not summarized
    assert reads[7]["jobs"] == [] and _ledger_rows(store) == 0 and _count(store, tower_summaries) == 0

    (started,) = asyncio.run(_session_calls(url, [("mem/summarize", day)]))
    jobs = [j["job_id"] for j in started["jobs"]]
    assert len(jobs) == 2  # one per project
    states = _wait(url, jobs)
    assert states == ["succeeded", "succeeded"]
    after_summarize = _ledger_rows(store)
    assert after_summarize == 2  # one direct call per group
    # job_status and the reads again: still no new row.
    asyncio.run(_session_calls(url, [("mem/get_summary", day), ("mem/list_jobs", {}), ("mem/recall", day)]))
    assert _ledger_rows(store) == after_summarize

    # recompute: the alpha week from raw, one call (a day already summarized from unchanged raw is reused).
    week = {"type": "worklog", "granularity": "week", "anchor": "2026-01-05", "group": "alpha"}
    (rebuilt,) = asyncio.run(_session_calls(url, [("mem/recompute", week)]))
    assert _wait(url, [j["job_id"] for j in rebuilt["jobs"]]) == ["succeeded"]
    assert _ledger_rows(store) == after_summarize + 1
    other = {"type": "worklog", "granularity": "day", "anchor": "2026-01-06"}
    (miss,) = asyncio.run(_session_calls(url, [("mem/get_summary", {**other, "summarize_on_miss": True})]))
    assert _wait(url, [j["job_id"] for j in miss["jobs"]]) == ["succeeded", "succeeded"]
    assert _ledger_rows(store) == after_summarize + 3


def _wait(url: str, job_ids: list[str]) -> list[str]:
    for _ in range(200):
        states = [
            s["state"] for s in asyncio.run(_session_calls(url, [("mem/job_status", {"job_id": j}) for j in job_ids]))
        ]
        if all(s not in ("queued", "running") for s in states):
            return states
        time.sleep(0.1)
    return states


async def _raw_calls(url: str, calls: list[tuple[str, dict]]) -> tuple[dict, list]:
    """The tools' input schemas, and each call's result as (isError, text)."""
    async with _client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        schemas = {t.name: t.inputSchema for t in (await session.list_tools()).tools}
        out = []
        for name, args in calls:
            result = await session.call_tool(name, args)
            out.append((result.isError, result.content[0].text))
        return schemas, out


def test_window_arguments_are_from_and_to_and_bad_arguments_are_refused_in_one_line(server, store):
    url, tower = server
    tower.append("worklog", [{"content": {"project": "a"}, "at": f"2026-01-0{d}T10:00:00+08:00"} for d in (5, 6)])
    windows.build_day(store, date(2026, 1, 5), CST)
    windows.build_day(store, date(2026, 1, 6), CST)
    span = {"type": "worklog", "from": "2026-01-05T00:00:00+08:00", "to": "2026-01-07T00:00:00+08:00"}
    schemas, results = asyncio.run(
        _raw_calls(
            url,
            [
                ("mem/recall", span),
                ("mem/get_summary", span),
                ("mem/recall", {**{k: v for k, v in span.items() if k != "from"}, "from_": span["from"]}),
                ("mem/recall", {"type": "worklog", "granularity": "day", "anchor": "2026-01-05", "limt": 5}),
                ("mem/list_types", {"include_archived": "yes"}),
                (
                    "mem/get_summary",
                    {"type": "worklog", "granularity": "day", "anchor": "2026-01-05", "summarize_on_miss": "yes"},
                ),
                ("mem/recall", {"type": "worklog", "granularity": "day", "anchor": "2026-01-05", "limit": "10"}),
                ("mem/recall", {"type": "worklog", "granularity": "day", "anchor": "0001-01-01"}),
                ("mem/get_summary", {"type": "worklog", "granularity": "week", "anchor": "9999-12-31"}),
                ("mem/recall", {"granularity": "day", "anchor": "2026-01-05"}),
                # the type tools name their own argument, `name` (they said field 'type')
                ("mem/get_type", {"name": "no/such"}),
                ("mem/update_type", {"name": "no/such", "changes": {}}),
                ("mem/delete_type", {"name": "worklog"}),
                ("mem/recall", {"type": "no/such", "granularity": "day", "anchor": "2026-01-05"}),
            ],
        )
    )
    for tool in ("mem/recall", "mem/get_summary", "mem/summarize", "mem/recompute"):
        props = schemas[tool]["properties"]
        assert "from" in props and "to" in props and "from_" not in props, tool
    assert {"limit", "cursor"} <= set(schemas["mem/get_summary"]["properties"])
    (ok_err, ok), (sum_err, summ) = results[0], results[1]
    assert not ok_err and json.loads(ok)["total_entries"] == 2  # `from` works
    assert not sum_err and json.loads(summ)["state"] == "missing"
    expected = [
        "field 'from_': unknown argument (this tool takes: type, granularity, anchor, from, to, group, limit, cursor)",
        "field 'limt': unknown argument",
        "field 'include_archived': input should be a valid boolean",
        "field 'summarize_on_miss': input should be a valid boolean",
        "field 'limit': input should be a valid integer",
        "field 'anchor': is out of range (supported: 1970-01-01 to 9998-12-31 UTC)",
        "field 'anchor': is out of range (supported: 1970-01-01 to 9998-12-31 UTC)",
        "field 'type': is required",
        "field 'name': no memory type 'no/such'",
        "field 'name': no memory type 'no/such'",
        "field 'name': the built-in type 'worklog' cannot be deleted",
        "field 'type': no memory type 'no/such'",
    ]
    for (is_error, text), want in zip(results[2:], expected, strict=True):
        assert is_error and want in text, text
        assert "\n" not in text and "SELECT" not in text and "pydantic" not in text, text


def test_get_summary_over_mcp_pages_with_totals(server, store):
    url, tower = server
    tower.append("worklog", [{"content": {"project": p}, "at": "2026-01-05T10:00:00+08:00"} for p in "abc"])
    day = {"type": "worklog", "granularity": "day", "anchor": "2026-01-05"}
    (started,) = asyncio.run(_session_calls(url, [("mem/summarize", day)]))
    assert _wait(url, [j["job_id"] for j in started["jobs"]]) == ["succeeded"] * 3
    (first,) = asyncio.run(_session_calls(url, [("mem/get_summary", {**day, "limit": 2})]))
    assert [s["group"] for s in first["summaries"]] == ["a", "b"] and first["total_summaries"] == 3
    (rest,) = asyncio.run(_session_calls(url, [("mem/get_summary", {**day, "cursor": first["next_cursor"]})]))
    assert [s["group"] for s in rest["summaries"]] == ["c"] and rest["next_cursor"] is None


def test_a_client_disconnecting_leaves_no_traceback_in_the_server_log(server, caplog):
    caplog.set_level(logging.DEBUG, logger="mcp.server.streamable_http")
    caplog.set_level(logging.DEBUG, logger="mcp.client.streamable_http")
    url, _ = server

    def logged(message: str) -> bool:
        return any(r.getMessage() == message for r in caplog.records)

    async def call_then_leave_once_the_stream_is_open() -> None:
        # The client opens its standalone GET stream in the background after initialize; leaving
        # before it is open ends the session with no standalone writer, so nothing to close quietly.
        async with _client(url) as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            _data(await session.call_tool("mem/list_types", {}))
            deadline = time.monotonic() + 20
            while not logged("GET SSE connection established"):
                assert time.monotonic() < deadline, "the client never opened its standalone stream"
                await asyncio.sleep(0.05)

    asyncio.run(call_then_leave_once_the_stream_is_open())
    deadline = time.monotonic() + 20  # the SDK closes the session's standalone stream after the client left
    while not logged("Closing standalone SSE writer"):
        assert time.monotonic() < deadline, "the session was never closed"
        time.sleep(0.05)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]


def test_string_arguments_stay_strings_group_null_is_a_group_and_limit_null_is_refused(server, store):
    """The SDK decodes a string argument as JSON when its field is not plain str: "null" was read as
    null, so group "null" answered every group and limit "null" took the default silently."""
    url, tower = server
    tower.append(
        "worklog",
        [
            {"content": {"project": "null", "did": "chose postgres"}, "at": "2026-01-05T10:00:00+08:00"},
            {"content": {"project": "alpha", "did": "chose redis"}, "at": "2026-01-05T11:00:00+08:00"},
            {"content": {"project": "alpha", "did": "wrote the report"}, "at": "2026-01-05T12:00:00+08:00"},
        ],
    )
    windows.build_day(store, date(2026, 1, 5), CST)
    day = {"type": "worklog", "granularity": "day", "anchor": "2026-01-05"}
    _, results = asyncio.run(
        _raw_calls(
            url,
            [
                ("mem/recall", {**day, "group": "null"}),
                ("mem/windows", {"type": "worklog", "granularity": "day", "group": "null"}),
                ("mem/get_summary", {**day, "group": "null"}),
                ("mem/recall", {**day, "limit": "null"}),
                ("mem/windows", {"type": "worklog", "limit": "null"}),
                ("mem/list_jobs", {"limit": "null"}),
            ],
        )
    )
    (r_err, recalled), (w_err, browsed), (s_err, summary) = results[:3]
    assert not r_err and not w_err and not s_err
    recalled, browsed, summary = json.loads(recalled), json.loads(browsed), json.loads(summary)
    assert recalled["group"] == "null" and recalled["total_entries"] == 1
    assert [e["content"]["did"] for e in recalled["entries"]] == ["chose postgres"]
    assert [(w["group"], w["entry_count"]) for w in browsed["windows"]] == [("null", 1)]
    assert summary["state"] == "missing" and summary["missing_groups"] == ["null"]  # not alpha's too
    for is_error, text in results[3:]:
        assert is_error and "field 'limit': input should be a valid integer" in text, text
