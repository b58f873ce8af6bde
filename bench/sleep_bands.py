"""Sleep (seed 003) benchmark: deep sleep at message-1 sizes in each band (about 8k, 60k and 250k
characters, the last batched by type) plus one above 300k that must be refused; per round: input
characters, model calls and whether message 1 was byte-identical. Then light sleep over a day of
10k messages, with the truncated session count. Offline model, PostgreSQL (a fresh schema in
BENCH_DATABASE_URL, default the local `test` database). Measured, never asserted."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from sqlalchemy import create_engine, text

from memory_pipeline import domains
from memory_pipeline.events.ingest import event_line, ingest_file
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.sleep.config import SleepConfig
from memory_pipeline.sleep.context import SleepContext
from memory_pipeline.sleep.deep import run_deep_sleep
from memory_pipeline.sleep.light import run_light_sleep
from memory_pipeline.sleep.logic import CREATE, LIGHT_TOOLS, MemoryState, Rules, Stage, message_one
from memory_pipeline.sleep.memory import Provenance, load_active, write_changes

CST = ZoneInfo("Asia/Shanghai")
URL = os.environ.get("BENCH_DATABASE_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
DAY = date(2026, 3, 2)
TYPES = ("world", "experience", "imprint", "preference")


def fresh_store() -> tuple[Store, str]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with create_engine(URL).begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    store = Store(f"{URL}?options=-csearch_path%3D{schema}")
    ensure_schema(store, domains.version_locations())
    return store, schema


def drop(schema: str) -> None:
    with create_engine(URL).begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))


def seed_memories(store: Store, target_chars: int) -> int:
    """Distinct memories (every 7th a near-duplicate, every 11th two facts) until message 1 reaches
    about ``target_chars``."""
    state = MemoryState("w1", [], "bench")
    rules = Rules(Stage.LIGHT, LIGHT_TOOLS, datetime(2026, 3, 2, tzinfo=UTC))
    i = 0
    while len(message_one(state.active(), CST)) < target_chars:
        content = f"fact number {i} about topic {i % 97} with some detail words"
        if i % 7 == 6:
            content = f"fact number {i - 1} about topic {(i - 1) % 97} with some detail words"
        if i % 11 == 10:
            content += "； and a second independent fact"
        call = {
            "id": str(i),
            "name": CREATE,
            "arguments": {"type": TYPES[i % 4], "content": content, "source_sessions": [f"s-{i}"]},
        }
        state.apply(call, rules)
        i += 1
    with store.begin() as conn:
        write_changes(conn, state.changes, Provenance(Stage.LIGHT, DAY))
        conn.execute(
            text(
                "INSERT INTO sleep_runs (stage, day, world_id, status, sessions, sessions_truncated, input_chars, "
                "llm_calls, tool_calls, applied, rejected, created, detail, finished_at) VALUES "
                "('light_sleep', :d, '*', 'done', 0, 0, 0, 0, 0, 0, 0, 0, '{}', now())"
            ),
            {"d": DAY},
        )
    return len(state.changes)


def deep_band(target: int) -> None:
    store, schema = fresh_store()
    try:
        n = seed_memories(store, target)
        with store.connect() as conn:
            chars = len(message_one(load_active(conn, ["w1"])["w1"], CST))
        with tempfile.TemporaryDirectory() as logs:
            ctx = SleepContext(store, LLMClient(store), SleepConfig(log_dir=logs), CST)
            started = time.monotonic()
            result = run_deep_sleep(ctx, DAY)
            if "w1" in result.refused:
                print(
                    f"message 1 {chars:>7} chars ({n} memories): REFUSED before any call ({ctx.llm.stats.calls} calls): "
                    f"{result.refused['w1']}"
                )
                return
            seconds = time.monotonic() - started
        recs = result.rounds["w1"]
        identical = all(
            len({r.message_one_sha for r in recs if r.batch_type == b}) == 1 for b in {r.batch_type for r in recs}
        )
        batches = sorted({r.batch_type or "-" for r in recs})
        print(
            f"message 1 {chars:>7} chars ({n} memories), batches {batches}: {seconds:.1f}s, "
            f"{result.llm_calls} calls, {result.changes} changes; message 1 byte-identical across rounds: {identical}"
        )
        for r in recs:
            print(
                f"   round {r.round_index} {r.round:<13} batch {r.batch_type or '-':<10} input {r.input_chars:>7} chars, "
                f"{r.llm_calls} call(s), {r.tool_calls} tool calls, {r.applied} applied"
            )
    finally:
        drop(schema)


def light_day(messages: int = 10_000) -> None:
    store, schema = fresh_store()
    try:
        tz = CST
        lines = []
        for i in range(messages):
            session = f"s-{i // 20}"
            at = datetime(2026, 3, 2, 0, 0, tzinfo=tz) + timedelta(seconds=8 * i)
            role = "user" if i % 2 == 0 else "assistant"
            lines.append(
                event_line(f"m-{i}", "w1", session, role, f"message {i} about garden tomatoes and compost {i % 13}", at)
            )
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "day.jsonl"
            path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
            ingest_file(store, path)
        ctx = SleepContext(store, LLMClient(store), SleepConfig(), CST)
        started = time.monotonic()
        result = run_light_sleep(ctx, DAY)
        seconds = time.monotonic() - started
        print(
            f"light sleep, {messages} messages in {messages // 20} sessions: {seconds:.1f}s, {result.sessions} sessions "
            f"sent, {result.sessions_truncated} truncated ([已截断 N 个 session]), {result.llm_calls} calls, "
            f"{result.created} memories created"
        )
        again = time.monotonic()
        run_light_sleep(ctx, DAY)
        print(f"light sleep again (unchanged day, reused): {time.monotonic() - again:.1f}s")
    finally:
        drop(schema)


def main() -> int:
    for target in (8_000, 60_000, 250_000, 320_000):
        deep_band(target)
    light_day()
    return 0


if __name__ == "__main__":
    sys.exit(main())
