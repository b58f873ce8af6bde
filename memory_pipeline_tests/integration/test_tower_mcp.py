"""Seed 004 MCP endpoint: the server started over the real store, every one of the 13 mem/* tools
driven by the SDK's own client over streamable HTTP, at the seed's address and at /mcp."""

import asyncio
import json
import socket
import threading
import time

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.mcp_server import TOOL_NAMES, make_uvicorn
from memory_pipeline_tests.conftest import CST


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(store):
    tower = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="mcp_test", partition=p))
    port = _free_port()
    srv = make_uvicorn(tower, "127.0.0.1", port)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started
    yield f"http://127.0.0.1:{port}", tower
    srv.should_exit = True
    thread.join(timeout=10)
    tower.close()


def _data(result):
    assert not result.isError, result.content[0].text
    return json.loads(result.content[0].text)


async def _drive(url: str, tower: Tower) -> dict:
    out: dict = {}
    async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write) as session:
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
    assert out["tools"] == sorted(TOOL_NAMES) and len(out["tools"]) == 13 and out["described"]
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


def test_the_endpoint_also_answers_at_mcp(server):
    url, _ = server

    async def tools() -> list[str]:
        async with streamablehttp_client(url + "/mcp") as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            return [t.name for t in (await session.list_tools()).tools]

    assert sorted(asyncio.run(tools())) == sorted(TOOL_NAMES)
