"""The benchmark: every measurement with its floor or baseline, in one invocation.

    make bench          # full scale
    make bench-quick    # a few minutes
    python bench/run.py --scale quick|full

Generates the data, measures on PostgreSQL (``BENCH_DATABASE_URL``, fresh schemas, dropped after)
and Redis (``BENCH_REDIS_URL``, keys under a fresh prefix, deleted after), prints a Markdown table
and writes ``bench/results/latest.json``. What each key means: bench/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import orjson  # noqa: E402
from sqlalchemy import create_engine, func, select, text  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import floor  # noqa: E402
import launched  # noqa: E402
import sleep_floor  # noqa: E402

PG = os.environ.get("BENCH_DATABASE_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
HERE = Path(__file__).resolve().parent
TZ = ZoneInfo("Asia/Shanghai")
YEAR = 2025
TOPICS = (
    "garden deploy marathon database tomatoes invoice travel piano kitchen reading budget compost "
    "migration latency recipe harvest training concert library hiking"
).split()


@dataclass(frozen=True)
class Scale:
    name: str
    messages: int  # the year's data set (10 worlds)
    worlds: int
    per_partition_days: int  # days of the one-run-per-partition comparison (365: the whole year)
    worlds_days: int  # days of the 100 vs 1000 worlds comparison
    worlds_per_day: int  # messages a world has each of those days
    rss_messages: int  # the file whose ingest's peak RSS is measured
    reads: int
    ingest_reps: int


# Seed 003's stage: nights of sleep for 10 worlds over the first SLEEP_DAYS days of the year, on a
# data set of its own at both scales (SLEEP_MESSAGES over the year: ~3 messages a world a day, two
# conversations), so a quick and a full run differ only in the span. The memories it builds grow
# every day and deep sleep reads them all each day: the span's cost grows faster than its days.
SLEEP_DAYS = {"quick": 30, "full": 365}
SLEEP_MESSAGES = 8_000

SCALES = {
    "quick": Scale("quick", 8_000, 10, 31, 3, 4, 100_000, 10_000, 1),
    "full": Scale("full", 100_000, 10, 365, 30, 20, 1_000_000, 10_000, 3),
}


# --- data ---------------------------------------------------------------------------------------


def event(mid, world, conv, role, content, at, platform="local"):
    return {
        "message_id": mid,
        "world_id": world,
        "conversation_id": conv,
        "platform": platform,
        "debug": False,
        "role": role,
        "content": content,
        "tool_calls": None,
        "timestamp": at.isoformat(),
    }


def generate_year(path: Path, n_messages: int, worlds: int, seed: int = 11) -> int:
    """The year's data: two conversations a day per world, ~10% quiet days."""
    rng = random.Random(seed)
    days = [date(YEAR, 1, 1) + timedelta(days=i) for i in range(365)]
    per_day = max(2, -(-n_messages // int(worlds * len(days) * 0.9)))
    n = 0
    with open(path, "wb") as fh:
        for w in range(worlds):
            for d in days:
                if rng.random() < 0.1:
                    continue
                at = datetime(d.year, d.month, d.day, 8, 0, tzinfo=TZ)
                platforms = [rng.choice(["local", "discord", "weixin"]) for _ in range(2)]
                for i in range(per_day):
                    at += timedelta(minutes=rng.randint(1, 20))
                    a, b = rng.sample(TOPICS, 2)
                    fh.write(
                        orjson.dumps(
                            event(
                                f"b-{w}-{d:%Y%m%d}-{i}",
                                f"bench-w{w}",
                                f"bw{w}-{d:%Y%m%d}-{i % 2}",
                                "user" if i // 2 % 2 == 0 else "assistant",
                                f"Talking about {a} and {b}, item {i}.",
                                at,
                                platforms[i % 2],
                            )
                        )
                        + b"\n"
                    )
                    n += 1
    return n


def generate_worlds(path: Path, worlds: int, days: int, per_day: int, seed: int = 5) -> int:
    """``worlds`` worlds, each with ``per_day`` messages on each of ``days`` days from 2025-03-01."""
    rng = random.Random(seed)
    n = 0
    with open(path, "wb") as fh:
        for w in range(worlds):
            for k in range(days):
                d = date(YEAR, 3, 1) + timedelta(days=k)
                at = datetime(d.year, d.month, d.day, 9, 0, tzinfo=TZ)
                for i in range(per_day):
                    at += timedelta(minutes=rng.randint(1, 15))
                    a, b = rng.sample(TOPICS, 2)
                    fh.write(
                        orjson.dumps(
                            event(
                                f"x-{w}-{d:%m%d}-{i}",
                                f"wx{w}",
                                f"wx{w}-{d:%m%d}",
                                ("user", "assistant")[i % 2],
                                f"{a} and {b} {i}",
                                at,
                            )
                        )
                        + b"\n"
                    )
                    n += 1
    return n


# --- stores and instances -----------------------------------------------------------------------

SCHEMAS: list[str] = []


def fresh_store(prefix: str = "bench"):
    from memory_pipeline import domains
    from memory_pipeline.lib.store import Store
    from memory_pipeline.lib.store.migrate import ensure_schema

    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with create_engine(PG).begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    SCHEMAS.append(schema)
    store = Store(schema_url(schema))
    ensure_schema(store, domains.version_locations())
    return store


def schema_url(schema: str) -> str:
    return f"{PG}?options=-csearch_path%3D{schema}"


def discard(store) -> None:
    """Drop one store's schema now (a measurement done with it), not at the end."""
    from memory_pipeline.lib.store import make_engine

    schema = next(x for x in SCHEMAS if schema_url(x) == store.url)
    make_engine(store.url).dispose()
    with create_engine(PG).begin() as conn:
        conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
    SCHEMAS.remove(schema)


def drop_schemas() -> None:
    from memory_pipeline.lib.store import make_engine

    for schema in SCHEMAS:
        make_engine(schema_url(schema)).dispose()
    make_engine.cache_clear()
    engine = create_engine(PG)
    for schema in SCHEMAS:  # one transaction each: dozens of schemas in one exceed max_locks_per_transaction
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
    engine.dispose()


def defs_for(store, redis_url: str = ""):
    from memory_pipeline.definitions import build_defs
    from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource

    return build_defs(
        {
            "memory_store": MemoryStoreResource(database_url=store.url),
            "kv_cache": CacheResource(redis_url=redis_url),
            "llm": LLMResource(),
            "memory_config": MemoryConfigResource(),
        }
    )


def sqlite_instance(home: str):
    from dagster import DagsterInstance

    from memory_pipeline.operations import INSTANCE_YAML

    Path(home, "dagster.yaml").write_text(INSTANCE_YAML)  # as the embedded default
    return DagsterInstance.from_config(home)


def postgres_instance(home: str):
    from dagster import DagsterInstance

    schema = f"bench_dg_{uuid.uuid4().hex[:8]}"
    with create_engine(PG).begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    SCHEMAS.append(schema)
    url = schema_url(schema).replace("postgresql+psycopg2://", "postgresql://", 1)
    Path(home, "dagster.yaml").write_text(
        f"storage:\n  postgres:\n    postgres_url: '{url}'\ntelemetry:\n  enabled: false\n"
    )
    return DagsterInstance.from_config(home)


YEAR_RANGES = [
    ("day", f"{YEAR}-01-01", f"{YEAR}-12-31"),
    ("month", f"{YEAR}-01", f"{YEAR}-12"),
    ("year", str(YEAR), str(YEAR)),
]


def backfill(defs, instance, ranges, per_partition=False, **kw) -> float:
    from memory_pipeline import operations

    started = time.perf_counter()
    for window, lo, hi in ranges:
        report = operations.materialize(window, lo, hi, per_partition=per_partition, instance=instance, defs=defs, **kw)
        if not report.success:
            raise RuntimeError(f"{window} backfill failed: {report.runs[0].error}")
    return time.perf_counter() - started


@contextmanager
def event_batch(size: str):
    """DAGSTER_EVENT_BATCH_SIZE=size ('' unset) for what runs inside, restored after."""
    old = os.environ.pop("DAGSTER_EVENT_BATCH_SIZE", None)
    if size:
        os.environ["DAGSTER_EVENT_BATCH_SIZE"] = size
    try:
        yield
    finally:
        os.environ.pop("DAGSTER_EVENT_BATCH_SIZE", None)
        if old is not None:
            os.environ["DAGSTER_EVENT_BATCH_SIZE"] = old


@contextmanager
def data_dir(path: str):
    """MEMORY_DATA_DIR=path for what runs inside (deep sleep's round logs go under it), restored after."""
    old = os.environ.get("MEMORY_DATA_DIR")
    os.environ["MEMORY_DATA_DIR"] = path
    try:
        yield
    finally:
        os.environ.pop("MEMORY_DATA_DIR", None)
        if old is not None:
            os.environ["MEMORY_DATA_DIR"] = old


def event_counts(instance) -> dict[str, int]:
    """Events of every run of ``instance`` by type (a log line is LOG_MESSAGE)."""
    counts: Counter = Counter()
    for run in instance.get_runs():
        counts.update(
            e.dagster_event.event_type_value if e.dagster_event else "LOG_MESSAGE"
            for e in instance.all_logs(run.run_id)
        )
    return dict(sorted(counts.items()))


# The instances the per-partition comparison runs on: (key suffix, instance, DAGSTER_EVENT_BATCH_SIZE).
INSTANCES = [
    ("", sqlite_instance, ""),
    ("_pg_instance", postgres_instance, ""),
    ("_pg_instance_event_batch_100", postgres_instance, "100"),
]
INSTANCE_LABEL = {
    "": "SQLite instance",
    "_pg_instance": "PostgreSQL instance",
    "_pg_instance_event_batch_100": "PostgreSQL instance, DAGSTER_EVENT_BATCH_SIZE=100",
}
# Which of the one-run-per-partition runs are timed, per scale: every k-th key of a window (1: all),
# as (in-process and no-op runs, launched runs). A launched run costs tens of seconds (three
# processes importing the code location), so those are sampled at both scales; at full scale the
# in-process days are too (31 of 365). A sampled window's time is the mean of its timed runs x its
# partitions, and is labelled so in the table and in latest.json.
PER_PARTITION_STEP = {
    "quick": ({"day": 1}, {"day": 30}),
    "full": ({"day": 12, "month": 1, "year": 1}, {"day": 122, "month": 12, "year": 1}),
}


def per_partition_seconds(ranges, steps: dict[str, int], runs: dict, fills: list) -> dict[str, tuple[float, int, str]]:
    """One run per partition over ``ranges``, for each of ``runs`` ({name: one_run(window, key) ->
    seconds}), the runs of a key back to back. The runs of every ``steps[window]``-th key are timed;
    a window's time is their mean x its partitions. A sampled window that a later window reads (a
    month reads its days) is then completed, untimed, by each of ``fills`` (fill(window, first,
    last)). Returns {name: (seconds, runs timed, what was timed)}."""
    from memory_pipeline.operations import partition_keys

    totals = dict.fromkeys(runs, 0.0)
    timed, labels = 0, []
    for i, (window, first, last) in enumerate(ranges):
        keys = partition_keys(window, first, last)[0]
        chosen = keys[:: steps.get(window, 1)]
        times: dict[str, list[float]] = {name: [] for name in runs}
        for key in chosen:
            for name, one_run in runs.items():
                times[name].append(one_run(window, key))
        for name in runs:
            totals[name] += statistics.mean(times[name]) * len(keys)
        timed += len(chosen)
        sampled = len(chosen) < len(keys)
        labels.append(f"{len(chosen)} of {len(keys)} {window} runs" + (" (extrapolated)" if sampled else ""))
        if sampled and i < len(ranges) - 1:
            for fill in fills:
                fill(window, first, last)
    return {name: (total, timed, ", ".join(labels)) for name, total in totals.items()}


def code_server_env(store, home: str, batch: str) -> dict[str, str | None]:
    """The code location of the launched runs: the bench's store, the embedded defaults otherwise
    (offline model, in-process cache, multiprocess executor, one run per range), as defs_for."""
    from memory_pipeline.lib import settings

    unset = (
        settings.ENV_REDIS_URL,
        settings.ENV_LLM_MODEL,
        settings.ENV_LLM_API_BASE,
        settings.ENV_LLM_API_KEY,
        settings.ENV_CONFIG_FILE,
        settings.ENV_EXECUTOR,
        settings.ENV_BACKFILL_MAX_PARTITIONS_PER_RUN,
    )
    return {name: None for name in unset} | {
        settings.ENV_DATABASE_URL: store.url,
        "MEMORY_DATA_DIR": home,
        "DAGSTER_EVENT_BATCH_SIZE": batch or None,
    }


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


# --- the measurements ---------------------------------------------------------------------------


class Bench:
    def __init__(self, scale: Scale, out: Path):
        self.scale, self.out = scale, out
        self.results: dict = {"scale": scale.name}
        self.rows: list[tuple[str, str, str]] = []  # (measurement, value, floor / baseline)
        self.skip: set[str] = set()  # stages left out (--skip)

    @contextmanager
    def stage(self, name: str):
        """Wall time of a stage, in latest.json's stage_seconds (what dominates a full run)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.results.setdefault("stage_seconds", {})[name] = round(time.perf_counter() - started, 1)

    def note(self, what: str, value: str, against: str = "") -> None:
        self.rows.append((what, value, against))
        print(f"  {what}: {value}" + (f"  [{against}]" if against else ""), flush=True)

    def ingest(self, events: Path, n: int):
        from memory_pipeline.events.ingest import ingest_file

        times, copies, fk_copies = [], [], []
        store = None
        for _ in range(self.scale.ingest_reps):  # alternating, so all see the same machine
            raw_store = fresh_store()
            copies.append(floor.raw_copy(raw_store, events)[0])
            store = fresh_store()
            t = time.perf_counter()
            report = ingest_file(store, events)
            times.append(time.perf_counter() - t)
            assert report.inserted == n, report
            fk_copies.append(floor.raw_copy(store, events, foreign_key=True)[0])  # its conversations are stored now
        ingest_s, copy_s, fk_copy_s = statistics.median(times), statistics.median(copies), statistics.median(fk_copies)
        t = time.perf_counter()
        again = ingest_file(store, events)
        reingest = time.perf_counter() - t
        assert again.inserted == 0 and again.duplicates == n
        self.results |= {
            "ingest_msgs_per_s": round(n / ingest_s),
            "raw_copy_msgs_per_s": round(n / copy_s),
            "ingest_ratio_to_copy": round(copy_s / ingest_s, 3),
            "raw_copy_fk_msgs_per_s": round(n / fk_copy_s),
            "ingest_ratio_to_copy_with_fk": round(fk_copy_s / ingest_s, 3),
            "reingest_seconds": round(reingest, 2),
        }
        self.note(
            f"ingest {n:,} messages (median of {len(times)})",
            f"{ingest_s:.2f} s = {n / ingest_s:,.0f} msg/s",
            f"raw COPY of the file's rows {copy_s:.2f} s = {n / copy_s:,.0f} msg/s; ratio {copy_s / ingest_s:.2f}",
        )
        self.note(
            "the floor: the same raw COPY with messages' foreign key (the plain one above is information)",
            f"{fk_copy_s:.2f} s = {n / fk_copy_s:,.0f} msg/s",
            f"ingest ratio to it {fk_copy_s / ingest_s:.2f} (target >= 0.9)",
        )
        self.note("re-ingest of the same file (0 inserted)", f"{reingest:.2f} s")
        return store

    def worlds(self, with_backfill: bool = True):
        """Same per-world volume at 100 and 1000 worlds: ingest (median of ``ingest_reps``, the two
        sizes alternating so both see the same machine, each against its raw COPY) and, unless
        left out, the day backfill of the last ingest of each."""
        from memory_pipeline.events.ingest import ingest_file

        s = self.scale
        out = {}
        with tempfile.TemporaryDirectory() as tmp:
            paths = {w: Path(tmp, f"worlds-{w}.jsonl") for w in (100, 1000)}
            sizes = {w: generate_worlds(p, w, s.worlds_days, s.worlds_per_day) for w, p in paths.items()}
            ingests: dict[int, list[float]] = {100: [], 1000: []}
            copies: dict[int, list[float]] = {100: [], 1000: []}
            stores = {}
            for _rep in range(s.ingest_reps):
                for worlds in (100, 1000):
                    raw_store = fresh_store()
                    copies[worlds].append(floor.raw_copy(raw_store, paths[worlds])[0])  # the baseline's own growth
                    discard(raw_store)
                    if worlds in stores:
                        discard(stores[worlds])  # one schema of this size at a time
                    stores[worlds] = store = fresh_store()
                    t = time.perf_counter()
                    ingest_file(store, paths[worlds])
                    ingests[worlds].append(time.perf_counter() - t)
            for worlds in (100, 1000):
                ingest_s, copy_s = statistics.median(ingests[worlds]), statistics.median(copies[worlds])
                backfill_s = 0.0
                if with_backfill:
                    home = tempfile.mkdtemp(dir=tmp)
                    with sqlite_instance(home) as inst:
                        last = (date(YEAR, 3, 1) + timedelta(days=s.worlds_days - 1)).isoformat()
                        backfill_s = backfill(defs_for(stores[worlds]), inst, [("day", f"{YEAR}-03-01", last)])
                out[worlds] = (sizes[worlds], ingest_s, backfill_s, copy_s)
                self.note(
                    f"{worlds} worlds x {s.worlds_days} days x {s.worlds_per_day} msgs",
                    f"ingest {ingest_s:.2f} s (median of {len(ingests[worlds])})"
                    + (f", day backfill {backfill_s:.2f} s" if with_backfill else ""),
                    f"raw COPY of the file {copy_s:.2f} s",
                )
        self.results |= {
            "worlds_1000_vs_100_ingest": round(out[1000][1] / out[100][1], 2),
            "worlds_1000_vs_100_raw_copy": round(out[1000][3] / out[100][3], 2),
        }
        if with_backfill:
            self.results["worlds_1000_vs_100_backfill"] = round(out[1000][2] / out[100][2], 2)
        self.note(
            "1000 vs 100 worlds (10x the data)",
            f"ingest {out[1000][1] / out[100][1]:.1f}x"
            + (f", day backfill {out[1000][2] / out[100][2]:.1f}x" if with_backfill else ""),
            f"raw COPY {out[1000][3] / out[100][3]:.1f}x; linear: 10x",
        )

    def backfill_and_floors(self, store, events: Path, n: int):
        """The year backfill against its floor, ``ingest_reps`` times (3 at full scale): each time
        a fresh store and a fresh instance, the real backfill, then the set-based floor on the rows
        it wrote and the Dagster no-op right after, so each ratio pairs runs that saw the same
        machine. The ratio is the median of those; the seconds are medians. The last store and
        instance stay for the stages that follow."""
        from memory_pipeline.events.ingest import ingest_file
        from memory_pipeline.lib.llm import offline

        # The offline model's language data (wordfreq's word list, ~0.4 s) is loaded once per process:
        # loaded here, so neither the real run nor the floor after it is timed loading it.
        offline.headline_words("warm up the language data")
        reps = []
        for rep in range(self.scale.ingest_reps):
            if rep:
                discard(self.store)
                self.instance.dispose()
                store = fresh_store()
                ingest_file(store, events)
            self.home = tempfile.mkdtemp()
            self.instance = sqlite_instance(self.home)
            self.defs = defs_for(store)
            self.store = store
            backfill_s = backfill(self.defs, self.instance, YEAR_RANGES)
            if not rep:
                calls, pairs = ok_calls(store), non_empty_pairs(store)
            # (b) the set-based floor on the same data, checked against the rows just written
            fl = floor.set_based_floor(store, YEAR, TZ)
            problems = floor.compare_rows(store, fl)
            # (a) the Dagster no-op over the same partitions, with the real run's metadata per partition
            meta = {w: floor.real_metadata(self.instance, f"temporal_{w}_summaries") for w in ("day", "month", "year")}
            with tempfile.TemporaryDirectory() as home, sqlite_instance(home) as inst:
                noop_s = floor.run_noop(floor.noop_definitions(meta), inst, YEAR_RANGES)
                self.noop_events = event_counts(inst)
            reps.append((backfill_s, fl.seconds, noop_s, backfill_s / (noop_s + fl.seconds), problems, fl))
        self.backfill_s = backfill_s  # the kept instance's first run (the unchanged re-run's base)
        backfill_s = statistics.median(r[0] for r in reps)
        set_s = statistics.median(r[1] for r in reps)
        noop_s = statistics.median(r[2] for r in reps)
        ratio = statistics.median(r[3] for r in reps)
        problems = next((r[4] for r in reps if r[4]), [])
        fl = reps[-1][5]
        of = f" (median of {len(reps)})" if len(reps) > 1 else ""
        self.results |= {
            "backfill_seconds": round(backfill_s, 2),
            "llm_calls_per_nonempty_pair": round(calls / pairs, 3) if pairs else None,
        }
        self.note(f"year backfill, one run per range (365 + 12 + 1 partitions){of}", f"{backfill_s:.2f} s")
        self.note("LLM calls / non-empty (window, world) pairs", f"{calls} / {pairs}")
        self.note(
            f"set-based floor (one read, in-memory summaries, one COPY){of}",
            f"{set_s:.2f} s, {fl.rows} rows, {fl.calls} calls",
            "same rows as the real run" if not problems else f"{len(problems)} differences, e.g. {problems[0]}",
        )
        self.note(f"Dagster no-op, same partitions, events and metadata{of}", f"{noop_s:.2f} s")
        self.results |= {
            "backfill_floor_seconds": round(noop_s + set_s, 2),
            "backfill_noop_seconds": round(noop_s, 2),
            "backfill_set_based_seconds": round(set_s, 2),
            "floor_rows_match": not problems,
            "backfill_ratio_to_floor": round(ratio, 2),
            "backfill_runs": [
                {
                    "backfill_seconds": round(b, 2),
                    "set_based_seconds": round(f, 2),
                    "noop_seconds": round(o, 2),
                    "ratio": round(r, 2),
                }
                for b, f, o, r, _, _ in reps
            ],
        }
        self.note(
            "backfill / floor (no-op + set-based)" + (f", median of {len(reps)} paired runs" if len(reps) > 1 else ""),
            f"{ratio:.2f}x" + (f" ({', '.join(f'{r[3]:.2f}x' for r in reps)})" if len(reps) > 1 else ""),
            "target <= 1.25x",
        )

        # What the real range runs emit beyond the no-op's (by type, over the 378 partitions)
        self.meta = meta
        real_events = event_counts(self.instance)
        self.results["range_run_events"] = {"real": real_events, "noop": self.noop_events}
        extra = {
            k: real_events.get(k, 0) - self.noop_events.get(k, 0)
            for k in sorted(set(real_events) | set(self.noop_events))
            if real_events.get(k, 0) != self.noop_events.get(k, 0)
        }
        per_partition_types = ("ASSET_MATERIALIZATION_PLANNED", "ASSET_MATERIALIZATION", "ASSET_CHECK_EVALUATION")
        self.note(
            "events of the year's range runs, real / no-op",
            ", ".join(f"{k} {real_events.get(k, 0)} / {self.noop_events.get(k, 0)}" for k in per_partition_types),
            f"real minus no-op: {extra or 'none'}",
        )

        # The same backfill on a PostgreSQL Dagster instance, without and with event batching
        timings = {}
        for batch in ("", "100"):
            pg_store = fresh_store()
            ingest_file(pg_store, events)
            with event_batch(batch), tempfile.TemporaryDirectory() as home, postgres_instance(home) as inst:
                timings[batch] = backfill(defs_for(pg_store), inst, YEAR_RANGES)
        self.results |= {
            "backfill_pg_instance_seconds": round(timings[""], 2),
            "backfill_pg_instance_event_batch_100_seconds": round(timings["100"], 2),
        }
        self.note(
            "year backfill on a PostgreSQL Dagster instance",
            f"{timings['']:.2f} s; with DAGSTER_EVENT_BATCH_SIZE=100: {timings['100']:.2f} s",
            f"{timings[''] / timings['100']:.2f}x from batching",
        )
        # The year's range runs as measured above, reused by the per-partition comparison at full scale
        self.year_range_s = {
            ("in_process", ""): backfill_s,
            ("in_process", "_pg_instance"): timings[""],
            ("in_process", "_pg_instance_event_batch_100"): timings["100"],
            ("noop", ""): noop_s,
        }

    def per_partition(self, events: Path):
        """One run per partition against range runs over the same partitions (full: the year's 365 +
        12 + 1; quick: January's 31 days), each side on a fresh store and a fresh instance, on every
        instance (SQLite, PostgreSQL without and with DAGSTER_EVENT_BATCH_SIZE=100) and run three
        ways: in-process (the CLI's runs, operations.materialize), the Dagster no-op (the same events
        and metadata without the work: what Dagster alone gives) and launched (the production path:
        the run launcher, a run worker per run, a process per step). In-process and no-op runs
        alternate key by key, so both see the same load. Sampled windows are extrapolated and say so."""
        from memory_pipeline.events.ingest import ingest_file
        from memory_pipeline.operations import partition_keys, run_config, run_range

        s = self.scale
        days = s.per_partition_days
        ranges = YEAR_RANGES if days == 365 else [("day", f"{YEAR}-01-01", f"{YEAR}-01-{days:02d}")]
        steps = PER_PARTITION_STEP[s.name]
        whole_year = ranges == YEAR_RANGES
        noop_defs = floor.noop_definitions(self.meta)
        detail: dict[str, dict] = {}

        def store_defs():
            store = fresh_store()
            ingest_file(store, events)
            return store, defs_for(store)

        def in_process_run(defs, inst):
            def one(window: str, key: str) -> float:
                got = run_range(inst, window, key, key, run_config(window), defs)  # as materialize runs a span
                if not got.success:
                    raise RuntimeError(f"{window} {key} run failed: {got.error}")
                return got.seconds

            return one

        def noop_run(inst):
            return lambda window, key: floor.run_noop(noop_defs, inst, [(window, key, key)])

        def filler(defs, inst):
            def fill(window: str, first: str, last: str) -> None:  # untimed: the rows a later window reads
                backfill(defs, inst, [(window, first, last)], mode="missing")

            return fill

        def record(key: str, label: str, suffix: str, range_s: float, per: tuple[float, int, str], against: str):
            per_s, runs, timed = per
            self.results[key] = round(per_s / range_s, 2)
            detail[key] = {
                "range_runs_seconds": round(range_s, 2),
                "per_partition_runs_seconds": round(per_s, 2),
                "per_partition_runs_timed": runs,
                "timed": timed,
            }
            self.note(
                f"one run per partition / range runs, {label}, {INSTANCE_LABEL[suffix]}",
                f"{per_s:.2f} s vs {range_s:.2f} s = {per_s / range_s:.1f}x",
                f"{timed}; {against}",
            )

        for suffix, make_instance, batch in INSTANCES:
            with event_batch(batch):
                # in-process (the project's runs) and the Dagster no-op, alternating
                _, defs = store_defs()
                with (
                    tempfile.TemporaryDirectory() as home,
                    make_instance(home) as inst,
                    tempfile.TemporaryDirectory() as noop_home,
                    make_instance(noop_home) as noop_inst,
                ):
                    per = per_partition_seconds(
                        ranges,
                        steps[0],
                        {"real": in_process_run(defs, inst), "noop": noop_run(noop_inst)},
                        [filler(defs, inst)],
                    )
                real_range = self.year_range_s.get(("in_process", suffix)) if whole_year else None
                noop_range = self.year_range_s.get(("noop", suffix)) if whole_year else None
                if whole_year and noop_range is None:
                    with tempfile.TemporaryDirectory() as home, make_instance(home) as inst:
                        noop_range = floor.run_noop(noop_defs, inst, ranges)
                if not whole_year:  # a short range: the median of 3, alternating with the no-op's
                    reals, noops = [], []
                    for _ in range(3):
                        _, range_defs = store_defs()
                        with tempfile.TemporaryDirectory() as home, make_instance(home) as inst:
                            reals.append(backfill(range_defs, inst, ranges))
                        with tempfile.TemporaryDirectory() as home, make_instance(home) as inst:
                            noops.append(floor.run_noop(noop_defs, inst, ranges))
                    real_range, noop_range = statistics.median(reals), statistics.median(noops)
                record(
                    f"per_partition_runs_ratio{suffix}",
                    "in-process runs",
                    suffix,
                    real_range,
                    per["real"],
                    "target >= 12x",
                )
                record(
                    f"per_partition_noop_ratio{suffix}",
                    "Dagster no-op runs",
                    suffix,
                    noop_range,
                    per["noop"],
                    "Dagster alone (same events and metadata, no work)",
                )
                if make_instance is not postgres_instance or "launched" in self.skip:
                    continue

                # launched: the run launcher, a run worker per run and a process per step (multiprocess)
                for side in ("per_partition", "range"):
                    store, defs = store_defs()
                    with tempfile.TemporaryDirectory() as home, make_instance(home) as inst:
                        with launched.CodeServer(inst, code_server_env(store, home, batch)) as server:
                            if side == "range":
                                range_s = sum(server.run(w, lo, hi) for w, lo, hi in ranges)
                            else:
                                launched_per = per_partition_seconds(
                                    ranges,
                                    steps[1],
                                    {"launched": lambda w, k: server.run(w, k, k)},
                                    [filler(defs, inst)],
                                )["launched"]
                record(
                    f"per_partition_runs_ratio_launched{suffix}",
                    "launched runs",
                    suffix,
                    range_s,
                    launched_per,
                    "target >= 12x",
                )

        self.results["per_partition_runs"] = {
            "partitions": " + ".join(f"{len(partition_keys(w, lo, hi)[0])} {w}" for w, lo, hi in ranges),
            **detail,
        }

    def sleep(self):
        """Seed 003: the nights of the span (SLEEP_DAYS) for 10 worlds as production runs a catch-up
        or a backfill (the nights job over the range, one run, each day's light sleep, deep sleep and
        autobiography before the next day's: operations.materialize("sleep", ...)), on a fresh store
        and a fresh SQLite instance; then the set-based floor on the same store, its rows checked
        against the run's, and the Dagster no-op over the same partitions, so the ratio pairs runs
        that saw the same machine."""
        from memory_pipeline import operations
        from memory_pipeline.events.ingest import ingest_file
        from memory_pipeline.lib.llm import offline
        from memory_pipeline.resources import LLMResource
        from memory_pipeline.sleep import config as sleep_config

        # The offline model's language data (~0.4 s) is loaded once per process: here, so the real run,
        # timed first, does not pay for it alone.
        offline.key_sentences([("user", "warm up the language data.")])
        days = SLEEP_DAYS[self.scale.name]
        first = date(YEAR, 1, 1)
        last = first + timedelta(days=days - 1)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp, "sleep.jsonl")
            n = generate_year(path, SLEEP_MESSAGES, 10, seed=3)
            store = fresh_store()
            ingest_file(store, path)
            home, data = Path(tmp, "dagster"), Path(tmp, "data")
            home.mkdir()
            with data_dir(str(data)), sqlite_instance(str(home)) as inst:
                started = time.perf_counter()
                report = operations.materialize(
                    "sleep", first.isoformat(), last.isoformat(), instance=inst, defs=defs_for(store)
                )
                real_s = time.perf_counter() - started
                if not report.success:
                    raise RuntimeError(f"sleep run failed: {report.runs[0].error}")
                cfg = sleep_config.load(None)
                fl = sleep_floor.set_based_floor(
                    store, first, last, TZ, cfg, Path(tmp, "floor_logs"), LLMResource().model
                )
                problems = sleep_floor.compare(store, fl, cfg.logs())
                meta = {name: floor.real_metadata(inst, name) for name in sleep_floor.ASSETS.values()}
                lines = sleep_floor.real_log_lines(inst)
                real_events = event_counts(inst)
            with tempfile.TemporaryDirectory() as noop_home, sqlite_instance(noop_home) as inst:
                noop_s = sleep_floor.run_noop(
                    sleep_floor.noop_definitions(meta, lines), inst, first.isoformat(), last.isoformat()
                )
                noop_events = event_counts(inst)
            discard(store)
        floor_s = fl.seconds + noop_s
        ratio = real_s / floor_s
        self.results |= {
            "sleep_year_days": days,
            "sleep_year_seconds": round(real_s, 2),
            "sleep_year_set_based_seconds": round(fl.seconds, 2),
            "sleep_year_noop_seconds": round(noop_s, 2),
            "sleep_year_floor_seconds": round(floor_s, 2),
            "sleep_year_ratio_to_floor": round(ratio, 2),
            "sleep_floor_rows_match": not problems,
            "sleep_year_runs": len(report.runs),
            "sleep_year_llm_calls": fl.calls,
            "sleep_year_rows": {
                "semantic_memories": len(fl.rows.memories),
                "semantic_memory_versions": len(fl.rows.versions),
                "semantic_memory_snapshots": len(fl.rows.snapshots),
                "autobiographical_memories": len(fl.rows.narratives),
                "sleep_runs": len(fl.rows.runs),
                "llm_ledger": len(fl.rows.ledger),
            },
            "sleep_range_run_events": {"real": real_events, "noop": noop_events},
        }
        if problems:
            self.results["sleep_floor_differences"] = problems[:10]
        self.note(
            f"sleep, {days} days x 10 worlds ({n:,} messages over the year), one range run of the nights job",
            f"{real_s:.2f} s in {len(report.runs)} run(s), {fl.calls} model calls",
        )
        self.note(
            "sleep floor (b): set-based prototype (one read, state in memory, one COPY per table)",
            f"{fl.seconds:.2f} s, {len(fl.rows.memories)} memories, {len(fl.rows.snapshots)} snapshot rows",
            "same rows as the real run" if not problems else f"{len(problems)} differences, e.g. {problems[0]}",
        )
        self.note("sleep floor (a): Dagster no-op, same partitions, events and metadata", f"{noop_s:.2f} s")
        self.note("sleep / floor (no-op + set-based)", f"{ratio:.2f}x", "target <= 1.25x")

    def reads(self, redis_url: str):
        """p50/p99 of temporal_view over ``reads`` views with Redis and in-process, then what one
        view costs on the wire (SQL statements, Redis round trips)."""
        from memory_pipeline.lib.cache import KVCache
        from memory_pipeline.lib.llm import LLMClient
        from memory_pipeline.temporal import chunks, read, rolls
        from memory_pipeline.temporal.config import TemporalSummaryConfig
        from memory_pipeline.temporal.context import TemporalContext

        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        cfg = TemporalSummaryConfig(redis_key_prefix=prefix)
        world = "bench-w0"
        with self.store.connect() as conn:
            from memory_pipeline.lib.store.tables import conversations, messages

            viewer, first_at = conn.execute(  # a day of June the world talked on, and a conversation of it
                select(conversations.c.conversation_id, messages.c.at)
                .join(messages, messages.c.conversation_id == conversations.c.conversation_id)
                .where(conversations.c.world_id == world, messages.c.at >= datetime(YEAR, 6, 10, tzinfo=TZ))
                .order_by(messages.c.at)
                .limit(1)
            ).one()
        day = first_at.astimezone(TZ).date()
        at = datetime(day.year, day.month, day.day, 22, 0, tzinfo=TZ)
        if not non_empty_pairs(self.store):  # the backfill was skipped: the past days' rows first
            with tempfile.TemporaryDirectory() as home, sqlite_instance(home) as inst:
                first = day.replace(day=1)
                backfill(
                    defs_for(self.store), inst, [("day", first.isoformat(), (day - timedelta(days=1)).isoformat())]
                )
        out = {}
        try:
            for name, url in (("redis", redis_url), ("in_process", "")):
                cache = KVCache(url or None)
                ctx = TemporalContext(self.store, LLMClient(self.store), cache, cfg, TZ)
                chunks.run_tick(ctx, day, day_end := at + timedelta(hours=2))
                rolls.warm_peer_rolls(ctx, day, day_end)
                rolls.regenerate_system_rolls(ctx, day)
                read.temporal_view(self.store, cache, cfg, world, viewer, at, TZ)  # warm-up requests, if any
                rolls.warm_peer_rolls(ctx, day, day_end)
                view = read.temporal_view(self.store, cache, cfg, world, viewer, at, TZ)
                assert view.warmups_requested == 0 and view.system_block, view
                lat = []
                for _ in range(self.scale.reads):
                    t = time.perf_counter()
                    read.temporal_view(self.store, cache, cfg, world, viewer, at, TZ)
                    lat.append((time.perf_counter() - t) * 1000)
                lat.sort()
                out[name] = (lat[len(lat) // 2], lat[int(len(lat) * 0.99) - 1], len(view.peer_messages))
            sql, trips = self.read_costs(redis_url, cfg, world, viewer, at)
        finally:
            import redis as redis_lib

            client = redis_lib.Redis.from_url(redis_url)
            for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                client.delete(key)
            client.close()
        self.results |= {
            "read_p99_ms_redis": round(out["redis"][1], 2),
            "read_p50_ms_redis": round(out["redis"][0], 2),
            "read_p99_ms_in_process": round(out["in_process"][1], 2),
            "read_p50_ms_in_process": round(out["in_process"][0], 2),
            "read_views": self.scale.reads,
            "read_sql_statements_per_view": sql,
            "read_redis_roundtrips_per_view": trips,
        }
        self.note(
            f"read path, {self.scale.reads:,} views ({out['redis'][2]} peer rolls + 3 system rolls each)",
            f"Redis p50 {out['redis'][0]:.2f} ms, p99 {out['redis'][1]:.2f} ms; "
            f"in-process p50 {out['in_process'][0]:.2f} ms, p99 {out['in_process'][1]:.2f} ms",
            "target p99 <= 2 ms with Redis",
        )
        self.note(
            "what one view costs on the wire (steady state, pooled connections)",
            f"{sql:g} SQL statements, {trips:g} Redis round trips",
            "target: one Redis round trip",
        )

    def read_costs(self, redis_url: str, cfg, world: str, viewer: str, at: datetime, views: int = 100):
        """SQL statements and Redis round trips per view, counted on the wire (a relay in front of
        PostgreSQL counting every query message, pre-pings, BEGIN and ROLLBACK included; a Redis
        connection counting its sends) over ``views`` views after one that opens the connections."""
        sys.path.append(str(HERE.parent))  # the counters the tests use
        from urllib.parse import urlsplit

        from memory_pipeline.lib.cache import KVCache
        from memory_pipeline.lib.store import Store, make_engine
        from memory_pipeline.temporal import read
        from memory_pipeline_tests.wire import CountingRedisConnection, PgWire, count_redis_sends

        pg = urlsplit(PG)
        wire = PgWire(pg.hostname or "127.0.0.1", pg.port or 5432)
        store = Store(wire.url(self.store.url))
        try:
            cache = KVCache(redis_url)
            count_redis_sends(cache._client, "bench-read-costs")
            read.temporal_view(store, cache, cfg, world, viewer, at, TZ)
            mark, CountingRedisConnection.sent[:] = wire.count(), []
            for _ in range(views):
                read.temporal_view(store, cache, cfg, world, viewer, at, TZ)
            return (wire.count() - mark) / views, len(CountingRedisConnection.sent) / views
        finally:
            make_engine(store.url).dispose()
            wire.close()

    def server(self):
        """The memory server's recall tools over MCP and in process, on the embedded default (its own
        SQLite store and data set: bench/server_recall.py)."""
        import server_recall

        out = server_recall.measure(server_recall.SCALES[self.scale.name], say=lambda m: print(f"  {m}", flush=True))
        self.results |= out
        for row in server_recall.rows(out):
            self.note(*row)

    # --- seed 001's organize and the analyst export (their own stages: `--only objects,export`) ---
    OBJECTS_EVENTS = {"quick": 1_000, "full": 10_000}  # bench/objects_organize.py's data set, 10 worlds
    # (days of the range, repetitions); 30 at both scales: a shorter range measures the run's fixed cost
    EXPORT_DAYS = {"quick": (30, 1), "full": (30, 3)}

    def objects(self):
        """Organize every pending event with the offline model (bench/objects_organize.py), then the
        set-based floor on a copy of the store taken before, its rows checked against the real run's."""
        import objects_organize

        n = self.OBJECTS_EVENTS[self.scale.name]
        out = objects_organize.measure(n, 10, floor=True, say=lambda m: print(f"  {m}", flush=True))
        self.results |= out
        self.note(
            f"objects organize, {n:,} pending events (offline model)",
            f"{out['objects_organize_events_per_s']:,.1f} events/s, {out['objects_organize_calls_per_event']:.3f} "
            f"model calls per event, {out['objects_organize_statements_per_batch']:.1f} statements per batch",
            "target ≥ 500 events/s; calls per event ≤ 1.01",
        )
        self.note(
            "objects organize / its set-based floor",
            f"{out['objects_organize_ratio_to_floor']:.1f}x (floor {out['objects_organize_floor_events_per_s']:,.1f} "
            f"events/s; rows {'identical' if out['objects_organize_floor_rows_match'] else 'DIFFER'})",
            "target ≤ 1.25x",
        )

    # Days and messages per world-day of worlds_domains: the same per world at both sizes.
    WORLDS_DOMAINS_SPAN = {"quick": (1, 2), "full": (2, 4)}

    def worlds_domains(self):
        """Sleep, objects and the export at 100 and 1,000 worlds (bench/worlds_scale.py): each size of
        each domain in a process of its own, so its peak RSS is its own; the ratios 1000 / 100."""
        days, per_day = self.WORLDS_DOMAINS_SPAN[self.scale.name]
        for domain in ("sleep", "objects", "export"):
            got = {}
            for worlds in (100, 1000):
                done = subprocess.run(
                    [sys.executable, str(HERE / "worlds_scale.py"), "--domain", domain, "--worlds", str(worlds)]
                    + ["--days", str(days), "--per-day", str(per_day)],
                    check=True,
                    env=os.environ,
                    capture_output=True,
                    text=True,
                )
                got[worlds] = json.loads(done.stdout.strip().splitlines()[-1])
            small, big = got[100], got[1000]
            # Peak RSS: what the domain added over the process at its start, at either size.
            growth = {w: round(got[w]["peak_rss_mb"] - got[w]["rss_before_mb"], 1) for w in got}
            self.results |= {
                f"worlds_1000_vs_100_{domain}": round(big["seconds"] / small["seconds"], 2),
                f"worlds_1000_vs_100_{domain}_peak_rss": round(big["peak_rss_mb"] / small["peak_rss_mb"], 2),
                f"worlds_{domain}_seconds": {"100": small["seconds"], "1000": big["seconds"]},
                f"worlds_{domain}_peak_rss_mb": {"100": small["peak_rss_mb"], "1000": big["peak_rss_mb"]},
                f"worlds_{domain}_rss_growth_mb": {"100": growth[100], "1000": growth[1000]},
            }
            self.note(
                f"{domain}, 1000 vs 100 worlds x {days} days x {per_day} msgs",
                f"{big['seconds']:.2f} s / {small['seconds']:.2f} s = {big['seconds'] / small['seconds']:.1f}x; "
                f"peak RSS {big['peak_rss_mb']:.0f} / {small['peak_rss_mb']:.0f} MB "
                f"(+{growth[1000]:.0f} / +{growth[100]:.0f} MB over the process's start)",
                "linear: 10x, target <= 11x; peak RSS flat",
            )

    def export(self):
        """``export_seconds_per_day``: bench/export_days.py's range run on the CLI's instance, in a
        process of its own (it sets the embedded default's environment: DAGSTER_HOME and the rest)."""
        days, repeat = self.EXPORT_DAYS[self.scale.name]
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp, "export.json")
            subprocess.run(
                [
                    sys.executable,
                    str(HERE / "export_days.py"),
                    "--days",
                    str(days),
                    "--repeat",
                    str(repeat),
                    "--per-day-only",
                    str(result),
                ],
                check=True,
                env=os.environ,
            )
            got = json.loads(result.read_text())
        self.results |= got
        self.note(
            f"analyst export of a {days}-day range (`export --no-marts`'s run, median of {repeat})",
            f"{got['export_seconds_per_day']:.3f} s per day",
            "target ≤ 0.1 s per day",
        )

    def rss(self):
        """Peak RSS of a process ingesting a file of ``rss_messages`` messages."""
        s = self.scale
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp, "rss.jsonl")
            n = generate_year(path, s.rss_messages, 10, seed=3)
            store = fresh_store()
            child = subprocess.run(
                [sys.executable, str(HERE / "ingest_rss.py"), store.url, str(path)],
                capture_output=True,
                text=True,
                check=True,
                env=os.environ,
            )
            got = json.loads(child.stdout.strip().splitlines()[-1])
        self.results |= {"ingest_peak_rss_mb": got["peak_rss_mb"], "ingest_peak_rss_messages": n}
        self.note(
            f"peak RSS ingesting {n:,} messages ({path.name}, {got['mb']:.0f} MB file)",
            f"{got['peak_rss_mb']:.0f} MB, {got['seconds']:.1f} s = {n / got['seconds']:,.0f} msg/s",
            "target < 300 MB",
        )

    def incremental(self):
        """Needs operations.materialize(mode="changed") and operations.repair()."""
        from memory_pipeline import operations
        from memory_pipeline.events.ingest import ingest_file

        started = time.perf_counter()
        for window, lo, hi in YEAR_RANGES:
            report = operations.materialize(window, lo, hi, mode="changed", instance=self.instance, defs=self.defs)
            assert report.success, report
        unchanged = time.perf_counter() - started
        self.results["unchanged_rerun_ratio"] = round(unchanged / self.backfill_s, 3)
        self.note(
            "unchanged re-run of the range (mode changed)",
            f"{unchanged:.2f} s = {unchanged / self.backfill_s:.1%} of the first run",
            "target <= 10%",
        )

        # Today's system rolls first, as the daily schedule builds them: the repair then pays only
        # for what the late message changed, not for every world's first roll.
        calls = ok_calls(self.store)
        assert operations.run_system_rolls(instance=self.instance, defs=self.defs).success
        rolls_calls = ok_calls(self.store) - calls
        self.results["system_rolls_first_build_llm_calls"] = rolls_calls
        self.note("today's system rolls built before the late message (all worlds)", f"{rolls_calls} LLM calls")

        calls = ok_calls(self.store)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp, "late.jsonl")
            at = datetime(YEAR, 6, 15, 15, 0, tzinfo=TZ)
            path.write_bytes(
                orjson.dumps(event("late-1", "bench-w0", "bw0-late", "user", "late note on compost", at)) + b"\n"
            )
            assert ingest_file(self.store, path).inserted == 1
        started = time.perf_counter()
        report = operations.repair(as_of="", instance=self.instance, defs=self.defs)
        took = time.perf_counter() - started
        assert report.success, report
        new_calls = ok_calls(self.store) - calls
        from memory_pipeline.lib.store.tables import llm_ledger

        with self.store.connect() as conn:  # which assets made the calls (the newest ones)
            newest = conn.execute(
                select(llm_ledger.c.asset)
                .where(llm_ledger.c.outcome == "ok")
                .order_by(llm_ledger.c.call_id.desc())
                .limit(new_calls)
            ).scalars()
            by_asset = dict(sorted(Counter(newest).items()))
        self.results |= {
            "incremental_partitions_rerun": report.partitions,
            "incremental_llm_calls": new_calls,
            "incremental_llm_calls_by_asset": by_asset,
        }
        self.note(
            "one message appended to a past day, then repair()",
            f"{report.partitions} partitions re-run, {new_calls} LLM calls ({by_asset}), {took:.2f} s",
            "that day, its month, its year, and that world's system roll",
        )


STAGES = (
    "ingest",
    "worlds",
    "worlds_domains",
    "backfill",
    "per_partition",
    "launched",
    "sleep",
    "reads",
    "server",
    "objects",
    "export",
    "rss",
    "incremental",
)


def table(rows) -> str:
    lines = ["| measurement | value | floor / baseline / target |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    parser.add_argument("--messages", type=int, help="override the scale's data set size (trying the benchmark out)")
    parser.add_argument("--reads", type=int, help="override the scale's number of views timed in the read stage")
    parser.add_argument(
        "--sleep-days", type=int, help="override the scale's nights in the sleep stage (quick 30, full 365)"
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated stages left out (ingest, worlds, worlds_domains, backfill, per_partition, launched, sleep, reads, server, "
        "objects, export, rss, incremental)",
    )
    parser.add_argument(
        "--only", default="", help="comma-separated stages run alone, e.g. --only reads or --only ingest,worlds,rss"
    )
    args = parser.parse_args()
    scale = SCALES[args.scale]
    if args.messages:
        scale = dataclasses.replace(scale, messages=args.messages, rss_messages=min(scale.rss_messages, args.messages))
    if args.reads:
        scale = dataclasses.replace(scale, reads=args.reads)
    if args.sleep_days:
        SLEEP_DAYS[scale.name] = args.sleep_days
    skip = set(filter(None, args.skip.split(",")))
    only = set(filter(None, args.only.split(",")))
    unknown = (skip | only) - set(STAGES)
    if unknown:
        parser.error(f"unknown stage(s) {sorted(unknown)}; stages: {', '.join(STAGES)}")
    if only:
        skip = set(STAGES) - only
    if "incremental" not in skip and "backfill" in skip:
        parser.error("the incremental stage measures against the backfill's instance: run both")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    bench = Bench(scale, out)
    bench.skip = skip
    started = time.perf_counter()
    failure = None
    print(f"benchmark, scale {scale.name}: PostgreSQL {PG.split('@')[-1]}, Redis {REDIS.split('@')[-1]}", flush=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            events = Path(tmp, "events.jsonl")
            # The stages that read the year's data set (the others build their own)
            needs_data = not {"ingest", "backfill", "per_partition", "reads", "incremental"} <= skip
            if needs_data:
                n = generate_year(events, scale.messages, scale.worlds)
                bench.note("data", f"{n:,} messages over {YEAR} for {scale.worlds} worlds")
            if not needs_data:
                store = None
            elif "ingest" in skip:  # the data is still needed: ingested once, not measured
                from memory_pipeline.events.ingest import ingest_file

                store = fresh_store()
                ingest_file(store, events)
            else:
                with bench.stage("ingest"):
                    store = bench.ingest(events, n)
            if "worlds" not in skip:
                with bench.stage("worlds"):
                    bench.worlds(with_backfill="backfill" not in skip)
            if "worlds_domains" not in skip:
                with bench.stage("worlds_domains"):
                    bench.worlds_domains()
            if "backfill" not in skip:
                with bench.stage("backfill"):
                    bench.backfill_and_floors(store, events, n)
                if "per_partition" not in skip:
                    with bench.stage("per_partition"):
                        bench.per_partition(events)
            if "backfill" in skip:  # else the backfill keeps the store of its last repetition
                bench.store = store
            if "sleep" not in skip:
                with bench.stage("sleep"):
                    bench.sleep()
            if "reads" not in skip:
                with bench.stage("reads"):
                    bench.reads(REDIS)
            if "server" not in skip:
                with bench.stage("server"):
                    bench.server()
            if "objects" not in skip:
                with bench.stage("objects"):
                    bench.objects()
            if "export" not in skip:
                with bench.stage("export"):
                    bench.export()
            if "rss" not in skip:
                with bench.stage("rss"):
                    bench.rss()
            if "incremental" not in skip:
                with bench.stage("incremental"):
                    bench.incremental()  # last: it needs the incremental API (operations.repair)
    except Exception as exc:  # noqa: BLE001 - reported, written, then re-raised below
        failure = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        raise
    finally:
        bench.results["seconds_total"] = round(time.perf_counter() - started, 1)
        if failure:
            bench.results["error"] = failure
        bench.results["at"] = datetime.now(UTC).isoformat(timespec="seconds")
        out.write_text(json.dumps(bench.results, indent=2, sort_keys=True) + "\n")
        print()
        print(f"## Benchmark ({scale.name}; `make bench{'-quick' if scale.name == 'quick' else ''}`)")
        print()
        print(table(bench.rows))
        print()
        print(f"written: {out}" + (f"; FAILED: {bench.results['error']}" if failure else ""))
        try:
            if getattr(bench, "instance", None) is not None:
                bench.instance.dispose()
        finally:
            drop_schemas()


if __name__ == "__main__":
    main()
