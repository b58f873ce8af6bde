"""The memory server's recall tools on the embedded default (issue 19): `memory/search`,
`temporal/prompt_block`, `objects/find` and the time tower's exact recall `mem/recall`, each called over MCP (a real `memory-pipeline serve` in
its own process, a bearer token, the SDK's client session in this one) and in process (the Python call the tool makes),
p50 / p99 per tool. A stage of bench/run.py (`--only server`); alone:

    .venv/bin/python bench/server_recall.py --scale quick|full [--calls N] [--profile TOOL] [--find-ab [REF]]

The store is a SQLite file in a temporary folder and the cache the in-process one (no REDIS_URL):
what `memory-pipeline serve` uses with no configuration. What is in it: bench/README.md."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TZ = ZoneInfo("Asia/Shanghai")
YEAR = 2025
TOOLS = ("memory/search", "temporal/prompt_block", "objects/find", "mem/recall")
KEYS = {
    "memory/search": "memory_search",
    "temporal/prompt_block": "prompt_block",
    "objects/find": "objects_find",
    "mem/recall": "tower_recall",
}
# The time tower's exact recall (seed 004): a type of its own, a log of TOWER_LOG_PER_DAY entries a
# day in each world over the year's last TOWER_LOG_DAYS days; a call reads one world's day, a page
# of 100 entries (the first of two).
TOWER_LOG, TOWER_LOG_DAYS, TOWER_LOG_PER_DAY = "bench_log", 7, 200

# LoCoMo-like life chat: people, places, projects and everyday topics, each world its own cast.
FIRST = (
    "Ava Ben Cara Dev Eli Fay Gus Hana Ivan Jade Kai Lena Milo Nora Omar Pia Quinn Rosa Sam Tara Uma Vik Wren "
    "Xena Yuri Zoe Abel Bea Cole Dina Emil Flor Gabe Hugo Iris Jon Kira Leo Maya Nils"
).split()
LAST = (
    "Adler Baker Chen Diaz Evans Fischer Garcia Hughes Ito Jensen Khan Lopez Moreau Novak Ortiz Park Quist Reyes "
    "Silva Tanaka Ueda Vargas Weber Xu Young Zhou"
).split()
PLACES = (
    "harbor library bakery station museum park gym clinic market studio garden cafe beach lake trail campus "
    "theater office kitchen stadium"
).split()
TOPICS = (
    "marathon tomatoes compost deploy database invoice travel piano recipe harvest concert hiking painting "
    "budget migration latency pottery yoga camping guitar novel sourdough cycling chess volunteering adoption "
    "wedding promotion interview mortgage vaccine puppy kitten garden exhibition podcast photography surfing "
    "knitting astronomy climbing"
).split()
VERBS = "planned discussed reviewed fixed compared scheduled measured finished started postponed enjoyed".split()
FEELINGS = "happy tired excited worried proud calm nervous grateful curious relieved".split()


@dataclass(frozen=True)
class Scale:
    name: str
    messages: int  # over ``worlds`` worlds and the year
    worlds: int
    objects_per_world: int
    organize_events_per_world: int  # a slice through the real organize (the rest: see objects())
    sleep_days: int  # the last days of the year through the nightly sleep
    calls: int  # per tool and side


SCALES = {
    "quick": Scale("quick", 8_000, 10, 200, 10, 3, 200),
    "full": Scale("full", 100_000, 10, 1_000, 20, 14, 1_000),
}


def cast(world: int) -> dict[str, list[str]]:
    rng = random.Random(world)
    people = [f"{f} {last}" for f in FIRST for last in LAST]
    rng.shuffle(people)
    return {
        "people": people[:60],
        "places": rng.sample(PLACES, 12),
        "topics": rng.sample(TOPICS, 24),
        "projects": [
            f"{t.title()} {s}" for t, s in zip(rng.sample(TOPICS, 10), ("Plan", "Club", "Trip") * 4, strict=False)
        ],
    }


def sentence(rng: random.Random, c: dict[str, list[str]]) -> str:
    who, where, a, b = rng.choice(c["people"]), rng.choice(c["places"]), *rng.sample(c["topics"], 2)
    return rng.choice(
        (
            f"I {rng.choice(VERBS)} the {a} with {who} at the {where} today and felt {rng.choice(FEELINGS)}.",
            f"{who.split()[0]} told me about the {a} and the {b}; we might go to the {where} next week.",
            f"Remember the {rng.choice(c['projects'])} project? {who} {rng.choice(VERBS)} the {b} part.",
            f"Honestly the {a} is going well, the {b} less so. {who.split()[0]} says hi from the {where}.",
        )
    )


def generate(path: Path, n_messages: int, worlds: int, seed: int = 19) -> int:
    """The year's chat: two conversations a day per world, ~10% quiet days, 1-2 sentences a turn."""
    from memory_pipeline.events.ingest import event_line

    rng = random.Random(seed)
    days = [date(YEAR, 1, 1) + timedelta(days=i) for i in range(365)]
    per_day = max(2, -(-n_messages // int(worlds * len(days) * 0.9)))
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for w in range(worlds):
            c = cast(w)
            for d in days:
                if rng.random() < 0.1:
                    continue
                at = datetime(d.year, d.month, d.day, 8, 0, tzinfo=TZ)
                for i in range(per_day):
                    at += timedelta(minutes=rng.randint(1, 20))
                    text = " ".join(sentence(rng, c) for _ in range(rng.randint(1, 2)))
                    role = "user" if i % 2 == 0 else "assistant"
                    line = event_line(f"s-{w}-{d:%Y%m%d}-{i}", f"w{w}", f"w{w}-{d:%Y%m%d}-{i % 2}", role, text, at)
                    fh.write(json.dumps(line) + "\n")
                    n += 1
    return n


# --- consolidation ------------------------------------------------------------------------------


def consolidate(store: Any, scale: Scale, say: Callable[[str], None]) -> dict[str, Any]:
    """Day, month and year summaries of the year (the range runs the backfill makes), the nights of
    sleep of the last ``sleep_days`` days, the objects (organize over a slice, then the rest of each
    world's ``objects_per_world`` written as graph rows, see objects()), the recall index, and the
    prompt block's rolls of the last day (chunks, peer rolls, system rolls)."""
    from memory_pipeline import operations
    from memory_pipeline.definitions import build_defs

    instance, defs = operations.get_instance(), build_defs()
    timing: dict[str, float] = {}
    last = date(YEAR, 12, 31)
    for window, lo, hi in (
        ("day", f"{YEAR}-01-01", last.isoformat()),
        ("month", f"{YEAR}-01", f"{YEAR}-12"),
        ("year", str(YEAR), str(YEAR)),
        ("sleep", (last - timedelta(days=scale.sleep_days - 1)).isoformat(), last.isoformat()),
    ):
        t = time.perf_counter()
        report = operations.materialize(window, lo, hi, instance=instance, defs=defs)
        if not report.success:
            raise RuntimeError(f"{window} {lo}..{hi} failed: {report.runs[0].error}")
        timing[window] = round(time.perf_counter() - t, 1)
        say(f"{window} {lo}..{hi}: {timing[window]} s")
    t = time.perf_counter()
    tower_log(store, scale)
    timing["tower_log"] = round(time.perf_counter() - t, 1)
    say(
        f"tower: {TOWER_LOG_DAYS * TOWER_LOG_PER_DAY} entries a world in {TOWER_LOG!r} and their windows ({timing['tower_log']} s)"
    )
    t = time.perf_counter()
    organized = organize_slice(store, scale)
    objects(store, scale)
    timing["objects"] = round(time.perf_counter() - t, 1)
    say(
        f"objects: {organized} events organized, then filled to {scale.objects_per_world} a world ({timing['objects']} s)"
    )
    return timing


def tower_log(store: Any, scale: Scale) -> None:
    """TOWER_LOG's entries, appended through the tower's API as an agent appends them, and the
    windows of their days and weeks as the tower's day and week assets build them."""
    from memory_pipeline.lib.llm import LLMClient
    from memory_pipeline.tower import windows
    from memory_pipeline.tower.api import Tower
    from memory_pipeline.tower.config import TowerConfig
    from memory_pipeline.tower.logic import Granularity

    tower = Tower(store, TowerConfig(), TZ, lambda p: LLMClient(store, asset="bench", partition=p), run_jobs="inline")
    tower.create_type(TOWER_LOG, description="benchmark: an agent's work log", group_field="world")
    rng = random.Random(7)
    first = date(YEAR, 12, 31) - timedelta(days=TOWER_LOG_DAYS - 1)
    for w in range(scale.worlds):
        cst = cast(w)
        entries = []
        for d in range(TOWER_LOG_DAYS):
            start = datetime.combine(first + timedelta(days=d), datetime.min.time(), TZ) + timedelta(hours=7)
            for i in range(TOWER_LOG_PER_DAY):
                at = start + timedelta(seconds=i * 14 * 3600 // TOWER_LOG_PER_DAY)
                entries.append({"content": sentence(rng, cst), "at": at.isoformat(), "group": f"w{w}"})
        tower.append(TOWER_LOG, entries)
    tower.close()
    for d in range(TOWER_LOG_DAYS):
        windows.build_day(store, first + timedelta(days=d), TZ)
    for monday in sorted(
        {first + timedelta(days=d - (first + timedelta(days=d)).weekday()) for d in range(TOWER_LOG_DAYS)}
    ):
        windows.build_coarse(store, Granularity.WEEK, monday, TZ)


def organize_slice(store: Any, scale: Scale) -> int:
    """The real organize (offline model) over the last ``organize_events_per_world`` events of each
    world: objects and attachments as the product makes them."""
    from sqlalchemy import select

    from memory_pipeline.lib.llm import LLMClient
    from memory_pipeline.lib.store.tables import conversations, messages
    from memory_pipeline.objects import timeline, worker
    from memory_pipeline.objects.config import ObjectsConfig
    from memory_pipeline.objects.context import ObjectsContext
    from memory_pipeline.objects.tables import objects_event_state

    octx = ObjectsContext(store, LLMClient(store, asset="bench"), ObjectsConfig(retry_backoff_seconds=0))
    m, c = messages.c, conversations.c
    keep: dict[str, set[str]] = {}
    with store.connect() as conn:
        for w in range(scale.worlds):
            keep[f"w{w}"] = set(
                conn.execute(
                    select(m.message_id)
                    .join(conversations, c.conversation_id == m.conversation_id)
                    .where(c.world_id == f"w{w}")
                    .order_by(m.at.desc())
                    .limit(scale.organize_events_per_world)
                ).scalars()
            )
    # As for a world enabled on an existing store: only the slice enters the hot timeline; the rest of
    # the year counts as organized long ago, so only the slice goes through the model.
    timeline.intake(octx, kept_hot=keep)
    sliced = [e for ids in keep.values() for e in ids]
    with store.begin() as conn:
        es = objects_event_state.c
        conn.execute(objects_event_state.update().where(es.event_id.not_in(sliced)).values(state="organized"))
    for w in range(scale.worlds):
        worker.enqueue(octx, f"w{w}", "compact")
    worker.run_worker(octx)
    worker.enqueue_hourly(octx)
    worker.run_worker(octx)
    return len(sliced)


def objects(store: Any, scale: Scale) -> None:
    """Each world's objects up to ``objects_per_world``: people of its cast, its projects (with
    members), places and topics as knowledge, to-dos; each with aliases, cues, a summary and a body
    built from the world's messages that name it, and those messages attached as its evidence. Rows
    as the graph write leaves them (one revision), written directly: organizing the whole year with
    the offline model (~40 events/s) would take most of an hour."""
    from sqlalchemy import func, select

    from memory_pipeline.lib.store.tables import conversations, messages
    from memory_pipeline.objects.tables import (
        objects_attachments,
        objects_objects,
        objects_relations,
        objects_worlds,
    )

    o = objects_objects.c
    m, c = messages.c, conversations.c
    for w in range(scale.worlds):
        world, rng, cst = f"w{w}", random.Random(100 + w), cast(w)
        with store.begin() as conn:
            have = set(conn.execute(select(o.object_id).where(o.world_id == world)).scalars())
            names = {o_id.split(":", 1)[1] for o_id in have}
            events = list(
                conn.execute(
                    select(m.message_id, m.content)
                    .join(conversations, c.conversation_id == m.conversation_id)
                    .where(c.world_id == world)
                    .order_by(func.random())
                    .limit(4000)
                )
            )
            if (
                conn.execute(select(objects_worlds.c.world_id).where(objects_worlds.c.world_id == world)).first()
                is None
            ):
                conn.execute(objects_worlds.insert().values(world_id=world, graph_revision=1))
            people = [f"{f} {last}" for f in FIRST for last in LAST]
            rng.shuffle(people)
            candidates = (
                [("project", p) for p in cst["projects"]]
                + [("person", p) for p in cst["people"]]
                + [("knowledge", f"the {t}") for t in TOPICS]
                + [("knowledge", f"the {p}") for p in PLACES]
                + [("person", p) for p in people]
                + [("todo", f"{v} {t} with {p.split()[0]}") for v in VERBS for t in TOPICS for p in people[:5]]
            )
            rows, attach, rels = [], [], []
            projects = [p for t, p in candidates if t == "project"]
            for otype, name in candidates:
                if len(have) + len(rows) >= scale.objects_per_world:
                    break
                key = "-".join(name.lower().split())[:60]
                if key in names or f"{otype}:{key}" in have:
                    continue
                names.add(key)
                oid = f"{otype}:{key}"
                word = name.split()[-1].lower()
                about = [e for e in events if word in e.content.lower()][:3] or rng.sample(events, 1)
                rows.append(
                    {
                        "world_id": world,
                        "object_id": oid,
                        "type": otype,
                        "name": name,
                        "aliases": [name.split()[0]] if otype == "person" else [],
                        "summary": about[0].content[:200],
                        "body": " ".join(e.content for e in about[1:])[:600],
                        "cues": rng.sample(cst["topics"], 2),
                        "status": "archived" if rng.random() < 0.05 else "active",
                        "version": 1,
                        "revision": 1,
                    }
                )
                attach += [
                    {"world_id": world, "object_id": oid, "event_id": e.message_id, "revision": 1} for e in about
                ]
                if otype == "person" and rng.random() < 0.3:
                    dst = "project:" + "-".join(rng.choice(projects).lower().split())
                    rels.append({"world_id": world, "src": oid, "label": "member_of", "dst": dst, "revision": 1})
            if rows:
                conn.execute(objects_objects.insert(), rows)
            if attach:
                conn.execute(objects_attachments.insert().prefix_with("OR IGNORE"), attach)
            if rels:
                conn.execute(objects_relations.insert().prefix_with("OR IGNORE"), rels)


def warm_rolls(store: Any, scale: Scale, at: datetime) -> None:
    """The prompt block's day as the */30 tick and the system rolls job leave it: chunks of the
    closed buckets, peer rolls for every viewer, the system rolls of that day (in-process cache)."""
    from memory_pipeline.lib.cache import KVCache
    from memory_pipeline.lib.llm import LLMClient
    from memory_pipeline.temporal import chunks, rolls
    from memory_pipeline.temporal import config as temporal_config
    from memory_pipeline.temporal.context import TemporalContext

    ctx = TemporalContext(store, LLMClient(store), KVCache(None), temporal_config.load(), TZ)
    day = at.astimezone(TZ).date()
    chunks.run_tick(ctx, day, at)
    rolls.warm_peer_rolls(ctx, day, at)
    rolls.regenerate_system_rolls(ctx, day)


# --- the calls ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    tool: str
    args: dict[str, Any]


def calls(store: Any, scale: Scale, at: datetime, seed: int = 3) -> list[Call]:
    """``scale.calls`` varied calls of each tool, interleaved: search queries of one to three words
    (names, topics, places, feelings; some that match nothing), prompt blocks of every world with
    each of the last day's conversations as the viewer or none, object finds by full name, first
    name, project, topic or a stray word."""
    from sqlalchemy import select

    from memory_pipeline.lib.store.tables import conversations, messages

    rng = random.Random(seed)
    m, c = messages.c, conversations.c
    day_start = datetime(at.year, at.month, at.day, tzinfo=TZ)
    with store.connect() as conn:
        viewers: dict[str, list[str | None]] = {}
        for world, conv in conn.execute(
            select(c.world_id, c.conversation_id)
            .join(messages, m.conversation_id == c.conversation_id)
            .where(m.at >= day_start, m.at < at)
            .distinct()
        ):
            viewers.setdefault(world, [None]).append(conv)
    out: list[Call] = []
    for _ in range(scale.calls):
        w = rng.randrange(scale.worlds)
        world, cst = f"w{w}", cast(w)
        words = [
            *rng.sample(cst["topics"], 2),
            rng.choice(cst["people"]).split()[0],
            rng.choice(cst["places"]),
            rng.choice(FEELINGS),
            rng.choice(("zeppelin", "quantum", "walrus")),
        ]
        query = " ".join(rng.sample(words, rng.randint(1, 3)))
        out.append(Call("memory/search", {"world": world, "query": query, "limit": 10}))
        viewer = rng.choice(viewers.get(world, [None]))
        block: dict[str, Any] = {"world": world, "at": at.isoformat()}
        if viewer is not None:
            block["viewer"] = viewer
        out.append(Call("temporal/prompt_block", block))
        name = rng.choice(
            (
                rng.choice(cst["people"]),
                rng.choice(cst["people"]).split()[0],
                rng.choice(cst["projects"]),
                rng.choice(cst["topics"]),
                f"{rng.choice(cst['topics'])} {rng.choice(cst['places'])}",
                rng.choice(("zeppelin", "walrus")),
            )
        )
        out.append(Call("objects/find", {"world": world, "query": name, "limit": 20}))
        day = date(YEAR, 12, 31) - timedelta(days=rng.randrange(TOWER_LOG_DAYS))
        page = {"type": TOWER_LOG, "granularity": "day", "anchor": day.isoformat(), "group": world, "limit": 100}
        out.append(Call("mem/recall", page))
    return out


def in_process(store: Any, tower: Any) -> dict[str, Callable[..., Any]]:
    """What each tool does after the token's check: the domain calls, as Python calls."""
    from memory_pipeline.lib.cache import KVCache
    from memory_pipeline.objects import recall
    from memory_pipeline.recall.search import search_page
    from memory_pipeline.server import temporal_tools
    from memory_pipeline.tower.logic import WindowQuery

    cache = KVCache(None)

    def search(world: str, query: str, limit: int) -> Any:  # the tool's first page, with its total
        hits, total = search_page(store, world, query, limit, 0, activity_type=tower.cfg.activity_type, tz=TZ)
        return [h.as_json() for h in hits], total

    def block(world: str, at: str, viewer: str | None = None) -> Any:
        return temporal_tools.prompt_block_answer(store, cache, world, viewer, at, TZ)

    def find(world: str, query: str, limit: int) -> Any:
        return recall.find(store, world, query, limit, tz=TZ)  # as the tool answers: times in the zone

    def recall_page(type: str, granularity: str, anchor: str, group: str, limit: int) -> Any:
        return tower.recall(type, WindowQuery.parse(granularity, anchor, group=group), limit=limit)

    return {"memory/search": search, "temporal/prompt_block": block, "objects/find": find, "mem/recall": recall_page}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(tmp: Path, say: Callable[[str], None]) -> Iterator[str]:
    """A real `memory-pipeline serve` in its own process (as an operator runs it: the client never
    shares its interpreter) over the store in ``tmp``; its URL. The per-token rate limit is off: the
    benchmark calls back to back, faster than `serve`'s default 50 calls/s. Its call log goes to
    ``tmp/serve.log``."""
    import subprocess
    import sys

    from memory_pipeline.lib import settings

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != settings.ENV_REDIS_URL}
    env |= {
        settings.ENV_DATABASE_URL: f"sqlite:///{tmp / 'memory.sqlite'}",
        settings.ENV_DATA_DIR: str(tmp),
        "DAGSTER_HOME": str(tmp / "dagster_home"),
    }
    cli = Path(sys.executable).with_name("memory-pipeline")
    log = (tmp / "serve.log").open("w")
    proc = subprocess.Popen(
        [str(cli), "serve", "--port", str(port), "--rate-limit", "0"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}: {(tmp / 'serve.log').read_text()[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("serve did not accept connections within 60 s")
            time.sleep(0.1)
        say(f"serve (pid {proc.pid}) on port {port}")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def over_mcp(
    url: str, token: str, warm: list[Call], todo: list[Call]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each call's wall time in the SDK's client session (one session, calls one after another):
    first ``warm`` (other queries of the same kinds: a server just started, its caches empty), then
    ``todo`` (the same server after those calls)."""
    import logging

    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    for name in ("httpx", "mcp"):  # a log record per request would be the client's own cost
        logging.getLogger(name).setLevel(logging.WARNING)
    cold: dict[str, list[float]] = {t: [] for t in TOOLS}
    lat: dict[str, list[float]] = {t: [] for t in (*TOOLS, "mem/list_types")}
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx.Timeout(30, read=300)  # the SDK's own
    async with (
        httpx.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for call in warm:
            t = time.perf_counter()
            await session.call_tool(call.tool, call.args)
            cold[call.tool].append((time.perf_counter() - t) * 1000)
        for i, call in enumerate(todo):
            t = time.perf_counter()
            r = await session.call_tool(call.tool, call.args)
            lat[call.tool].append((time.perf_counter() - t) * 1000)
            if r.isError:
                raise RuntimeError(f"{call.tool} {call.args}: {r.content[0].text if r.content else ''}")
            if i % 3 == 0:  # the floor: a tool that reads almost nothing, through the same path
                t = time.perf_counter()
                await session.call_tool("mem/list_types", {})
                lat["mem/list_types"].append((time.perf_counter() - t) * 1000)
    return cold, lat


def over_http(url: str, token: str, n: int) -> list[float]:
    """The server's own time for the floor's call: ``mem/list_types`` as JSON-RPC POSTs over one HTTP
    connection (httpx), without the SDK's client session, which validates each answer against the
    tool's output schema and passes it through its own streams (the agent's side of the wire)."""
    import httpx

    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
    lat: list[float] = []
    with httpx.Client(timeout=30) as client:
        r = client.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        r.raise_for_status()
        headers |= {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        client.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": "mem/list_types", "arguments": {}}
        for i in range(30 + n):
            t = time.perf_counter()
            r = client.post(
                url, headers=headers, json={"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": call}
            )
            if i >= 30:
                lat.append((time.perf_counter() - t) * 1000)
            if r.status_code != 200 or r.json()["result"].get("isError"):
                raise RuntimeError(f"mem/list_types over HTTP: {r.status_code} {r.text[:200]}")
    return lat


def direct(fns: dict[str, Callable[..., Any]], warm: list[Call], todo: list[Call]) -> dict[str, list[float]]:
    lat: dict[str, list[float]] = {t: [] for t in TOOLS}
    for call in warm:
        fns[call.tool](**call.args)
    for call in todo:
        t = time.perf_counter()
        fns[call.tool](**call.args)
        lat[call.tool].append((time.perf_counter() - t) * 1000)
    return lat


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(q * len(s))) - 1))]


@contextmanager
def embedded(tmp: Path) -> Iterator[Any]:
    """The embedded default in ``tmp``: a SQLite store, the in-process cache, a SQLite Dagster instance."""
    from memory_pipeline import domains
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.store import Store
    from memory_pipeline.lib.store.migrate import ensure_schema

    url = f"sqlite:///{tmp / 'memory.sqlite'}"
    env = {
        settings.ENV_DATABASE_URL: url,
        settings.ENV_REDIS_URL: None,
        settings.ENV_DATA_DIR: str(tmp),
        "DAGSTER_HOME": str(tmp / "dagster_home"),
    }
    with settings.overridden(env):
        store = Store(url)
        ensure_schema(store, domains.version_locations())
        yield store


def measure(
    scale: Scale,
    say: Callable[[str], None] = print,
    profile: str = "",
    keep: str = "",
    find_baseline: str | None = None,
) -> dict[str, Any]:
    from sqlalchemy import func, select

    from memory_pipeline.access import tokens
    from memory_pipeline.events.ingest import ingest_file
    from memory_pipeline.lib.llm import LLMClient
    from memory_pipeline.objects.tables import objects_objects
    from memory_pipeline.operations.recall_eval import scratch_sqlite
    from memory_pipeline.recall.tables import recall_documents
    from memory_pipeline.sleep.tables import semantic_memories
    from memory_pipeline.temporal.tables import temporal_summaries
    from memory_pipeline.tower.api import Tower
    from memory_pipeline.tower.config import TowerConfig
    from memory_pipeline.tower.tables import tower_entries

    with tempfile.TemporaryDirectory() as tmp_name, embedded(Path(keep or tmp_name)) as store:
        tmp = Path(keep or tmp_name)
        built = tmp / "built.json"
        if keep and built.exists():  # --keep: a store built by an earlier run of the same scale
            n, timing = json.loads(built.read_text())
        else:
            n = generate(tmp / "events.jsonl", scale.messages, scale.worlds)
            t = time.perf_counter()
            with scratch_sqlite(tmp):  # the build only; the measured reads are the store's own settings
                ingest_file(store, tmp / "events.jsonl")
                say(f"ingested {n:,} messages ({time.perf_counter() - t:.1f} s)")
                timing = consolidate(store, scale, say)
            built.write_text(json.dumps([n, timing]))
        at = datetime(YEAR, 12, 31, 22, 0, tzinfo=TZ)
        warm_rolls(store, scale, at)
        tower = Tower(store, TowerConfig(), TZ, lambda p: LLMClient(store, asset="bench", partition=p))
        fns = in_process(store, tower)
        todo = calls(store, scale, at)
        warm = calls(store, scale, at, seed=4)  # other queries, untimed or timed apart as the cold side
        for w in range(scale.worlds):  # the recall index, built by the first search of each world
            fns["memory/search"](f"w{w}", "hello", 1)
        with store.connect() as conn:
            size = {
                "messages": n,
                "day_month_year_rows": conn.execute(select(func.count()).select_from(temporal_summaries)).scalar(),
                "sleep_facts": conn.execute(select(func.count()).select_from(semantic_memories)).scalar(),
                "objects": conn.execute(select(func.count()).select_from(objects_objects)).scalar(),
                "recall_documents": conn.execute(select(func.count()).select_from(recall_documents)).scalar(),
                "tower_log_entries": conn.execute(
                    select(func.count()).select_from(tower_entries).where(tower_entries.c.type_name == TOWER_LOG)
                ).scalar(),
            }
        say(f"store: {size}")
        if profile:
            return profile_tool(fns, todo, profile)
        if find_baseline is not None:
            return {"server_data": size, **find_ab(store, todo, find_baseline)}
        _, token = tokens.create(store, ["*"], read_only=True, name=f"bench-{time.time_ns()}")
        with serving(tmp, say) as url:
            cold, mcp = asyncio.run(over_mcp(url, token, warm, todo))
            http = over_http(url, token, scale.calls)
        py = direct(fns, warm, todo)
        tower.close()
    out: dict[str, Any] = {"server_data": size, "server_build_seconds": timing, "server_calls_per_tool": scale.calls}
    for tool in TOOLS:
        key = KEYS[tool]
        for side, lat in (("", mcp), ("_inproc", py), ("_cold", cold)):
            out[f"server_{key}_p50_ms{side}"] = round(statistics.median(lat[tool]), 2)
            out[f"server_{key}_p99_ms{side}"] = round(pct(lat[tool], 0.99), 2)
    # the names for the tower's figures (a day's first page of 100 entries)
    out["tower_recall_p99_ms"] = out["server_tower_recall_p99_ms_inproc"]
    out["tower_recall_p99_ms_mcp"] = out["server_tower_recall_p99_ms"]
    out["server_mcp_floor_p50_ms"] = round(statistics.median(mcp["mem/list_types"]), 2)
    out["server_mcp_floor_p99_ms"] = round(pct(mcp["mem/list_types"], 0.99), 2)
    out["server_http_floor_p50_ms"] = round(statistics.median(http), 2)
    out["server_http_floor_p99_ms"] = round(pct(http, 0.99), 2)
    return out


def find_ab(store: Any, todo: list[Call], baseline: str = "") -> dict[str, Any]:
    """``objects/find`` in process, the world's index against the full scan of its objects (every
    object scored, as find did before the index), alternating call by call (the order swapped every
    call), both sides on the same calls; and with ``baseline`` (a git ref) a third side, the
    ``objects/recall.py`` of that ref loaded from git. Every answer is compared with the scan's."""
    import importlib.util
    import subprocess
    import sys

    from memory_pipeline.objects import recall

    sides: dict[str, Callable[[Call], Any]] = {
        "scan": lambda c: recall.find(store, **c.args, full_scan=True),
        "index": lambda c: recall.find(store, **c.args),
    }
    if baseline:
        source = subprocess.run(
            ["git", "show", f"{baseline}:memory_pipeline/objects/recall.py"],
            cwd=Path(__file__).parent,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        spec = importlib.util.spec_from_loader("recall_baseline", loader=None)
        assert spec is not None
        old = importlib.util.module_from_spec(spec)
        sys.modules["recall_baseline"] = old
        exec(compile(source, f"{baseline}:recall.py", "exec"), old.__dict__)
        sides["baseline"] = lambda c: old.find(store, **c.args)
    mine = [c for c in todo if c.tool == "objects/find"]
    for c in mine[:30]:  # warm: each world's objects read once per side
        for fn in sides.values():
            fn(c)
    lat: dict[str, list[float]] = {k: [] for k in sides}
    differ, hits = 0, []
    names = list(sides)
    for n, c in enumerate(mine):
        answers = {}
        for side in names[n % len(names) :] + names[: n % len(names)]:
            t = time.perf_counter()
            answers[side] = sides[side](c)
            lat[side].append((time.perf_counter() - t) * 1000)
        differ += any(a != answers["scan"] for a in answers.values())
        hits.append(len(recall.find_all(store, c.args["world"], c.args["query"])))
    out: dict[str, Any] = {"find_ab_calls": len(mine), "find_ab_answers_differ": differ}
    out["find_ab_matches_p50"] = statistics.median(hits)
    out["find_ab_matches_max"] = max(hits)
    for side, values in lat.items():
        out[f"find_ab_{side}_p50_ms"] = round(statistics.median(values), 2)
        out[f"find_ab_{side}_p99_ms"] = round(pct(values, 0.99), 2)
    return out


def profile_tool(fns: dict[str, Callable[..., Any]], todo: list[Call], tool: str) -> dict[str, Any]:
    import cProfile
    import pstats

    mine = [c for c in todo if c.tool == tool]
    prof = cProfile.Profile()
    prof.enable()
    for c in mine:
        fns[c.tool](**c.args)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
    return {}


def rows(out: dict[str, Any]) -> list[tuple[str, str, str]]:
    size = out["server_data"]
    lines = [
        (
            "memory server data (embedded default: SQLite, in-process cache)",
            f"{size['messages']:,} messages, {size['day_month_year_rows']:,} day/month/year rows, "
            f"{size['sleep_facts']:,} sleep facts, {size['objects']:,} objects, {size['recall_documents']:,} recall documents, "
            f"{size['tower_log_entries']:,} tower log entries",
            "",
        )
    ]
    for tool in TOOLS:
        key = KEYS[tool]
        lines.append(
            (
                f"{tool}, {out['server_calls_per_tool']:,} varied calls",
                f"MCP p50 {out[f'server_{key}_p50_ms']:.2f} ms, p99 {out[f'server_{key}_p99_ms']:.2f} ms; "
                f"in process p50 {out[f'server_{key}_p50_ms_inproc']:.2f} ms, p99 {out[f'server_{key}_p99_ms_inproc']:.2f} ms; "
                f"MCP, the first calls after start (other queries) p50 {out[f'server_{key}_p50_ms_cold']:.2f} ms, "
                f"p99 {out[f'server_{key}_p99_ms_cold']:.2f} ms",
                "target p99 <= 20 ms over MCP" + (", <= 5 ms in process" if tool == "mem/recall" else ""),
            )
        )
    lines.append(
        (
            "MCP floor: mem/list_types over the same session",
            f"p50 {out['server_mcp_floor_p50_ms']:.2f} ms, p99 {out['server_mcp_floor_p99_ms']:.2f} ms",
            "",
        )
    )
    lines.append(
        (
            f"the server's floor: mem/list_types as plain JSON-RPC POSTs, {out['server_calls_per_tool']:,} calls",
            f"p50 {out['server_http_floor_p50_ms']:.2f} ms, p99 {out['server_http_floor_p99_ms']:.2f} ms",
            "",
        )
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", choices=sorted(SCALES), default="quick")
    parser.add_argument("--calls", type=int, help="calls per tool and side (default: the scale's)")
    parser.add_argument("--profile", choices=TOOLS, help="cProfile one tool's in-process calls instead")
    parser.add_argument(
        "--find-ab",
        nargs="?",
        const="",
        metavar="REF",
        help="objects/find in process only: the index against the full scan, alternating (and the recall.py of REF)",
    )
    parser.add_argument("--keep", default="", help="build the store in this folder, or reuse the one built there")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    if args.calls:
        from dataclasses import replace

        scale = replace(scale, calls=args.calls)
    out = measure(scale, profile=args.profile or "", keep=args.keep, find_baseline=args.find_ab)
    if args.find_ab is not None:
        print(json.dumps(out, indent=2))
    elif out:
        print(json.dumps(out, indent=2))
        for r in rows(out):
            print(" | ".join(r))


if __name__ == "__main__":
    main()
