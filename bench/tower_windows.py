"""Seed 004 benchmark: structural windows over 1M entries (all levels), the open day's refresh after
1k new entries, and the LLM calls of a bottom-up week summary (offline model) on PostgreSQL.

Usage: python bench/tower_windows.py   (BENCH_DATABASE_URL: default the local `test` database;
a fresh schema, dropped at the end; TOWER_BENCH_ENTRIES: default 1,000,000)."""

from __future__ import annotations

import os
import time
import uuid
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import create_engine, func, select, text

from memory_pipeline import domains
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.tower import windows
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.logic import Granularity, WindowQuery

TZ = ZoneInfo("Asia/Shanghai")
BASE = os.environ.get("BENCH_DATABASE_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
N = int(os.environ.get("TOWER_BENCH_ENTRIES", "1000000"))
DAYS = 100
FIRST = date(2025, 3, 3)  # a Monday


def main() -> None:
    schema = f"bench_tower_{uuid.uuid4().hex[:8]}"
    admin = create_engine(BASE)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        store = Store(f"{BASE}?options=-csearch_path%3D{schema}")
        ensure_schema(store, domains.version_locations())
        run(store)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))


def run(store: Store) -> None:
    tower = Tower(store, TowerConfig(), TZ, lambda p: LLMClient(store, asset="bench", partition=p), run_jobs="inline")
    tower.create_type("bench/stream", group_field="world")  # 10min → 30min → 1h → day → week
    per_day = N // DAYS
    step = 86_400 / per_day
    t0 = time.perf_counter()
    for d in range(DAYS):
        day = FIRST + timedelta(days=d)
        start = datetime(day.year, day.month, day.day, tzinfo=TZ)
        batch = [
            {
                "content": f"step {i} of the job",
                "at": (start + timedelta(seconds=i * step)).isoformat(),
                "group": f"w{i % 10}",
                "id": f"{d}-{i}",
            }
            for i in range(per_day)
        ]
        for k in range(0, len(batch), 10_000):
            tower.append("bench/stream", batch[k : k + 10_000])
    appended = time.perf_counter() - t0
    print(
        f"append (validated, batched, one transaction per call): {N:,} entries in {appended:.1f}s = {N / appended:,.0f}/s"
    )

    t0 = time.perf_counter()
    made = 0
    for d in range(DAYS):
        made += windows.build_day(store, FIRST + timedelta(days=d), TZ).windows
    days_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    for w in range(0, DAYS, 7):
        made += windows.build_coarse(store, Granularity.WEEK, FIRST + timedelta(days=w), TZ).windows
    weeks_s = time.perf_counter() - t1
    total = days_s + weeks_s
    print(
        f"structural windows, all levels (10min, 30min, 1h, day, week): {made:,} windows over {N:,} entries in "
        f"{total:.1f}s = {N / total:,.0f} entries/s (days {days_s:.1f}s, weeks {weeks_s:.1f}s)"
    )

    open_day = FIRST + timedelta(days=DAYS - 1)
    start = datetime(open_day.year, open_day.month, open_day.day, 12, tzinfo=TZ)
    tower.append(
        "bench/stream",
        [
            {"content": f"new {i}", "at": (start + timedelta(seconds=i)).isoformat(), "group": "w1", "id": f"new-{i}"}
            for i in range(1000)
        ],
    )
    t0 = time.perf_counter()
    windows.build_day(store, open_day, TZ)
    print(
        f"refresh of one day ({per_day + 1000:,} entries) after 1k new entries: {(time.perf_counter() - t0) * 1000:.0f} ms"
    )

    tower.create_type("bench/log", chain=["1h", "day", "week"], summaries=True, group_field="project")
    entries = [
        {
            "content": f"{p}: decided step {d}.{h}",
            "at": datetime(2025, 3, 3 + d, 9 + h, tzinfo=TZ).isoformat(),
            "group": p,
        }
        for p in ("a", "b", "c")
        for d in range(7)
        for h in range(3)
        if not (p == "c" and d >= 4)
    ]
    tower.append("bench/log", entries)
    tower.summarize("bench/log", WindowQuery.parse("day", "2025-03-03", group="a"))
    tower.summarize("bench/log", WindowQuery.parse("day", "2025-03-04", group="a"))

    def calls() -> int:
        with store.connect() as conn:
            return conn.execute(
                select(func.count()).select_from(llm_ledger).where(llm_ledger.c.outcome == "ok")
            ).scalar_one()

    before = calls()
    tower.summarize("bench/log", WindowQuery.parse("week", "2025-03-03"))
    first = calls() - before
    expected = (5 + 1) + (7 + 1) + (4 + 1)  # Σ groups (children with entries but no summary + 1)
    tower.summarize("bench/log", WindowQuery.parse("week", "2025-03-03"))
    print(
        f"bottom-up week summary, 3 groups: {first} LLM calls (expected Σ(children without summary + 1) = {expected}), "
        f"second run: {calls() - before - first}"
    )


if __name__ == "__main__":
    main()
