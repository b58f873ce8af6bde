"""The memory server (issue 19, first slice) driven by the SDK's client over streamable HTTP: no,
an unknown or a revoked bearer token is answered 401 before any tool runs; for every tool of the
server's own list, a token of world wa asking for world wb is refused (naming wb) and gets none of
wb's memory, while an --all-worlds token gets it (so the refusal is the token's, not missing data);
a read-only token cannot call a writing tool; memory/search is scoped to the token's worlds; the
server does not start off the loopback address without a token."""

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime

import httpx
import pytest
from mcp import ClientSession
from sqlalchemy import func, select, update
from typer.testing import CliRunner

from memory_pipeline import domains
from memory_pipeline.access import tokens
from memory_pipeline.cli import app
from memory_pipeline.conversation import logic as conversation_logic
from memory_pipeline.conversation.tables import conversation_summaries, conversation_summary_requests
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.cache import KVCache
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import metadata, request_ids
from memory_pipeline.objects.tables import (
    objects_attachments,
    objects_core,
    objects_event_state,
    objects_failures,
    objects_jobs,
    objects_objects,
    objects_versions,
    objects_worlds,
)
from memory_pipeline.server import tower_tools
from memory_pipeline.server.app import TOOL_NAMES, ServeError, check_exposure, make_uvicorn, tool_access
from memory_pipeline.server.tools import Access
from memory_pipeline.sleep.tables import pinned_facts, self_blocks, semantic_memories
from memory_pipeline.temporal import config as temporal_config
from memory_pipeline.temporal.logic import sys_roll_key
from memory_pipeline.temporal.read import temporal_view
from memory_pipeline.temporal.tables import temporal_day_chunks, temporal_summaries
from memory_pipeline.tower import windows
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.logic import TowerInputError, WindowQuery
from memory_pipeline.tower.tables import tower_entries, tower_jobs, tower_types
from memory_pipeline_tests.conftest import CST, REDIS_URL, event, forget_schemas, fresh_schema
from memory_pipeline_tests.mcp_client import mcp_streams

ACTIVITY = "agent/activity"
NOTES = "agent/notes"  # a type grouped by world that tokens append to (the activity type takes only its feed)
SECRET_B = "bravosecret"  # in every one of wb's memories; never in an answer to wa's token
SECRET_A = "alphasecret"

# One worker runs the module: the shared server below is made once.
pytestmark = pytest.mark.xdist_group("memory_server")

DAY = "2026-01-05"
AT = "2026-01-05T12:00:00+08:00"  # the prompt block's instant (the rolls are cached for that day)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _seed(store, ingest, redis_url) -> dict:
    """Worlds wa and wb, each with raw events, a day summary, a cached past-days roll, an object
    (person:zebra) with the event as its evidence, a candidate project (project:zoo), a core
    document, a worker error, a self block and a pinned fact, a rolling summary of its conversation
    (unverified: its check line), activity entries, worklog entries of its project and a summarize
    job, and wb a type of its own."""
    at = datetime(2026, 1, 5, 10, 0, tzinfo=CST)
    ingest(
        [
            event("wa", "wa.s1", "user", f"{SECRET_A} zebra talk", at, mid="wa1"),
            event("wb", "wb.s1", "user", f"{SECRET_B} zebra talk", at, mid="wb1"),
        ]
    )
    with store.begin() as conn:
        for w, secret in (("wa", SECRET_A), ("wb", SECRET_B)):
            conn.execute(
                temporal_summaries.insert().values(
                    world_id=w,
                    window="day",
                    period_start=date(2026, 1, 5),
                    content=f"A day of zebra {secret} stories.",
                    source_count=1,
                    source_kind="message",
                    source_ids=[f"{w}1"],
                )
            )
            conn.execute(
                objects_objects.insert().values(
                    world_id=w,
                    object_id="person:zebra",
                    type="person",
                    name="Zebra",
                    aliases=[],
                    summary=f"The zebra keeper {secret}.",
                    body="",
                    cues=["zebra"],
                    status="active",
                    version=1,
                    revision=1,
                )
            )
            conn.execute(
                objects_attachments.insert().values(world_id=w, object_id="person:zebra", event_id=f"{w}1", revision=1)
            )
            conn.execute(objects_worlds.insert().values(world_id=w, worker_error=f"{secret} worker failed"))
            conn.execute(
                objects_objects.insert().values(
                    world_id=w,
                    object_id="project:zoo",
                    type="project",
                    name="Zoo",
                    aliases=[],
                    summary="The zoo.",
                    body="",
                    cues=[],
                    status="candidate",
                    version=1,
                    revision=1,
                )
            )
            conn.execute(objects_core.insert().values(world_id=w, name="USER.md", content=f"{secret} user", revision=1))
            conn.execute(
                self_blocks.insert().values(world_id=w, name="identity", content=f"I am {secret}", updated_by="t")
            )
            conn.execute(pinned_facts.insert().values(world_id=w, content=f"{secret} is pinned", priority=1))
            arc = f"这段时间用户在聊斑马 {secret}。"
            sections = conversation_logic.Sections(arc, (), (), ())
            conn.execute(
                conversation_summaries.insert().values(
                    conversation_id=f"{w}.s1",
                    version=1,
                    world_id=w,
                    content=conversation_logic.render(sections, date(2026, 1, 5), at, 1, 1),
                    covered_start=1,
                    covered_end=1,
                    last_updated=at,
                    verified=False,
                    check_line=conversation_logic.check_line(arc),
                    trigger="entries",
                    sections={"arc": arc, "preferences": [], "key_points": [], "hooks": []},
                )
            )
    _cache_rolls(redis_url)
    inline = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="server_test", partition=p), "inline")
    inline.create_type(NOTES, group_field="world")
    for w, secret in (("wa", SECRET_A), ("wb", SECRET_B)):
        inline.append(NOTES, [{"content": f"{secret} activity", "at": at.isoformat(), "group": w}])
        inline.append("worklog", [{"content": {"project": w, "did": f"{secret} work"}, "at": at.isoformat()}])
    inline.create_type("b/notes", group_field="world")
    inline.append("b/notes", [{"content": f"{SECRET_B} note", "at": at.isoformat(), "group": "wb"}])
    windows.build_day(store, date(2026, 1, 5), CST, activity_type=ACTIVITY)  # the messages fed to it
    jobs = {
        w: inline.summarize("worklog", WindowQuery.parse("day", DAY, group=w))["jobs"][0]["job_id"]
        for w in ("wa", "wb")
    }
    inline.close()
    return {"job_b": jobs["wb"], "job_a": jobs["wa"]}


def _cache_rolls(redis_url: str) -> None:
    prefix = temporal_config.load().redis_key_prefix
    cache = KVCache(redis_url)
    for w, secret in (("wa", SECRET_A), ("wb", SECRET_B)):
        key = sys_roll_key(prefix, w, "past_days", date(2026, 1, 5))
        cache.set_json(key, {"summary": f"Yesterday: zebra {secret}."}, 3600)


@contextmanager
def _serving(store, ingest, redis_url) -> Iterator[dict]:
    seeded = _seed(store, ingest, redis_url)
    names = {"a": (["wa"], False), "a_ro": (["wa"], True), "ops": (["*"], False), "gone": (["wa", "wb"], False)}
    bearer = {k: tokens.create(store, worlds, read_only=ro, name=k)[1] for k, (worlds, ro) in names.items()}
    tokens.revoke(store, "gone")
    tower = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="server_test", partition=p))
    port = _free_port()
    srv = make_uvicorn(tower, "127.0.0.1", port)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started
    try:
        yield {"url": f"http://127.0.0.1:{port}", "bearer": bearer, "tower": tower, "store": store, **seeded}
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
        tower.close()


@pytest.fixture
def served(store, ingest, redis_url, monkeypatch):
    """A server of this test's own: for a test that writes, or reads what another test could change."""
    monkeypatch.setenv("REDIS_URL", redis_url)  # the prompt block's roll cache (settings.redis_url())
    with _serving(store, ingest, redis_url) as s:
        yield s


@pytest.fixture(scope="module")
def _module_server(tmp_path_factory) -> Iterator[dict]:
    with fresh_schema() as url, pytest.MonkeyPatch.context() as mp:
        mp.setenv("REDIS_URL", REDIS_URL)
        store = Store(url)
        ensure_schema(store, domains.version_locations())
        folder = tmp_path_factory.mktemp("memory_server")

        def ingest(events: list[dict]) -> None:
            path = folder / "events.jsonl"
            path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
            ingest_file(store, path)

        with _serving(store, ingest, REDIS_URL) as s:
            yield {**s, "ingest": ingest}
    forget_schemas()


@pytest.fixture
def shared(_module_server):
    """One server for the calls that are refused or only read (about a hundred, 0.4 s of set-up each
    otherwise): each such test checks the store is unchanged by its call. The rolls the seed cached
    are cached again, since another test of the worker may have flushed its Redis database."""
    _cache_rolls(REDIS_URL)
    return _module_server


async def _calls(url: str, token: str, calls: list[tuple[str, dict]]) -> tuple[list[str], list[tuple[bool, str]]]:
    headers = {"Authorization": f"Bearer {token}"}
    async with mcp_streams(url, headers=headers) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        names = [t.name for t in (await session.list_tools()).tools]
        out = []
        for name, args in calls:
            r = await session.call_tool(name, args)
            out.append((r.isError, r.content[0].text if r.content else ""))
        return names, out


def _call(served, who: str, name: str, args: dict) -> tuple[bool, str]:
    return asyncio.run(_calls(served["url"], served["bearer"][who], [(name, args)]))[1][0]


# ---- 401 before any tool runs ---------------------------------------------------------------------

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize("path", ["/", "/mcp"])
def test_no_unknown_or_revoked_token_is_401_and_a_valid_one_is_served(shared, path):
    url = shared["url"] + path
    cases = {
        "none": {},
        "not bearer": {"Authorization": f"Basic {shared['bearer']['a']}"},
        "unknown": {"Authorization": "Bearer mp_not-a-token"},
        "revoked": {"Authorization": f"Bearer {shared['bearer']['gone']}"},
        "valid": {"Authorization": f"Bearer {shared['bearer']['a']}"},
    }
    with httpx.Client(timeout=10) as client:
        status = {k: client.post(url, json=INITIALIZE, headers={**ACCEPT, **h}).status_code for k, h in cases.items()}
    assert status == {"none": 401, "not bearer": 401, "unknown": 401, "revoked": 401, "valid": 200}


def test_a_token_revoked_mid_session_is_refused_from_its_next_request(shared):
    store = shared["store"]
    _, token = tokens.create(store, ["wa"], name="short-lived")

    seen: dict[str, object] = {}

    async def drive() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with mcp_streams(shared["url"], headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                seen["first"] = await session.call_tool("mem/list_types", {})
                tokens.revoke(store, "short-lived")
                seen["second"] = await asyncio.wait_for(session.call_tool("mem/list_types", {}), timeout=20)

    with pytest.raises(BaseException) as raised:  # the SDK's client raises the HTTP status it got
        asyncio.run(drive())
    assert not seen["first"].isError and "second" not in seen
    errors = raised.value.exceptions if isinstance(raised.value, BaseExceptionGroup) else [raised.value]
    while any(isinstance(e, BaseExceptionGroup) for e in errors):
        errors = [x for e in errors for x in (e.exceptions if isinstance(e, BaseExceptionGroup) else [e])]
    assert any(isinstance(e, httpx.HTTPStatusError) and e.response.status_code == 401 for e in errors), errors


# ---- worlds ------------------------------------------------------------------------------------------

# For every tool of the server: a call by wa's token that asks for wb (or, for the tools that name no
# world, the call that could show wb's memory), and what wa must get: a refusal naming the world (or
# the type), or an answer with none of wb's memory. A tool missing here fails the test.
CROSS_WORLD = {
    "mem/create_type": ({"name": "wa/new", "group_field": "world"}, None),
    "mem/list_types": ({}, None),
    "mem/get_type": ({"name": "b/notes"}, None),
    "mem/update_type": ({"name": "b/notes", "changes": {"retention": "1y"}}, "not created by this token's worlds"),
    "mem/delete_type": ({"name": "b/notes"}, "not created by this token's worlds"),
    "mem/append": ({"type": NOTES, "entries": [{"content": "x", "group": "wb"}]}, "world 'wb'"),
    "mem/windows": ({"type": NOTES, "granularity": "day", "group": "wb"}, "world 'wb'"),
    "mem/recall": ({"type": NOTES, "granularity": "day", "anchor": DAY, "group": "wb"}, "world 'wb'"),
    "mem/get_summary": ({"type": "worklog", "granularity": "day", "anchor": DAY, "group": "wb"}, "world 'wb'"),
    "mem/summarize": ({"type": "worklog", "granularity": "day", "anchor": DAY, "group": "wb"}, "world 'wb'"),
    "mem/recompute": ({"type": "worklog", "granularity": "day", "anchor": DAY, "group": "wb"}, "world 'wb'"),
    "mem/job_status": ({"job_id": "JOB_B"}, "no job"),  # as an id that was never a job: see below
    "mem/list_jobs": ({}, None),
    "memory/search": ({"world": "wb", "query": f"zebra {SECRET_B}"}, "world 'wb'"),
    "temporal/prompt_block": ({"world": "wb", "at": AT}, "world 'wb'"),
    "objects/find": ({"world": "wb", "query": "zebra"}, "world 'wb'"),
    "objects/read": ({"world": "wb", "id": "person:zebra"}, "world 'wb'"),
    "objects/evidence": ({"world": "wb", "id": "person:zebra"}, "world 'wb'"),
    "objects/status": ({"world": "wb"}, "world 'wb'"),
    "objects/organize": ({"world": "wb", "request_id": "r-cross"}, "world 'wb'"),
    "objects/approve": ({"world": "wb", "id": "project:zoo", "request_id": "r-cross"}, "world 'wb'"),
    "objects/resident": ({"world": "wb"}, "world 'wb'"),
    "sleep/remember": ({"world": "wb", "session_id": "wb.s1", "content": "x", "request_id": "r-cross"}, "world 'wb'"),
    "sleep/self": ({"world": "wb"}, "world 'wb'"),
    "conversation/summary": ({"world": "wb", "conversation_id": "wb.s1"}, "world 'wb'"),
    "conversation/check": ({"world": "wb", "conversation_id": "wb.s1", "request_id": "r-cross"}, "world 'wb'"),
    "conversation/confirm": ({"world": "wb", "conversation_id": "wb.s1", "request_id": "r-cross"}, "world 'wb'"),
    "conversation/correct": (
        {"world": "wb", "conversation_id": "wb.s1", "arc": "用户其实在聊长颈鹿。", "request_id": "r-cross"},
        "world 'wb'",
    ),
}


def _args(served, args: dict) -> dict:
    return json.loads(json.dumps(args).replace("JOB_B", served["job_b"]))


def _state(store) -> tuple:
    """What the writing tools would change: counts of rows they add, the type they change, the
    statuses of the objects (an approval) and the verified summaries (a confirmation)."""
    added = (
        tower_entries,
        tower_jobs,
        request_ids,
        semantic_memories,
        conversation_summaries,
        conversation_summary_requests,
        objects_jobs,
        objects_versions,
    )
    with store.connect() as conn:
        counts = tuple(conn.execute(select(func.count()).select_from(t)).scalar_one() for t in added)
        notes = conn.execute(
            select(tower_types.c.retention, tower_types.c.archived_at).where(tower_types.c.name == "b/notes")
        ).one()
        statuses = sorted(conn.execute(select(objects_objects.c.world_id, objects_objects.c.status)).all())
        verified = conn.execute(select(func.count()).where(conversation_summaries.c.verified.is_(True))).scalar_one()
    return counts, tuple(notes), tuple(statuses), verified


def test_the_table_covers_every_tool_of_the_running_server(shared):
    names, _ = asyncio.run(_calls(shared["url"], shared["bearer"]["a"], []))
    assert sorted(names) == sorted(TOOL_NAMES) == sorted(CROSS_WORLD)


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_a_token_of_world_a_asking_for_world_b_is_refused_and_gets_none_of_b(shared, tool):
    args, refusal = CROSS_WORLD[tool]
    args = _args(shared, args)
    before = _state(shared["store"])
    is_error, text = _call(shared, "a", tool, args)
    if tool == "mem/job_status":  # wb's job reads as no job at all: not its world, not that it exists
        never = "0" * len(shared["job_b"])
        assert text.replace(shared["job_b"], "ID") == _call(shared, "a", tool, {"job_id": never})[1].replace(
            never, "ID"
        )
        assert "wb" not in text, text
        text = text.replace(shared["job_b"], "ID")  # the id the caller sent, echoed
    assert SECRET_B not in text and shared["job_b"] not in text, text
    if refusal is not None:
        assert is_error and refusal in text and "\n" not in text, text
        assert _state(shared["store"]) == before  # nothing written, nothing started
    else:
        assert not is_error, text
    if tool == "mem/list_jobs":
        assert {j["group"] for j in json.loads(text)["jobs"]} == {"wa"}


# The tools whose answer to an --all-worlds token holds wb's memory: the data was there to leak.
SHOWS_B = {
    "mem/recall",
    "mem/windows",
    "mem/job_status",
    "mem/list_jobs",
    "memory/search",
    "mem/get_summary",
    "temporal/prompt_block",
    "objects/find",
    "objects/read",
    "objects/evidence",
    "objects/status",
    "objects/resident",
    "sleep/self",
    "conversation/summary",
}


@pytest.mark.parametrize("tool", sorted(SHOWS_B))
def test_an_all_worlds_token_gets_b_from_the_same_calls(shared, tool):
    args, _ = CROSS_WORLD[tool]
    is_error, text = _call(shared, "ops", tool, _args(shared, args))
    assert not is_error, text
    assert SECRET_B in text or shared["job_b"] in text or '"group": "wb"' in text, text


# The tools naming a world: an --all-worlds token asking for a world nothing was ingested for.
UNKNOWN_WORLD = {
    name: args
    for name, (args, _) in CROSS_WORLD.items()
    if "world" in args and not name.startswith("conversation/")  # those refuse the unknown conversation
}


@pytest.mark.parametrize("tool", sorted(UNKNOWN_WORLD))
def test_a_world_nothing_was_ingested_for_is_refused_not_answered_empty_nor_created(shared, tool):
    args = {**UNKNOWN_WORLD[tool], "world": "nosuch"}
    before = _state(shared["store"])
    is_error, text = _call(shared, "ops", tool, args)
    assert is_error and "world" in text and "'nosuch'" in text and "\n" not in text, text
    assert _state(shared["store"]) == before
    with shared["store"].connect() as conn:
        assert (
            conn.execute(select(objects_worlds.c.world_id).where(objects_worlds.c.world_id == "nosuch")).first() is None
        )


def test_an_entry_missing_its_types_group_field_is_refused_naming_the_entry_and_field(shared):
    before = _state(shared["store"])
    entries = [{"content": {"project": "wa", "did": "x"}}, {"content": {"did": "y"}}]
    is_error, text = _call(shared, "a", "mem/append", {"type": "worklog", "entries": entries})
    assert is_error and "entries[1]: field 'content.project': missing" in text, text
    assert _state(shared["store"]) == before


def _raw_call(served, who: str, name: str, args: dict) -> str:
    """One tools/call sent as JSON with its escapes kept (a lone surrogate, which the SDK's client
    cannot encode, arrives as one): the response body."""
    headers = {**ACCEPT, "Authorization": f"Bearer {served['bearer'][who]}"}
    url = served["url"] + "/mcp"
    with httpx.Client(timeout=30) as client:
        opened = client.post(url, json=INITIALIZE, headers=headers)
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
        client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": args}}
        return client.post(url, content=json.dumps(call).encode(), headers=session).text


# A NUL or a lone surrogate reached PostgreSQL's driver: an internal error, not a refusal.
BAD_TEXT = [
    ("sleep/remember", {"world": "wa", "session_id": "wa.s1", "content": "x\ud800", "request_id": "r-t1"}, "content"),
    (
        "conversation/correct",
        {"world": "wa", "conversation_id": "wa.s1", "arc": "x\x00y. b. c.", "request_id": "r-t2"},
        "arc",
    ),
    ("objects/organize", {"world": "wa", "request_id": "r-t3", "scope": "\ud800"}, "scope"),
    ("objects/find", {"world": "wa", "query": "zebra\ud800"}, "query"),
    ("objects/read", {"world": "wa", "id": "knowledge:\ud800"}, "id"),  # an internal UnicodeEncodeError
    ("objects/evidence", {"world": "wa", "id": "knowledge:\ud800"}, "id"),
    ("objects/approve", {"world": "wa", "id": "project:\ud800", "request_id": "r-t4"}, "id"),  # a -32603
    *[(tool, {**args, "world": "a\x00"}, "world") for tool, args in sorted(UNKNOWN_WORLD.items())],
]


@pytest.mark.parametrize(("tool", "args", "field"), BAD_TEXT, ids=[f"{t}-{f}" for t, _, f in BAD_TEXT])
def test_text_the_store_cannot_hold_is_refused_by_name_not_an_internal_error(shared, tool, args, field):
    before = _state(shared["store"])
    text = _raw_call(shared, "ops", tool, args)
    assert '"isError":true' in text.replace(" ", "") and f"field '{field}'" in text, text
    assert "internal error" not in text, text
    assert _state(shared["store"]) == before


def test_evidence_of_an_object_the_world_does_not_have_is_refused_as_read_is(shared):
    for tool in ("objects/read", "objects/evidence"):
        is_error, text = _call(shared, "a", tool, {"world": "wa", "id": "knowledge:nope"})
        assert is_error and "field 'id': no object knowledge:nope in world wa" in text, (tool, text)


def test_a_token_of_world_a_reads_its_own_world(served):
    _, results = asyncio.run(
        _calls(
            served["url"],
            served["bearer"]["a"],
            [
                ("memory/search", {"world": "wa", "query": "zebra", "limit": 5}),
                ("mem/recall", {"type": NOTES, "granularity": "day", "anchor": DAY, "group": "wa"}),
                ("mem/job_status", {"job_id": served["job_a"]}),
                ("mem/recall", {"type": NOTES, "granularity": "day", "anchor": DAY}),
                ("mem/append", {"type": NOTES, "entries": [{"content": "wa writes", "group": "wa"}]}),
            ],
        )
    )
    (s_err, search), (r_err, recall), (j_err, job), (all_err, all_groups), (a_err, appended) = results
    assert not s_err and not r_err and not j_err and not a_err, results
    hits = json.loads(search)["hits"]
    assert hits and all(SECRET_A in h["text"] for h in hits) and SECRET_B not in search
    assert json.loads(recall)["total_entries"] == 1 and SECRET_A in recall
    assert json.loads(job)["group"] == "wa"
    assert all_err and "group: required" in all_groups and SECRET_B not in all_groups
    assert json.loads(appended)["inserted"] == 1
    # a count of windows rebuilt would span every world's groups of the type: only the all-worlds
    # token's answer has it; every token's has the days of its own entries refreshed
    assert "late_windows_refreshed" not in json.loads(appended) and "late_days_refreshed" in json.loads(appended)


def test_a_read_only_token_reads_its_worlds_prompt_block_and_objects(served):
    _, results = asyncio.run(
        _calls(
            served["url"],
            served["bearer"]["a_ro"],
            [
                ("temporal/prompt_block", {"world": "wa", "at": AT}),
                ("temporal/prompt_block", {"world": "wa", "viewer": "wa.s1", "at": AT}),
                ("objects/find", {"world": "wa", "query": "zebra", "limit": 5}),
                ("objects/read", {"world": "wa", "id": "person:zebra"}),
                ("objects/evidence", {"world": "wa", "id": "person:zebra", "limit": 1}),
                ("objects/status", {"world": "wa"}),
                ("temporal/prompt_block", {"world": "wa", "at": "2026-01-05T04:00:00Z"}),  # AT, written in UTC
                ("temporal/prompt_block", {"world": "wa", "viewer": "wa.typo", "at": AT}),
                ("temporal/prompt_block", {"world": "wa", "viewer": "wb.s1", "at": AT}),  # another world's
            ],
        )
    )
    assert not any(e for e, _ in results), results
    assert all(SECRET_B not in text for _, text in results), results
    block, viewed, found, dossier, evidence, status, in_utc, typo, other = (json.loads(t) for _, t in results)
    # a viewer no conversation of the world has (mistyped, or another world's: the same answer) is said
    assert viewed["viewer_known"] and not block["viewer_known"]
    assert not typo["viewer_known"] and {k: v for k, v in other.items() if k != "viewer"} == {
        k: v for k, v in typo.items() if k != "viewer"
    }
    assert SECRET_A in block["system_block"] and "<temporal_summary>" in block["system_block"], block
    assert block["at"] == AT and not block["truncated"] and block["peer_messages"] == []
    assert in_utc["at"] == AT and in_utc["system_block"] == block["system_block"]  # told in the configured zone
    assert SECRET_A in block["rolls"]["past_days"] and block["rolls"]["past_months"] is None
    assert viewed["system_block"] == block["system_block"] and viewed["viewer"] == "wa.s1"
    assert [h["id"] for h in found["items"]] == ["person:zebra"] and SECRET_A in found["items"][0]["summary"]
    assert dossier["id"] == "person:zebra" and [x["event_id"] for x in dossier["sources"]] == ["wa1"]
    assert [x["event_id"] for x in evidence["items"]] == ["wa1"] and SECRET_A in evidence["items"][0]["text"]
    assert evidence["total"] == 1 and evidence["next_cursor"] is None
    assert status["world"] == "wa" and [w["world_id"] for w in status["worlds"]] == ["wa"]
    assert SECRET_A in status["worlds"][0]["worker_error"]


def test_object_times_are_answered_in_the_configured_zone_to_the_second(served, ingest):
    """objects/find, objects/read, objects/evidence and objects/status answer their times as every
    other tool answers a time: in the configured zone (the server's, +08:00 here), to the second
    (objects/status answered a failure's time as `2026-01-05T01:02:03.456000Z`)."""
    store, at = served["store"], datetime(2026, 1, 5, 1, 2, 3, 456_000, tzinfo=UTC)
    ingest([event("wa", "wa.s1", "user", f"{SECRET_A} zebra at dawn", at, mid="wa0")])
    with store.begin() as conn:
        conn.execute(
            objects_attachments.insert().values(world_id="wa", object_id="person:zebra", event_id="wa0", revision=1)
        )
        conn.execute(
            objects_event_state.insert().values(
                event_id="wa0", world_id="wa", occurred_at=at, event_day=date(2026, 1, 5), chars=1, state="linked"
            )
        )
        conn.execute(
            update(objects_objects)
            .where(objects_objects.c.world_id == "wa", objects_objects.c.object_id == "person:zebra")
            .values(updated_at=at)
        )
        conn.execute(
            objects_event_state.insert().values(
                event_id="wa-pending",
                world_id="wa",
                occurred_at=at,
                event_day=date(2026, 1, 5),
                chars=1,
                state="pending",
            )
        )
        conn.execute(
            objects_failures.insert().values(world_id="wa", job_id=1, mode="organize", batch="b", error="x", at=at)
        )
        conn.execute(update(objects_worlds).where(objects_worlds.c.world_id == "wa").values(worker_error_at=at))
    _, results = asyncio.run(
        _calls(
            served["url"],
            served["bearer"]["a"],
            [
                ("objects/find", {"world": "wa", "query": "zebra"}),
                ("objects/read", {"world": "wa", "id": "person:zebra"}),
                ("objects/evidence", {"world": "wa", "id": "person:zebra"}),
                ("objects/status", {"world": "wa"}),
            ],
        )
    )
    assert not any(e for e, _ in results), results
    found, dossier, evidence, status = (json.loads(t) for _, t in results)
    shown = "2026-01-05T09:02:03+08:00"
    assert [(h["id"], h["updated_at"]) for h in found["items"]] == [("person:zebra", shown)]
    assert dossier["updated_at"] == shown and {"event_id": "wa0", "occurred_at": shown} in dossier["sources"]
    assert [(x["event_id"], x["occurred_at"]) for x in evidence["items"]] == [
        ("wa0", shown),
        ("wa1", "2026-01-05T10:00:00+08:00"),  # the seed's event, 10:00 in the configured zone
    ]
    assert [(x["event_id"], x["occurred_at"]) for x in status["earliest_unfinished"]] == [("wa-pending", shown)]
    assert [f["at"] for f in status["failures"]] == [shown] and status["worlds"][0]["worker_error_at"] == shown
    assert all("+00:00" not in t and ".456" not in t for _, t in results), results


def _row_counts(store) -> dict[str, int]:
    with store.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one() for t in metadata.sorted_tables}


def test_the_prompt_block_writes_nothing_to_the_store_where_the_read_command_files_a_warmup_and_a_warning(
    served, redis_url
):
    """A peer roll not cached and a system segment over its cap: `memory-pipeline read`'s view files a
    warm-up request and an inbox warning; the read tool answers the same block and writes no row."""
    store, day = served["store"], date(2026, 1, 6)
    at = datetime(2026, 1, 6, 12, 0, tzinfo=CST)
    with store.begin() as conn:
        conn.execute(
            temporal_day_chunks.insert().values(
                conversation_id="wa.s1",
                world_id="wa",
                cst_date=day,
                bucket=datetime(2026, 1, 6, 10, 0, tzinfo=CST),
                at=datetime(2026, 1, 6, 10, 30, tzinfo=CST),
                summary=f"{SECRET_A} chunk",
                watermark_message_id="wa1",
                watermark_at=datetime(2026, 1, 6, 10, 5, tzinfo=CST),
                source_ids=["wa1"],
                model="offline",
            )
        )
    cfg = temporal_config.load()
    cache = KVCache(redis_url)
    cache.set_json(sys_roll_key(cfg.redis_key_prefix, "wa", "past_days", day), {"summary": "x" * 3000}, 3600)
    before = _row_counts(store)
    _, [(err, text)] = asyncio.run(
        _calls(
            served["url"], served["bearer"]["a_ro"], [("temporal/prompt_block", {"world": "wa", "at": at.isoformat()})]
        )
    )
    assert not err, text
    block = json.loads(text)
    assert block["truncated"] and block["peer_roll_misses"] == 1, block
    assert [m["cache"] for m in block["peer_messages"]] == ["miss"] and SECRET_A in block["peer_messages"][0]["content"]
    assert _row_counts(store) == before
    view = temporal_view(store, cache, cfg, "wa", None, at, CST)  # what the read command does
    assert view.system_block == block["system_block"] and view.peer_messages == block["peer_messages"]
    after = _row_counts(store)
    assert (after["warmup_requests"], after["inbox"]) == (before["warmup_requests"] + 1, before["inbox"] + 2)


REMEMBER_A = {"world": "wa", "session_id": "wa.s1", "content": "wa remembers", "request_id": "r1"}
CHECK_A = {"world": "wa", "conversation_id": "wa.s1", "request_id": "r1"}
CORRECT_A = {"world": "wa", "conversation_id": "wa.s1", "arc": "用户其实在聊长颈鹿。", "request_id": "r1"}

# Per new tool, calls by wa's token (ops: the --all-worlds one) refused with one line naming the argument.
INVALID = [
    ("memory/search", "a", {"world": "wa", "query": " "}, "field 'query': must be a non-empty string"),
    ("memory/search", "a", {"world": "wa", "query": "zebra", "k": 5}, "field 'k': unknown argument"),
    ("temporal/prompt_block", "a", {"world": "wa", "at": "yesterday"}, "field 'at': is not an ISO 8601"),
    ("temporal/prompt_block", "a", {"world": "wa", "at": "2026-01-05T12:00:00"}, "field 'at': has no time zone"),
    ("temporal/prompt_block", "a", {"world": "wa", "viewer": ""}, "field 'viewer': must not be empty"),
    ("temporal/prompt_block", "a", {"world": "wa", "viewer": None, "at": 5}, "field 'at'"),
    ("temporal/prompt_block", "a", {"world": "wa", "when": AT}, "field 'when': unknown argument"),
    ("temporal/prompt_block", "ops", {"world": "wz"}, "field 'world': 'wz': nothing has been ingested"),
    ("objects/find", "a", {"world": "wa"}, "field 'query': is required"),
    ("objects/find", "a", {"world": "wa", "query": "  "}, "field 'query': must not be empty"),
    ("objects/find", "a", {"world": "wa", "query": "z" * 501}, "field 'query': at most 500"),
    ("objects/find", "a", {"world": "wa", "query": "zebra", "limit": 0}, "field 'limit': must be 1-100"),
    ("objects/find", "a", {"world": "wa", "query": "zebra", "limit": "5"}, "field 'limit'"),
    ("objects/read", "a", {"world": "wa", "id": "zebra"}, "field 'id': must be '<type>:<key>'"),
    ("objects/read", "a", {"world": "wa", "id": "person:nobody"}, "field 'id': no object person:nobody"),
    ("objects/read", "a", {"world": "wa", "id": "person:zebra", "object_id": "x"}, "field 'object_id': unknown"),
    ("objects/evidence", "a", {"world": "wa", "id": "person:zebra", "offset": 1}, "field 'offset': unknown argument"),
    ("objects/evidence", "a", {"world": "wa", "id": "person:zebra", "cursor": "bm9wZQ"}, "field 'cursor': not a"),
    ("objects/evidence", "a", {"world": "wa", "id": "person:zebra", "limit": 101}, "field 'limit': must be 1-100"),
    ("objects/evidence", "a", {"world": "wa", "id": "place:"}, "field 'id'"),
    ("objects/evidence", "a", {"world": "wa", "id": "person:zebra\n"}, "field 'id': key 'zebra\\n' must be"),
    ("objects/read", "a", {"world": "wa", "id": "person:zeb\x7fra"}, "field 'id': key 'zeb\\x7fra' must be"),
    ("objects/status", "a", {}, "field 'world': is required"),
    ("objects/status", "a", {"world": "wa", "verbose": True}, "field 'verbose': unknown argument"),
    ("objects/organize", "a", {"world": "wa"}, "field 'request_id': is required"),
    ("objects/organize", "a", {"world": "wa", "request_id": "r1", "mode": "nap"}, "field 'mode': 'nap' is not a mode"),
    ("objects/organize", "a", {"world": "wa", "request_id": "r1", "retry_blocked": "yes"}, "field 'retry_blocked'"),
    ("objects/organize", "a", {"world": "wa", "request_id": "r 1"}, "field 'request_id': character ' '"),
    (
        "objects/approve",
        "a",
        {"world": "wa", "id": "person:zebra", "request_id": "r1"},
        "field 'id': person:zebra is not",
    ),
    (
        "objects/approve",
        "a",
        {"world": "wa", "id": "project:nope", "request_id": "r1"},
        "field 'id': project:nope does",
    ),
    ("objects/approve", "a", {"world": "wa", "id": "zoo", "request_id": "r1"}, "field 'id': must be '<type>:<key>'"),
    ("objects/resident", "a", {"world": "wa", "limit": 5}, "field 'limit': unknown argument"),
    ("sleep/remember", "a", {"world": "wa", "session_id": "wa.s1", "content": "x"}, "field 'request_id': is required"),
    ("sleep/remember", "a", {**REMEMBER_A, "session_id": "wb.s1"}, "field 'session_id': no conversation 'wb.s1' in"),
    ("sleep/remember", "a", {**REMEMBER_A, "type": "dream"}, "field 'type'"),
    ("sleep/remember", "a", {**REMEMBER_A, "content": " "}, "field 'content'"),
    ("sleep/self", "a", {}, "field 'world': is required"),
    ("sleep/self", "a", {"world": "wa", "name": "identity"}, "field 'name': unknown argument"),
    ("conversation/summary", "a", {"world": "wa", "conversation_id": "wb.s1"}, "no conversation 'wb.s1' in world"),
    ("conversation/summary", "a", {"world": "wa", "conversation_id": ""}, "field 'conversation_id': must not be"),
    ("conversation/check", "a", {"world": "wa", "conversation_id": "wa.s1"}, "field 'request_id': is required"),
    ("conversation/check", "a", {**CHECK_A, "conversation_id": "wb.s1"}, "field 'conversation_id': no conversation"),
    ("conversation/confirm", "a", {**CHECK_A, "version": 7}, "field 'version': 7 is not the newest version"),
    ("conversation/confirm", "a", {**CHECK_A, "version": "1"}, "field 'version'"),
    ("conversation/confirm", "a", {**CHECK_A, "conversation_id": "wb.s1"}, "field 'conversation_id': no conversation"),
    ("conversation/correct", "a", {**CORRECT_A, "arc": ""}, "field 'arc': missing or empty"),
    ("conversation/correct", "a", {**CORRECT_A, "conversation_id": "wb.s1"}, "field 'conversation_id': no conv"),
    ("conversation/correct", "a", {**CORRECT_A, "request_id": "x" * 129}, "field 'request_id': too long"),
]


@pytest.mark.parametrize(("tool", "who", "args", "refusal"), INVALID)
def test_a_new_tool_refuses_a_bad_argument_by_name(shared, tool, who, args, refusal):
    is_error, text = _call(shared, who, tool, args)
    assert is_error and refusal in text and "\n" not in text, text


def test_every_new_tool_has_an_invalid_argument_case():
    # the tower's mem/* tools have theirs in test_tower_mcp.py
    assert {tool for tool, *_ in INVALID} == set(TOOL_NAMES) - set(tower_tools.TOOL_NAMES)


# ---- read-only -----------------------------------------------------------------------------------------

WRITES = {
    "mem/create_type": {"name": "wa/ro"},
    "mem/update_type": {"name": "b/notes", "changes": {"retention": "1y"}},
    "mem/delete_type": {"name": "b/notes"},
    "mem/append": {"type": NOTES, "entries": [{"content": "x", "group": "wa"}]},
    "mem/summarize": {"type": "worklog", "granularity": "day", "anchor": DAY, "group": "wa"},
    "mem/recompute": {"type": "worklog", "granularity": "day", "anchor": DAY, "group": "wa"},
    "objects/organize": {"world": "wa", "request_id": "r-ro"},
    "objects/approve": {"world": "wa", "id": "project:zoo", "request_id": "r-ro"},
    "sleep/remember": {**REMEMBER_A, "request_id": "r-ro"},
    "conversation/check": {**CHECK_A, "request_id": "r-ro"},
    "conversation/confirm": {**CHECK_A, "request_id": "r-ro"},
    "conversation/correct": {**CORRECT_A, "request_id": "r-ro"},
}


def test_the_writing_tools_are_the_declared_ones(shared):
    declared = {n for n, a in tool_access(shared["tower"]).items() if a is Access.WRITE}
    assert declared == set(WRITES)


@pytest.mark.parametrize("tool", sorted(WRITES))
def test_a_read_only_token_cannot_call_a_writing_tool(shared, tool):
    before = _state(shared["store"])
    is_error, text = _call(shared, "a_ro", tool, WRITES[tool])
    assert is_error and "read-only" in text and "\n" not in text, text
    assert _state(shared["store"]) == before


def test_a_read_only_token_reads_but_cannot_summarize_on_miss(shared):
    day = {"type": "worklog", "granularity": "day", "anchor": "2026-01-06", "group": "wa"}
    _, results = asyncio.run(
        _calls(
            shared["url"],
            shared["bearer"]["a_ro"],
            [("mem/get_summary", day), ("mem/get_summary", {**day, "summarize_on_miss": True})],
        )
    )
    assert not results[0][0] and json.loads(results[0][1])["state"] in ("missing", "empty")
    assert results[1][0] and "read-only" in results[1][1]


def test_a_token_changes_only_types_holding_its_worlds_alone(served):
    _, results = asyncio.run(
        _calls(
            served["url"],
            served["bearer"]["a"],
            [
                ("mem/create_type", {"name": "wa/notes", "group_field": "world"}),
                ("mem/update_type", {"name": "wa/notes", "changes": {"retention": "1y"}}),
                ("mem/update_type", {"name": "worklog", "changes": {"retention": "1y"}}),
                ("mem/delete_type", {"name": ACTIVITY}),
                ("mem/delete_type", {"name": "wa/notes"}),
            ],
        )
    )
    assert [e for e, _ in results] == [False, False, True, True, False], results
    assert "built in" in results[2][1] and "built in" in results[3][1]


def test_a_type_a_world_created_is_changed_only_by_its_worlds_whoever_wrote_to_it(served):
    """The type's creator decides, not who wrote to it: another world's token is refused with the
    same line whether the type holds memory or not (the refusal told it before), and a type the
    operator made is changed by an --all-worlds token only."""
    b = tokens.create(served["store"], ["wb"], name="b")[1]
    for ungrouped in ({"name": "wa/flat"}, {"name": "wa/flat", "group_field": ""}):  # it could never append
        _, refused = asyncio.run(_calls(served["url"], served["bearer"]["a"], [("mem/create_type", ungrouped)]))
        assert refused[0][0] and "group_field: required" in refused[0][1], refused
    made = {"name": "wa/own", "group_field": "world"}
    ungroup = ("mem/update_type", {"name": "wa/own", "changes": {"group_field": None}})
    _, results = asyncio.run(_calls(served["url"], served["bearer"]["a"], [("mem/create_type", made), ungroup]))
    assert not results[0][0], results
    # nor ungrouped later: its own token could no longer append to it (the update took it)
    assert results[1][0] and "changes.group_field: required" in results[1][1], results
    theirs = [
        ("mem/update_type", {"name": "wa/own", "changes": {"retention": "1y"}}),
        ("mem/delete_type", {"name": "wa/own"}),
        ("mem/update_type", {"name": NOTES, "changes": {"retention": "1y"}}),  # made by the operator
    ]
    _, empty = asyncio.run(_calls(served["url"], b, theirs))
    _, wrote = asyncio.run(  # wa writes to its type: b's refusals stay the same
        _calls(
            served["url"],
            served["bearer"]["a"],
            [("mem/append", {"type": "wa/own", "entries": [{"content": "x", "group": "wa"}]})],
        )
    )
    assert not wrote[0][0], wrote
    _, written = asyncio.run(_calls(served["url"], b, theirs))
    assert [e for e, _ in empty] == [True, True, True] and empty == written, (empty, written)
    assert all("not created by this token's worlds" in text for _, text in empty), empty
    _, ops = asyncio.run(_calls(served["url"], served["bearer"]["ops"], theirs[:1]))
    _, own = asyncio.run(_calls(served["url"], served["bearer"]["a"], [("mem/delete_type", {"name": "wa/own"})]))
    assert not ops[0][0] and not own[0][0], (ops, own)


def test_a_worlds_append_to_an_ungrouped_type_is_refused_in_one_wording_with_a_group_or_without(served):
    """A type with no group field holds no world's memory: a world's token is refused the same line
    whether its entry names a group or not (with one, it was told the type has no group field, as if
    leaving the group out would do). The Python API and an --all-worlds token append there without a
    group; with one they keep the tower's own refusal, the same at both."""
    served["tower"].create_type("ops/flat")
    with_group = {"type": "ops/flat", "entries": [{"content": "x", "group": "wa"}]}
    without = {"type": "ops/flat", "entries": [{"content": "x"}]}
    _, world = asyncio.run(
        _calls(served["url"], served["bearer"]["a"], [("mem/append", with_group), ("mem/append", without)])
    )
    line = (
        "Error executing tool mem/append: type 'ops/flat': groups by no world: only an --all-worlds token appends to it"
    )
    assert world == [(True, line), (True, line)], world
    _, ops = asyncio.run(
        _calls(served["url"], served["bearer"]["ops"], [("mem/append", with_group), ("mem/append", without)])
    )
    with pytest.raises(TowerInputError) as api:
        served["tower"].append("ops/flat", with_group["entries"])
    assert ops[0] == (
        True,
        f"Error executing tool mem/append: {api.value}",
    ) and "field 'group': this type has no group field" in str(api.value)
    assert not ops[1][0], ops


# ---- starting ------------------------------------------------------------------------------------------


def test_off_the_loopback_address_the_server_needs_a_token(store, monkeypatch, pg_url, tmp_path):
    for host in ("127.0.0.1", "::1", "localhost"):
        check_exposure(store, host)  # no token needed on the loopback interface
    with pytest.raises(ServeError, match="no access token exists"):
        check_exposure(store, "0.0.0.0")
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    refused = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "--port", str(_free_port())])
    assert refused.exit_code == 2 and "no access token exists" in " ".join(refused.output.split())
    tokens.create(store, ["wa"], name="a")
    check_exposure(store, "0.0.0.0")
    tokens.revoke(store, "a")
    with pytest.raises(ServeError):
        check_exposure(store, "0.0.0.0")  # a revoked token does not count


def test_serve_and_its_alias_mcp_take_the_same_options():
    runner = CliRunner()
    for cmd in ("serve", "mcp"):
        out = runner.invoke(app, [cmd, "--help"]).output
        assert "--host" in out and "--port" in out and "bearer" in " ".join(out.split()).lower(), cmd
        for port in ("0", "99999"):  # refused as a usage error, before any store or server is touched
            bad = runner.invoke(app, [cmd, "--port", port])
            assert bad.exit_code == 2 and "Invalid value for '--port'" in " ".join(bad.output.split()), bad.output


def test_serve_with_a_bad_temporal_config_says_which_setting_in_one_line_and_exits_non_zero(
    store, monkeypatch, pg_url, tmp_path
):
    config = tmp_path / "memory.yaml"
    config.write_text("memory:\n  temporal_summary:\n    system_prompt_max_chars: -5\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(config))
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    for cmd in ("serve", "mcp"):
        refused = CliRunner().invoke(app, [cmd, "--port", str(_free_port())])
        said = " ".join(refused.output.split())
        assert refused.exit_code == 2 and isinstance(refused.exception, SystemExit), (cmd, refused.output)
        assert said == f"{config}: memory.temporal_summary.system_prompt_max_chars: must be a positive integer, got -5"
