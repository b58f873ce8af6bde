"""The memory server's pages, world isolation under random calls, and its generated tool list (issue
19), against a real server (test_memory_server.served): every listing tool pages with `limit` and
`cursor` and states `total` and `next_cursor`; walking the pages returns each item once; a bad,
foreign or other world's cursor is refused naming `cursor`; random sequences of tool calls with
random tokens never show a token lacking world wb any of wb's memory, and every refusal is one
line; the README's tool table is `memory-pipeline serve --list-tools`."""

import asyncio
import base64
import json
import re
import warnings
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mcp import ClientSession
from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.objects.tables import objects_attachments, objects_objects
from memory_pipeline.server.app import TOOL_NAMES, tool_table
from memory_pipeline.tower import windows
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline_tests.conftest import CST, event
from memory_pipeline_tests.integration import test_memory_server
from memory_pipeline_tests.integration.test_memory_server import (
    ACCEPT,
    AT,
    DAY,
    INITIALIZE,
    NOTES,
    SECRET_A,
    SECRET_B,
)
from memory_pipeline_tests.mcp_client import mcp_streams

# test_memory_server's fixtures: the seeded worlds wa and wb, a running server, the tokens; ``served``
# a server of the test's own, ``shared`` (over ``_module_server``) one for the module's reading tests.
served = test_memory_server.served
_module_server = test_memory_server._module_server
shared = test_memory_server.shared
README = Path(__file__).resolve().parents[2] / "docs" / "server.md"

# One worker runs the module: its shared server is made once.
pytestmark = pytest.mark.xdist_group("server_paging")


@pytest.fixture(scope="module")
def _paged_module(_module_server):
    _more_of_wa(_module_server, _module_server["ingest"])
    return _module_server


@pytest.fixture
def paged(_paged_module, shared):
    """The module's server with more of wa than one page (``_more_of_wa``); its tests only read."""
    return shared


def _more_of_wa(served, ingest) -> None:
    """Events wa2..wa6 as evidence of person:zebra, objects person:zebra2..5, activity entries in five
    hours of the day; and a second zebra in wb."""
    store, at = served["store"], datetime(2026, 1, 5, 11, 0, tzinfo=CST)
    ingest(
        [
            event("wa", "wa.s1", "user", f"{SECRET_A} zebra {i}", at + timedelta(minutes=i), mid=f"wa{i}")
            for i in range(2, 7)
        ]
    )
    with store.begin() as conn:
        for w, key, secret in [("wa", f"zebra{i}", SECRET_A) for i in range(2, 6)] + [("wb", "zebra2", SECRET_B)]:
            conn.execute(
                objects_objects.insert().values(
                    world_id=w,
                    object_id=f"person:{key}",
                    type="person",
                    name=key.title(),
                    aliases=[],
                    summary=f"Another zebra keeper {secret}.",
                    body="",
                    cues=["zebra"],
                    status="active",
                    version=1,
                    revision=1,
                )
            )
        for i in range(2, 7):
            conn.execute(
                objects_attachments.insert().values(
                    world_id="wa", object_id="person:zebra", event_id=f"wa{i}", revision=1
                )
            )
    tower = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="server_test", partition=p), "inline")
    tower.append(
        NOTES,
        [
            {"content": f"{SECRET_A} hour {h}", "at": at.replace(hour=h).isoformat(), "group": "wa"}
            for h in range(13, 18)
        ],
    )
    windows.build_day(store, at.date(), CST)
    tower.close()


# ---- pages ----------------------------------------------------------------------------------------------

# Every listing tool: who walks it, the query, and the ids of the items of one page.
LISTING = {
    "mem/list_types": ("a", {}, lambda r: [t["name"] for t in r["types"]]),
    "mem/windows": (
        "a",
        {"type": NOTES, "granularity": "1h", "group": "wa"},
        lambda r: [w["start"] for w in r["windows"]],
    ),
    "mem/recall": (
        "a",
        {"type": NOTES, "granularity": "day", "anchor": DAY, "group": "wa"},
        lambda r: [e["entry_id"] for e in r["entries"]],
    ),
    # no group (an --all-worlds token): one slot per group of the day, found or missing
    "mem/get_summary": (
        "ops",
        {"type": "worklog", "granularity": "day", "anchor": DAY},
        lambda r: [s["group"] for s in r["summaries"]] + r["missing_groups"],
    ),
    "mem/list_jobs": ("ops", {}, lambda r: [j["job_id"] for j in r["jobs"]]),
    "memory/search": ("a", {"world": "wa", "query": "zebra"}, lambda r: [(h["kind"], h["ref"]) for h in r["hits"]]),
    "objects/find": ("a", {"world": "wa", "query": "zebra"}, lambda r: [o["id"] for o in r["items"]]),
    "objects/evidence": ("a", {"world": "wa", "id": "person:zebra"}, lambda r: [e["event_id"] for e in r["items"]]),
}
LIMIT_MAX = {"memory/search": 100, "objects/find": 100, "objects/evidence": 100}  # mem/*: 1000


async def _session(served, who: str, work):
    headers = {"Authorization": f"Bearer {served['bearer'][who]}"}
    async with (
        mcp_streams(served["url"], headers=headers) as (read, write, _),
        ClientSession(read, write) as s,
    ):
        await s.initialize()
        return await work(s)


def _text(result) -> str:
    return result.content[0].text if result.content else ""


def _walk(served, tool: str, limit: int) -> tuple[list[dict], dict]:
    """Every page of the tool's query, ``limit`` items each, and the same query in one page."""
    who, args, _ = LISTING[tool]

    async def work(s):
        pages, cursor = [], None
        for _ in range(50):
            r = await s.call_tool(tool, {**args, "limit": limit, **({"cursor": cursor} if cursor else {})})
            assert not r.isError, _text(r)
            pages.append(json.loads(_text(r)))
            cursor = pages[-1]["next_cursor"]
            if cursor is None:
                break
        whole = await s.call_tool(tool, {**args, "limit": 100})
        return pages, json.loads(_text(whole))

    return asyncio.run(_session(served, who, work))


def test_the_listing_tools_are_the_tools_with_a_cursor(paged):
    async def work(s):
        return {t.name: t.inputSchema["properties"] for t in (await s.list_tools()).tools}

    props = asyncio.run(_session(paged, "a", work))
    assert {name for name, p in props.items() if "cursor" in p} == set(LISTING)
    assert all("limit" in props[name] for name in LISTING)


@pytest.mark.parametrize("tool", sorted(LISTING))
def test_walking_the_pages_returns_every_item_once_and_total_counts_them(paged, tool):
    pages, whole = _walk(paged, tool, 1)
    ids_of = LISTING[tool][2]
    walked = [i for p in pages for i in ids_of(p)]
    assert len(pages) >= 2 and all(len(ids_of(p)) == 1 for p in pages), pages
    assert {p["total"] for p in pages} == {len(walked)} and len(set(walked)) == len(walked), walked
    assert pages[-1]["next_cursor"] is None and all(p["next_cursor"] for p in pages[:-1])
    # the pages are the one-page answer cut up, in its order
    assert ids_of(whole) == walked and whole["total"] == len(walked) and whole["next_cursor"] is None
    assert SECRET_B not in json.dumps(pages) or LISTING[tool][0] == "ops"


def _b64(value) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


MALFORMED = [
    "x",
    "",
    "!!!",
    "a" * 400,
    _b64(b"not json"),
    _b64([1, 2]),
    _b64({"tool": "objects/find", "scope": "0", "offset": 1, "more": 1}),
    _b64({"offset": 1}),
]


def test_a_malformed_foreign_or_other_worlds_cursor_is_refused_naming_cursor(paged):
    find_wa = {"world": "wa", "query": "zebra", "limit": 1}

    async def ops(s):
        b_page = json.loads(_text(await s.call_tool("objects/find", {"world": "wb", "query": "zebra", "limit": 1})))
        jobs = json.loads(_text(await s.call_tool("mem/list_jobs", {"limit": 1})))
        return b_page, jobs

    b_page, ops_jobs = asyncio.run(_session(paged, "ops", ops))
    assert SECRET_B in json.dumps(b_page) and b_page["next_cursor"] and ops_jobs["next_cursor"]

    async def a(s):
        first = json.loads(_text(await s.call_tool("objects/find", find_wa)))
        own = first["next_cursor"]
        data = json.loads(base64.urlsafe_b64decode(own + "=" * (-len(own) % 4)))
        calls = [("objects/find", {**find_wa, "cursor": c}) for c in MALFORMED]
        calls += [
            ("objects/find", {**find_wa, "cursor": _b64({**data, "offset": -1})}),
            ("objects/find", {**find_wa, "cursor": _b64({**data, "offset": True})}),
            ("objects/find", {**find_wa, "cursor": _b64({**data, "offset": "1"})}),
            ("objects/evidence", {"world": "wa", "id": "person:zebra", "cursor": own}),  # another tool's
            ("objects/find", {**find_wa, "query": "keeper", "cursor": own}),  # another query's
            ("objects/find", {**find_wa, "cursor": b_page["next_cursor"]}),  # wb's, for wa
            ("mem/list_jobs", {"limit": 1, "cursor": ops_jobs["next_cursor"]}),  # every world's, for wa's
            ("objects/find", {**find_wa, "world": "wb", "cursor": b_page["next_cursor"]}),  # wb itself
            ("objects/find", {**find_wa, "cursor": own}),  # its own: the next page
        ]
        out = []
        for name, args in calls:
            r = await s.call_tool(name, args)
            out.append((r.isError, _text(r)))
        return out

    *refused, wb_itself, own_next = asyncio.run(_session(paged, "a", a))
    for is_error, text in refused:
        assert is_error and "field 'cursor': " in text and "\n" not in text, text
        assert SECRET_B not in text
    assert any("another tool" in t for _, t in refused) and any("other arguments" in t for _, t in refused)
    assert wb_itself[0] and "world 'wb'" in wb_itself[1] and SECRET_B not in wb_itself[1]
    assert not own_next[0] and json.loads(own_next[1])["items"][0]["id"] != "person:zebra"


@pytest.mark.parametrize("tool", sorted(LISTING))
def test_a_page_size_out_of_range_is_refused_naming_limit(paged, tool):
    who, args, _ = LISTING[tool]
    maximum = LIMIT_MAX.get(tool, 1000)

    async def work(s):
        return [await s.call_tool(tool, {**args, "limit": n}) for n in (0, maximum + 1, maximum)]

    low, high, ok = asyncio.run(_session(paged, who, work))
    for r in (low, high):
        assert r.isError and f"field 'limit': must be 1-{maximum}, got " in _text(r), _text(r)
    assert not ok.isError, _text(ok)


# ---- no cross-world read under random calls ---------------------------------------------------------------

# wa; wa read-only; every world; revoked (wa and wb): mostly the tokens lacking wb
TOKENS = ("a", "a_ro", "a", "a_ro", "ops", "gone")


def _values(served, who: str, cursors: list[str]) -> dict:
    """Argument values by name: valid, invalid and cross-world ones, none of them one of wb's secrets
    (an --all-worlds token may write wb's secret into wb)."""
    entries = [[{"content": "x", "group": "wa"}], [{"content": "y", "group": "wb"}], [{"content": {"project": "wa"}}]]
    if who == "ops":
        entries.append([{"content": f"{SECRET_B} later", "group": "wb"}])
    text = st.sampled_from(["", "x", "zebra", "null", "wa", "wb", "*"]) | st.text(
        st.characters(codec="utf-8"), max_size=12
    )
    return {
        "world": st.sampled_from(["wb", "wa", "wb", "wb", "wz", "*", ""]),
        "group": st.sampled_from(["wb", "wa", "wb", "wb", "null", ""]) | st.none(),
        "type": st.sampled_from([NOTES, "worklog", "b/notes", "wa/new", "x"]),
        "name": st.sampled_from([NOTES, "worklog", "b/notes", "wa/new"]),
        "query": st.sampled_from(["zebra", "zebra keeper", "talk", "x"]),
        "id": st.sampled_from(["person:zebra", "person:zebra2", "person:nobody", "zebra"]),
        "job_id": st.sampled_from([served["job_a"], served["job_b"], "nope"]),
        "granularity": st.sampled_from(["day", "1h", "week", "month"]) | st.none(),
        "anchor": st.sampled_from([DAY, "2026-01-06", AT]),
        "from": st.sampled_from(["2026-01-05T00:00:00+08:00", "2025-12-01T00:00:00+08:00"]),
        "to": st.sampled_from(["2026-01-06T00:00:00+08:00", "2026-03-01T00:00:00+08:00"]),
        "at": st.sampled_from([AT]) | st.none(),
        "viewer": st.sampled_from(["wa.s1", "wb.s1"]) | st.none(),
        "limit": st.sampled_from([1, 2, 0, 1001]) | st.none(),
        "cursor": st.sampled_from(cursors + ["x"]) | st.none(),
        "entries": st.sampled_from(entries),
        "changes": st.sampled_from([{"retention": "1y"}, {}]),
        "include_archived": st.booleans(),
        "summarize_on_miss": st.booleans(),
        "state": st.sampled_from(["failed", "succeeded", "bad"]) | st.none(),
        "_string": text,
    }


def _args(schema: dict, values: dict):
    """Arguments for one tool's schema: known names from ``values``, others by JSON type; an optional
    argument mostly left out, a required one now and then too."""
    by_type = {
        "string": values["_string"],
        "integer": st.integers(-2, 2000),
        "boolean": st.booleans(),
        "array": st.just([]),
        "object": st.just({}),
    }
    required = set(schema.get("required", []))
    fields = {}
    for name, prop in schema.get("properties", {}).items():
        kinds = [p.get("type") for p in prop.get("anyOf", [prop])]
        value = values[name] if name in values else next((by_type[k] for k in kinds if k in by_type), st.none())
        keep = st.integers(0, 9).map(lambda n, req=name in required: n > 0 if req else n > 5)
        fields[name] = st.tuples(keep, value)
    return st.fixed_dictionaries(fields).map(lambda d: {k: v for k, (keep, v) in d.items() if keep})


def _b_secrets(served) -> list[str]:
    return [SECRET_B, served["job_b"], "wb1"]


async def _run(served, sequence: list) -> list[tuple[bool, str]]:
    """The calls in order, each with its token's session (opened on its first call); the revoked
    token's raw HTTP answers, as it never gets a session."""
    out: list[tuple[bool, str]] = []
    async with AsyncExitStack() as stack:
        sessions: dict[str, ClientSession] = {}
        raw = await stack.enter_async_context(httpx.AsyncClient(timeout=10))
        for who, (tool, args) in sequence:
            headers = {"Authorization": f"Bearer {served['bearer'][who]}"}
            if who == "gone":
                body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": args}}
                answers = [
                    await raw.post(served["url"] + "/mcp", json=m, headers={**ACCEPT, **headers})
                    for m in (INITIALIZE, body)
                ]
                assert [r.status_code for r in answers] == [401, 401], [r.text for r in answers]
                out.append((True, answers[-1].text))
                continue
            if who not in sessions:
                read, write, _ = await stack.enter_async_context(mcp_streams(served["url"], headers=headers))
                sessions[who] = await stack.enter_async_context(ClientSession(read, write))
                await sessions[who].initialize()
            r = await sessions[who].call_tool(tool, args)
            out.append((r.isError, _text(r)))
    return out


def test_random_calls_with_random_tokens_never_show_a_token_lacking_wb_any_of_wb(served):
    async def work(s):
        return {t.name: t.inputSchema for t in (await s.list_tools()).tools}, json.loads(
            _text(await s.call_tool("mem/list_jobs", {"limit": 1}))
        )

    schemas, ops_jobs = asyncio.run(_session(served, "ops", work))
    assert set(schemas) == set(TOOL_NAMES)
    cursors = [ops_jobs["next_cursor"]]  # every world's jobs: a cursor that must not continue wa's

    call = st.sampled_from(TOKENS).flatmap(
        lambda who: st.tuples(
            st.just(who),
            st.sampled_from(sorted(schemas)).flatmap(
                lambda tool: st.tuples(st.just(tool), _args(schemas[tool], _values(served, who, cursors)))
            ),
        )
    )
    seen: dict[str, int] = {"calls": 0, "refused": 0}

    @settings(
        max_examples=80,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # a failing sequence is reported as drawn: shrinking it takes minutes
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(call, min_size=1, max_size=8))
    def check(sequence):
        answers = asyncio.run(_run(served, sequence))  # in order: a write may precede a read
        for (who, (tool, args)), (is_error, text) in zip(sequence, answers, strict=True):
            seen["calls"] += 1
            seen["refused"] += is_error
            if who == "gone":
                continue
            if is_error:
                assert "\n" not in text.strip(), (who, tool, args, text)
            if who != "ops":
                sent = json.dumps(args)
                leaked = [s for s in _b_secrets(served) if s in text and s not in sent]
                assert not leaked, (who, tool, args, text)
                if tool == "mem/list_jobs" and not is_error:
                    assert {j["group"] for j in json.loads(text)["jobs"]} <= {"wa"}, text

    check()
    # the sequences reached the tools, and both answers and refusals
    assert seen["calls"] >= 50 and 0 < seen["refused"] < seen["calls"], seen


# ---- the tool list ------------------------------------------------------------------------------------------


def _readme_table() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- tools: memory-pipeline serve --list-tools -->\n(.*?)<!-- /tools -->", text, re.S)
    assert found, "docs/server.md has no tool table between its markers"
    return found.group(1)


def test_the_readme_tool_table_is_the_servers_own_list(store, pg_url, monkeypatch, tmp_path):
    tower = Tower(store, TowerConfig(), CST)
    table = tool_table(tower)
    tower.close()
    assert [line.split("`")[1] for line in table.splitlines()[2:]] == list(TOOL_NAMES)
    assert _readme_table() == table, (
        "docs/server.md is stale: paste `memory-pipeline serve --list-tools` between its markers"
    )
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    for cmd in ("serve", "mcp"):  # mcp: the alias
        printed = CliRunner().invoke(app, [cmd, "--list-tools"])
        assert printed.exit_code == 0 and printed.output == table, (cmd, printed.output)


def test_the_readme_example_client_reads_its_world_through_the_server(served, capsys):
    """docs/server.md's agent example, run as written against a running server: only the address,
    the world and the token are this test's."""
    found = re.search(
        r"An agent runtime connects with the SDK's client and the token:\n\n```python\n(.*?)```",
        README.read_text(encoding="utf-8"),
        re.S,
    )
    assert found, "docs/server.md has no example client"
    code = found.group(1)
    assert code.count("http://127.0.0.1:8900/mcp") == 1 and code.count('"w1"') == 2
    code = code.replace("http://127.0.0.1:8900/mcp", served["url"] + "/mcp").replace('"w1"', '"wa"')
    body, run = code.rstrip().rsplit("\n", 1)
    assert run.startswith('asyncio.run(main("mp_..."))')
    namespace: dict = {}
    exec(compile(body, "docs/server.md", "exec"), namespace)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(namespace["main"](served["bearer"]["a"]))
    # the example calls nothing deprecated (the SDK's old client warned from contextlib, not from
    # the example's line, so every deprecation counts)
    assert [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)] == []
    printed = capsys.readouterr().out
    assert f"{SECRET_A} zebra talk" in printed and SECRET_B not in printed, printed  # wa1, fed
