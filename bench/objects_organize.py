"""Seed 001 speed: organize 10k pending events with the offline model on PostgreSQL.

Generates N events (default 10,000) over 10 worlds, ingests them into a fresh schema of
BENCH_DATABASE_URL (default the local `test` database), brings them into the hot timeline and
compacts it explicitly (so every event is pending), then organizes them all and reports events per
second, model calls per event, the `continue` outcomes and the batches without progress as the
worker counted them (claimed batches that committed nothing new: failed claims and replayed
receipts; target 0). Some events are longer than a page (8,000 characters), so `continue`
outcomes occur."""

from __future__ import annotations

import argparse
import json
import os
import random
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from zoneinfo import ZoneInfo

from sqlalchemy import create_engine, func, select, text

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from memory_pipeline import domains  # noqa: E402
from memory_pipeline.events.ingest import event_line, ingest_file  # noqa: E402
from memory_pipeline.lib.llm import LLMClient  # noqa: E402
from memory_pipeline.lib.store import Store  # noqa: E402
from memory_pipeline.lib.store.migrate import ensure_schema  # noqa: E402
from memory_pipeline.objects import timeline, worker  # noqa: E402
from memory_pipeline.objects.config import ObjectsConfig  # noqa: E402
from memory_pipeline.objects.context import ObjectsContext  # noqa: E402
from memory_pipeline.objects.tables import objects_receipts  # noqa: E402

PG = os.environ.get("BENCH_DATABASE_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
TOPICS = ["garden", "tomatoes", "deploy", "database", "marathon", "pacing", "compost", "latency", "invoice", "harbor"]


def generate(path: Path, n: int, worlds: int) -> None:
    rng = random.Random(1)
    zone = ZoneInfo("Asia/Shanghai")
    start = datetime(2025, 3, 1, 8, tzinfo=zone)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            w = f"bench-{i % worlds}"
            words = rng.choices(TOPICS, k=rng.randint(5, 40))
            body = " ".join(words)
            if i % 200 == 0:  # a long event (about 20,000 characters): several pages
                body = ((body + " ") * 600)[:20_000]
            at = start + timedelta(minutes=i)
            fh.write(json.dumps(event_line(f"b{i:06d}", w, f"{w}-c{i // 50}", "user", body, at)) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--worlds", type=int, default=10)
    args = parser.parse_args()
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        store = Store(f"{PG}?options=-csearch_path%3D{schema}")
        ensure_schema(store, domains.version_locations())
        with TemporaryDirectory() as tmp:
            path = Path(tmp) / "events.jsonl"
            generate(path, args.events, args.worlds)
            ingest_file(store, path)
        octx = ObjectsContext(store, LLMClient(store, asset="bench"), ObjectsConfig(retry_backoff_seconds=0))
        t = time.perf_counter()
        timeline.intake(octx)
        for w in range(args.worlds):
            worker.enqueue(octx, f"bench-{w}", "compact")
        comp = worker.run_worker(octx)
        t_compact = time.perf_counter() - t
        pending = sum(worker.pending_counts(octx).values())
        print(
            f"hot timeline + explicit compaction: {comp.committed} batches, {pending} pending events in {t_compact:.1f}s"
        )
        t = time.perf_counter()
        worker.enqueue_hourly(octx)
        rep = worker.run_worker(octx)
        secs = time.perf_counter() - t
        with store.connect() as conn:
            continues = conn.execute(select(func.count()).where(objects_receipts.c.outcome == "continue")).scalar()
        print(
            f"organize: {pending} events in {secs:.1f}s = {pending / secs:,.1f} events/s; "
            f"{rep.model_calls} model calls = {rep.model_calls / max(1, pending):.3f} per event; "
            f"outcomes {rep.outcomes}; continue {continues}; batches without progress {rep.zero_progress_batches} "
            f"(failed claims {rep.failures}, corrections {rep.corrections})"
        )
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))


if __name__ == "__main__":
    main()
