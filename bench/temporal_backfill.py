"""Year backfill benchmark (seed 000) on PostgreSQL.

Generates >= 100k messages over 2025 for 10 worlds, ingests them, then backfills the full year
(365 day + 12 month + 1 year partitions) with the offline model twice in this one process, on two
fresh schemas: once with the project's policy (one run per range) and once with one run per
partition, so the ratio holds on this shared machine. Then re-materializes the unchanged range to
count the LLM calls it costs (target 0), and once more with force_llm.

    make bench        # or: .venv/bin/python bench/temporal_backfill.py [--messages 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import warnings  # noqa: E402

warnings.filterwarnings("ignore")

from sqlalchemy import create_engine, func, select, text  # noqa: E402

PG = os.environ.get("BENCH_DATABASE_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
YEAR = 2025
WORLDS = 10
TOPICS = [
    "garden",
    "deploy",
    "marathon",
    "database",
    "tomatoes",
    "invoice",
    "travel",
    "piano",
    "kitchen",
    "reading",
    "budget",
    "compost",
    "migration",
    "latency",
    "recipe",
    "harvest",
    "training",
    "concert",
    "library",
    "hiking",
]


def generate(path: Path, n_messages: int, seed: int = 11) -> int:
    from memory_pipeline.events.ingest import event_line

    rng = random.Random(seed)
    tz = ZoneInfo("Asia/Shanghai")
    days = [date(YEAR, 1, 1) + timedelta(days=i) for i in range(365)]
    per_world_day = max(2, -(-n_messages // int(WORLDS * len(days) * 0.9)))  # ~10% of days are quiet
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for w in range(WORLDS):
            for d in days:
                if rng.random() < 0.1:  # quiet days: no_sessions placeholders
                    continue
                at = datetime(d.year, d.month, d.day, 8, 0, tzinfo=tz)
                platforms = [rng.choice(["local", "discord", "weixin"]) for _ in range(2)]
                for i in range(per_world_day):
                    conv = f"bw{w}-{d:%Y%m%d}-{i % 2}"
                    at += timedelta(minutes=rng.randint(1, 20))
                    a, b = rng.sample(TOPICS, 2)
                    line = event_line(
                        f"b-{w}-{d:%Y%m%d}-{i}",
                        f"bench-w{w}",
                        conv,
                        "user" if i // 2 % 2 == 0 else "assistant",
                        f"Talking about {a} and {b}, item {i}.",
                        at,
                        platform=platforms[i % 2],
                    )
                    fh.write(json.dumps(line) + "\n")
                    n += 1
    return n


def fresh_schema() -> str:
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with create_engine(PG).begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    return schema


def drop_schema(schema: str) -> None:
    from memory_pipeline.lib.store import make_engine

    make_engine(url(schema)).dispose()
    with create_engine(PG).begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))


def url(schema: str) -> str:
    return f"{PG}?options=-csearch_path%3D{schema}"


def backfill(defs, instance, per_partition: bool, force_llm: bool = False) -> float:
    from memory_pipeline import operations

    started = time.perf_counter()
    for window, lo, hi in (
        ("day", f"{YEAR}-01-01", f"{YEAR}-12-31"),
        ("month", f"{YEAR}-01", f"{YEAR}-12"),
        ("year", str(YEAR), str(YEAR)),
    ):
        report = operations.materialize(
            window, lo, hi, per_partition=per_partition, force_llm=force_llm, instance=instance, defs=defs
        )
        if not report.success:
            sys.exit(f"{window} backfill failed: {report.runs[0].error}")
    return time.perf_counter() - started


def ok_calls(store) -> int:
    from memory_pipeline.lib.store.tables import llm_ledger

    with store.connect() as conn:
        return conn.execute(
            select(func.count()).select_from(llm_ledger).where(llm_ledger.c.outcome == "ok")
        ).scalar_one()


def non_empty_pairs(store) -> int:
    from memory_pipeline.temporal.tables import temporal_summaries

    with store.connect() as conn:
        return conn.execute(
            select(func.count()).select_from(temporal_summaries).where(temporal_summaries.c.empty_reason.is_(None))
        ).scalar_one()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()

    from dagster import DagsterInstance

    from memory_pipeline import domains
    from memory_pipeline.definitions import build_defs
    from memory_pipeline.events.ingest import ingest_file
    from memory_pipeline.lib.store import Store
    from memory_pipeline.lib.store.migrate import ensure_schema
    from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource

    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    events = out / "events.jsonl"
    n = generate(events, args.messages)
    print(f"generated {n} messages over {YEAR} for {WORLDS} worlds")

    schemas = [fresh_schema(), fresh_schema()]
    try:
        stores = [Store(url(s)) for s in schemas]
        for store in stores:
            ensure_schema(store, domains.version_locations())
        t = time.perf_counter()
        report = ingest_file(stores[0], events)
        ingest_s = time.perf_counter() - t
        print(f"ingest: {report.inserted} messages in {ingest_s:.1f}s = {report.inserted / ingest_s:,.0f} messages/s")
        t = time.perf_counter()
        ingest_file(stores[0], events)
        print(f"re-ingest of the same file (idempotent, 0 inserted): {time.perf_counter() - t:.1f}s")
        ingest_file(stores[1], events)

        def defs_for(schema):
            return build_defs(
                {
                    "memory_store": MemoryStoreResource(database_url=url(schema)),
                    "kv_cache": CacheResource(redis_url=""),
                    "llm": LLMResource(),
                    "memory_config": MemoryConfigResource(),
                }
            )

        from memory_pipeline.operations import INSTANCE_YAML

        with tempfile.TemporaryDirectory() as home_a, tempfile.TemporaryDirectory() as home_b:
            for home in (home_a, home_b):
                Path(home, "dagster.yaml").write_text(INSTANCE_YAML)  # SQLite instance, as the embedded default
            os.environ["DAGSTER_HOME"] = home_a
            with DagsterInstance.get() as inst:
                single = backfill(defs_for(schemas[0]), inst, per_partition=False)
                calls = ok_calls(stores[0])
                pairs = non_empty_pairs(stores[0])
                second = backfill(defs_for(schemas[0]), inst, per_partition=False)
                second_calls = ok_calls(stores[0]) - calls
                forced = backfill(defs_for(schemas[0]), inst, per_partition=False, force_llm=True)
                forced_calls = ok_calls(stores[0]) - calls - second_calls
            os.environ["DAGSTER_HOME"] = home_b
            with DagsterInstance.get() as inst:
                per = backfill(defs_for(schemas[1]), inst, per_partition=True)
        print(f"backfill 365 days + 12 months + 1 year, one run per range (project policy): {single:.1f}s (3 runs)")
        print(f"backfill, one run per partition:                                          {per:.1f}s (378 runs)")
        print(f"ratio per-partition / per-range: {per / single:.1f}x")
        print(f"LLM calls issued: {calls} for {pairs} non-empty (window, world) pairs")
        print(f"immediate second materialization of the unchanged range: {second_calls} LLM calls, {second:.1f}s")
        print(f"the same with force_llm: {forced_calls} LLM calls, {forced:.1f}s")
    finally:
        for s in schemas:
            drop_schema(s)
        from memory_pipeline.lib.store import make_engine

        make_engine.cache_clear()


if __name__ == "__main__":
    main()
