"""Analyst export benchmark: seconds per CST day of a range export, for a 1-day and a 30-day range,
on the embedded default (a SQLite store and a SQLite Dagster instance in a temporary folder).

Two measurements, the two sides of each alternating so both see the same machine:

- ``core``: ``exports.export_tables`` of every day-grain table for the range (the private copy,
  the store query per table, the DuckDB writes, the Parquet files, the atomic swap), no Dagster;
  "before" (the per-day Parquet writer: one COPY per table and day, kept below as the baseline)
  against "after" (the project's writer: one COPY per table for the range, partitioned by day).
- ``runs``: ``operations.materialize("exports", ...)``, the run ``memory-pipeline export --no-marts``
  starts first (the day exports for the range and the whole tables), in-process, on two SQLite
  instances over the same store: "stock" (the dagster.yaml the CLI wrote before, Dagster's own
  SqliteEventLogStorage, DAGSTER_EVENT_BATCH_SIZE unset) and "batch" (the CLI's dagster.yaml
  today: BatchSqliteEventLogStorage, DAGSTER_EVENT_BATCH_SIZE=1000); per day partition, with the
  Dagster events each run stored.

Usage: python bench/export_days.py [--days 30] [--repeat 3] [--skip-runs]
Prints a Markdown table and writes bench/results/export_days.json (keys: ``export_seconds_per_day``
and the rest, see the README)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

TZ = ZoneInfo("Asia/Shanghai")
FIRST = date(2026, 6, 1)
WORLDS = 5
MESSAGES_PER_DAY = 20
RESULTS = Path(__file__).parent / "results" / "export_days.json"


def _setup(folder: Path, days: int) -> None:
    """Environment of the embedded default, then one file of messages over ``days`` days, ingested."""
    os.environ["MEMORY_DATA_DIR"] = str(folder / "data")
    os.environ["DAGSTER_HOME"] = str(folder / "dagster_home")
    os.environ["MEMORY_DUCKDB_PATH"] = str(folder / "out" / "analytics.duckdb")
    os.environ.pop("MEMORY_DATABASE_URL", None)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    (folder / "data").mkdir()
    (folder / "dagster_home").mkdir()
    from memory_pipeline.events.ingest import event_line, ingest_file
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.store import Store

    lines = []
    for d in range(days):
        day = FIRST + timedelta(days=d)
        for w in range(WORLDS):
            for i in range(MESSAGES_PER_DAY):
                at = datetime(day.year, day.month, day.day, 9, i, tzinfo=TZ)
                role = "user" if i % 2 == 0 else "assistant"
                lines.append(event_line(f"m{w}-{d}-{i}", f"w{w}", f"c{w}-{d}", role, f"day {d} message {i}", at))
    path = folder / "events.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store = Store(settings.database_url())
    from memory_pipeline import domains
    from memory_pipeline.lib.store.migrate import ensure_schema

    ensure_schema(store, domains.version_locations())
    ingest_file(store, path)


def _write_parquet_per_day(con: Any, files: Any, export: Any, days: list[date] | None) -> int:
    """The baseline: the writer before the partitioned COPY (one COPY and one rename per day)."""
    from memory_pipeline.analyst import exports, logic
    from memory_pipeline.analyst.registry import DAY

    name = logic.quote(export.name)

    def copy(where: str, params: list[Any], target: Path) -> None:
        def write(tmp: Path) -> None:
            con.execute(
                f"COPY (SELECT * FROM {name} {where}) TO {logic.sql_string(str(tmp))} "
                "(FORMAT parquet, COMPRESSION zstd)",
                params,
            )

        exports.replace_file(files, write, target)

    if days is None:
        copy("", [], logic.parquet_file(files.parquet, export.name, None))
        return 1
    with_rows = {
        r[0]
        for r in con.execute(
            f"SELECT DISTINCT {DAY} FROM {name} WHERE {DAY} BETWEEN ? AND ?", [days[0], days[-1]]
        ).fetchall()
    }
    written = 0
    for day in days:
        target = logic.parquet_file(files.parquet, export.name, day)
        if day in with_rows or target.exists():
            copy(f"WHERE {DAY} = ?", [day], target)
            written += 1
    return written


def _variant(name: str) -> Callable[[], None]:
    """Install the Parquet writer of ``name`` ("before" or "after") into the export core."""
    from memory_pipeline.analyst import exports

    current = exports._write_parquet

    def install() -> None:
        exports._write_parquet = _write_parquet_per_day if name == "before" else current  # type: ignore[assignment]

    return install


def _core(days: int) -> tuple[float, int]:
    from memory_pipeline.analyst import config, exports
    from memory_pipeline.analyst.files import AnalyticsFiles
    from memory_pipeline.analyst.logic import DayWindow
    from memory_pipeline.analyst.registry import EXPORTS
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.kinds import Window
    from memory_pipeline.lib.store import Store

    store = Store(settings.database_url())
    files = AnalyticsFiles.at(settings.duckdb_path(), config.load())
    tables = [e for e in EXPORTS if e.by_day and e.grain is Window.DAY]
    window = DayWindow(FIRST, FIRST + timedelta(days=days - 1))
    started = time.perf_counter()
    report = exports.export_tables(store, files, tables, window, TZ)
    return time.perf_counter() - started, sum(t.parquet_files for t in report.tables)


INSTANCES = ("stock", "batch")


def _instance(folder: Path, name: str) -> Any:
    """A Dagster instance in ``folder/dagster_home_<name>``: "stock" with the dagster.yaml the CLI
    wrote before the batch event log, "batch" with today's."""
    from dagster import DagsterInstance

    from memory_pipeline.operations import runner

    home = folder / f"dagster_home_{name}"
    home.mkdir()
    (home / "dagster.yaml").write_text(runner.OLD_INSTANCE_YAMLS[-1] if name == "stock" else runner.INSTANCE_YAML)
    return DagsterInstance.from_config(str(home))


def _use(instance: Any, name: str) -> None:
    """The environment of ``name``'s runs: its DAGSTER_HOME, and event batches only for "batch"."""
    os.environ["DAGSTER_HOME"] = instance.root_directory
    os.environ["DAGSTER_EVENT_BATCH_SIZE"] = "1000" if name == "batch" else "0"


def _runs(instance: Any, days: int) -> tuple[float, int, dict[str, int]]:
    from memory_pipeline import operations

    last = FIRST + timedelta(days=days - 1)
    started = time.perf_counter()
    report = operations.materialize("exports", FIRST.isoformat(), last.isoformat(), mode="rebuild", instance=instance)
    seconds = time.perf_counter() - started
    if not all(r.success for r in report.runs):
        raise RuntimeError(f"export run failed: {[r.error for r in report.runs]}")
    events: Counter[str] = Counter()
    for r in report.runs:
        events.update(e.dagster_event_type.value for e in instance.all_logs(r.run_id) if e.dagster_event_type)
    return seconds, len(report.runs), dict(events)


def _measure_runs(folder: Path, days: int, repeat: int, out: dict[str, Any]) -> None:
    ranges = (1, days)
    instances = {name: _instance(folder, name) for name in INSTANCES}
    for name, instance in instances.items():
        _use(instance, name)
        _runs(instance, 1)  # untimed: loads the definitions and creates the instance's storage
    seconds: dict[str, list[float]] = {f"{name}_{n}d": [] for name in INSTANCES for n in ranges}
    runs: dict[str, Any] = {}
    for _ in range(repeat):
        for n in ranges:
            for name, instance in instances.items():
                _use(instance, name)
                took, count, events = _runs(instance, n)
                seconds[f"{name}_{n}d"].append(round(took, 2))
                runs[f"{name}_{n}d"] = {"seconds": seconds[f"{name}_{n}d"], "runs": count, "events": events}
    os.environ.pop("DAGSTER_EVENT_BATCH_SIZE", None)
    out["runs"] = runs
    median = {key: statistics.median(values) for key, values in seconds.items()}
    for n in ranges:
        out[f"export_seconds_per_day_{n}d"] = round(median[f"batch_{n}d"] / n, 3)
        out[f"export_seconds_per_day_{n}d_stock_instance"] = round(median[f"stock_{n}d"] / n, 3)
        out[f"export_runs_ratio_stock_to_batch_{n}d"] = round(median[f"stock_{n}d"] / median[f"batch_{n}d"], 2)
        out[f"export_events_per_day_{n}d"] = round(sum(runs[f"batch_{n}d"]["events"].values()) / n, 1)
    out["export_events_match"] = all(runs[f"stock_{n}d"]["events"] == runs[f"batch_{n}d"]["events"] for n in ranges)
    for name, suffix in (("batch", ""), ("stock", "_stock_instance")):
        # paired within a repetition (the machine's load drifts between repetitions)
        marginal = [
            (long - one) / (days - 1)
            for one, long in zip(seconds[f"{name}_1d"], seconds[f"{name}_{days}d"], strict=True)
        ]
        out[f"export_marginal_seconds_per_day{suffix}"] = round(statistics.median(marginal), 3)
    out["export_seconds_per_day"] = out[f"export_seconds_per_day_{days}d"]
    for instance in instances.values():
        instance.dispose()


def seconds_per_day(folder: Path, days: int, repeat: int) -> dict[str, Any]:
    """``export_seconds_per_day`` alone (``bench/run.py``'s export stage): the range run on the CLI's
    instance, after one untimed run, median of ``repeat`` / days."""
    instance = _instance(folder, "batch")
    _use(instance, "batch")
    _runs(instance, 1)  # untimed: loads the definitions and creates the instance's storage
    seconds = [_runs(instance, days)[0] for _ in range(repeat)]
    instance.dispose()
    return {
        "export_seconds_per_day": round(statistics.median(seconds) / days, 3),
        "export_days": days,
        "export_runs_seconds": [round(x, 2) for x in seconds],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per variant and range (core and runs)")
    parser.add_argument("--skip-runs", action="store_true")
    parser.add_argument(
        "--per-day-only",
        metavar="OUT",
        help="only export_seconds_per_day (the CLI's instance, the --days range), written to OUT (bench/run.py)",
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_export_"))
    _setup(folder, args.days)
    if args.per_day_only:
        try:
            Path(args.per_day_only).write_text(json.dumps(seconds_per_day(folder, args.days, args.repeat)) + "\n")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    out: dict[str, Any] = {"at": datetime.now().astimezone().isoformat(timespec="seconds"), "days": args.days}
    out["data"] = f"{WORLDS * MESSAGES_PER_DAY * args.days} messages over {args.days} days, {WORLDS} worlds"
    ranges = (1, args.days)
    core: dict[str, dict[int, list[float]]] = {"before": {n: [] for n in ranges}, "after": {n: [] for n in ranges}}
    _core(args.days)  # a first export creates the file and every table's files: later runs re-export
    for _ in range(args.repeat):
        for variant in ("before", "after"):
            _variant(variant)()
            for n in ranges:
                core[variant][n].append(_core(n)[0])
    _variant("after")()
    for n in ranges:
        before, after = statistics.median(core["before"][n]), statistics.median(core["after"][n])
        out[f"export_core_seconds_per_day_{n}d_before"] = round(before / n, 4)
        out[f"export_core_seconds_per_day_{n}d"] = round(after / n, 4)
        out[f"export_core_ratio_before_to_after_{n}d"] = round(before / after, 2)
    if not args.skip_runs:
        _measure_runs(folder, args.days, args.repeat, out)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print("| key | value |\n|---|---|")
    for k, v in out.items():
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    sys.exit(main())
