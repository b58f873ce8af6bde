"""1,000 worlds against 100 for sleep, objects and the analyst export: the same messages per world
(bench/run.py's ``generate_worlds``), so 10x the data; linear is 10x.

Each (domain, size) runs in a process of its own, so its peak RSS is its own: the process ingests
the file into a fresh PostgreSQL schema (untimed), resets its RSS high-water mark (Linux's
``/proc/self/clear_refs``), runs the domain and prints one JSON line with the seconds and the peak
RSS of that part alone:

- ``sleep``: the nights of the span in one range run of the nights job
  (``operations.materialize("sleep", ...)``, a fresh SQLite instance), as a catch-up runs them;
- ``objects``: the hot timeline's intake and an explicit compaction of every world (untimed), then
  organizing every pending event with the offline model (``worker.run_worker``);
- ``export``: the day summaries of the span (untimed), then the range export of its days
  (``operations.materialize("exports", ...)``, marts left out) into a DuckDB file of its own.

    python bench/worlds_scale.py --domain sleep --worlds 100 --days 2 --per-day 4

bench/run.py's ``worlds`` stage runs each domain at both sizes and writes the ratios to latest.json
(``worlds_1000_vs_100_<domain>``, ``worlds_1000_vs_100_<domain>_peak_rss``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402

DOMAINS = ("sleep", "objects", "export")
FIRST = date(bench.YEAR, 3, 1)  # generate_worlds' first day


def status_mb(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS: resident now; VmHWM: its high-water mark since
    the last reset), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss() -> float:
    """Reset the high-water mark to the resident size now (written 5 to clear_refs); that size."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_mb("VmRSS")


def measure(domain: str, worlds: int, days: int, per_day: int) -> dict[str, float | int]:
    from memory_pipeline.events.ingest import ingest_file
    from memory_pipeline.lib.llm import offline

    offline.key_sentences([("user", "warm up the language data.")])  # loaded once per process, untimed
    last = (FIRST + timedelta(days=days - 1)).isoformat()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "worlds.jsonl")
        messages = bench.generate_worlds(path, worlds, days, per_day)
        store = bench.fresh_store("bench_ws")
        try:
            ingest_file(store, path)
            home = Path(tmp, "dagster")
            home.mkdir()
            os.environ["MEMORY_DUCKDB_PATH"] = str(Path(tmp, "out", "analytics.duckdb"))
            with bench.data_dir(str(Path(tmp, "data"))), bench.sqlite_instance(str(home)) as inst:
                defs = bench.defs_for(store)
                if domain == "export":
                    bench.backfill(defs, inst, [("day", FIRST.isoformat(), last)])
                base = reset_peak_rss()
                started = time.perf_counter()
                if domain == "sleep":
                    bench.backfill(defs, inst, [("sleep", FIRST.isoformat(), last)])
                elif domain == "export":
                    bench.backfill(defs, inst, [("exports", FIRST.isoformat(), last)], mode="rebuild")
                else:
                    base, started = organize(store, worlds)
                seconds = time.perf_counter() - started
                peak = status_mb("VmHWM")
        finally:
            bench.drop_schemas()
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak, 1),
        "rss_before_mb": round(base, 1),  # the process at the start (interpreter, Dagster, the definitions)
        "messages": messages,
    }


def organize(store, worlds: int) -> tuple[float, float]:
    """Intake and compaction of every world (untimed), then organizing every pending event: the
    resident size before it and the clock's start."""
    from memory_pipeline.lib.llm import LLMClient
    from memory_pipeline.objects import timeline, worker
    from memory_pipeline.objects.config import ObjectsConfig
    from memory_pipeline.objects.context import ObjectsContext

    octx = ObjectsContext(store, LLMClient(store, asset="bench"), ObjectsConfig(retry_backoff_seconds=0))
    timeline.intake(octx)
    for w in range(worlds):
        worker.enqueue(octx, f"wx{w}", "compact")
    worker.run_worker(octx)
    worker.enqueue_hourly(octx)
    pending = sum(worker.pending_counts(octx).values())
    if not pending:
        raise RuntimeError("no pending events to organize after the compaction")
    base = reset_peak_rss()
    started = time.perf_counter()
    report = worker.run_worker(octx)
    if not report.ok:
        raise RuntimeError(f"organize failed: {report}")
    return base, started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", choices=DOMAINS, required=True)
    parser.add_argument("--worlds", type=int, required=True)
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--per-day", type=int, default=4)
    args = parser.parse_args()
    print(
        json.dumps(
            {"domain": args.domain, "worlds": args.worlds, **measure(args.domain, args.worlds, args.days, args.per_day)}
        )
    )


if __name__ == "__main__":
    main()
