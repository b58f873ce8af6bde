"""Light and deep sleep of one night over many worlds, asking the model about 1, 4 and 8 worlds at
once (``memory.sleep.worlds_at_once``), each setting in a fresh PostgreSQL schema holding the same
messages (bench/run.py's ``generate_worlds``). ``--model-latency-ms L``: every offline model call
waits L ms first, as a provider's answer does (objects_organize.py's wait); with the offline model
alone the run is bound by one process's CPU, the worst case for threads. The rows written
(memories with their ids, snapshots, state records) are compared with the first setting's.

    python bench/sleep_worlds_at_once.py --worlds 40 --per-day 6 --model-latency-ms 50

Measured, never asserted; prints one line per setting and a JSON line with them all."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402
from objects_organize import _model_latency  # noqa: E402

from memory_pipeline.events.ingest import ingest_file  # noqa: E402
from memory_pipeline.lib.llm import LLMClient, offline  # noqa: E402
from memory_pipeline.sleep.config import SleepConfig  # noqa: E402
from memory_pipeline.sleep.context import SleepContext  # noqa: E402
from memory_pipeline.sleep.deep import run_deep_sleep  # noqa: E402
from memory_pipeline.sleep.light import run_light_sleep  # noqa: E402
from memory_pipeline.sleep.tables import semantic_memories, semantic_memory_snapshots, sleep_runs  # noqa: E402

DAY = date(bench.YEAR, 3, 1)  # generate_worlds' first day


def rows(store) -> tuple[list[tuple], list[tuple], list[tuple]]:
    m, s, r = semantic_memories.c, semantic_memory_snapshots.c, sleep_runs.c
    with store.connect() as conn:
        memories = conn.execute(
            select(m.world_id, m.memory_id, m.content, m.status).order_by(m.world_id, m.memory_id)
        ).all()
        snaps = conn.execute(select(s.world_id, s.memory_id).order_by(s.world_id, s.memory_id)).all()
        records = conn.execute(select(r.stage, r.world_id, r.status).order_by(r.stage, r.world_id)).all()
    return [tuple(x) for x in memories], [tuple(x) for x in snaps], [tuple(x) for x in records]


def night(path: Path, at_once: int, log_dir: str) -> tuple[float, int, tuple]:
    store = bench.fresh_store("bench_sleep_at_once")
    ingest_file(store, path)
    cfg = SleepConfig(worlds_at_once=at_once, log_dir=log_dir).validate()
    ctx = SleepContext(store, LLMClient(store, asset="bench"), cfg, bench.TZ)
    started = time.perf_counter()
    light = run_light_sleep(ctx, DAY)
    deep = run_deep_sleep(ctx, DAY)
    seconds = time.perf_counter() - started
    return seconds, light.llm_calls + deep.llm_calls, rows(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worlds", type=int, default=40)
    parser.add_argument("--per-day", type=int, default=6)
    parser.add_argument("--model-latency-ms", type=float, default=0.0)
    parser.add_argument("--settings", default="1,4,8", help="worlds_at_once values, in the order run")
    args = parser.parse_args()
    offline.key_sentences([("user", "warm up the language data.")])  # loaded once per process, untimed
    if args.model_latency_ms:
        _model_latency(args.model_latency_ms)
    out: dict[str, dict[str, float | int | bool]] = {}
    first = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp, "night.jsonl")
            messages = bench.generate_worlds(path, args.worlds, 1, args.per_day)
            for n in (int(x) for x in args.settings.split(",")):
                seconds, calls, written = night(path, n, str(Path(tmp, f"logs-{n}")))
                first = first or written
                same = written == first
                out[str(n)] = {"seconds": round(seconds, 2), "llm_calls": calls, "rows_identical": same}
                print(
                    f"worlds_at_once {n}: {args.worlds} worlds ({messages} messages), light + deep sleep "
                    f"{seconds:.2f} s, {calls} model calls, rows {'identical' if same else 'DIFFER'}",
                    flush=True,
                )
    finally:
        bench.drop_schemas()
    print(json.dumps({"worlds": args.worlds, "model_latency_ms": args.model_latency_ms, "settings": out}))


if __name__ == "__main__":
    main()
