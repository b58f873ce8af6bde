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
import itertools
import json
import multiprocessing
import os
import random
import resource
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import create_engine, event, func, select, text

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import objects_floor  # noqa: E402  (bench/ is on the path: run as a script, or by bench/run.py)

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


def _postgres_cpu_seconds() -> float | None:
    """User + system CPU of every PostgreSQL process on this machine (its backends and its writers),
    from /proc; None when they cannot be read (another machine, another user)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, found = 0, False
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if not name.startswith("postgres"):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        found = True
    return total / tick if found else None


def _client_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _concurrent_worker(url: str, at_once: int, start: Any, done: Any, end: Any) -> None:
    """One of ``--workers`` processes: its own store and client, ready before the start, then
    ``run_worker`` over every pending event (the worlds' leases share them out, as between runs)."""
    store = Store(url)
    cfg = ObjectsConfig(retry_backoff_seconds=0, worlds_at_once=at_once)
    octx = ObjectsContext(store, LLMClient(store, asset="bench"), cfg)
    with store.connect():  # a connection open before the clock starts
        pass
    cpu = _client_cpu_seconds()
    start.wait()
    rep = worker.run_worker(octx)
    done.put((rep.batches, rep.model_calls, rep.zero_progress_batches, _client_cpu_seconds() - cpu))
    end.wait()  # the backends' CPU is read while they are alive (it is lost when they exit)
    store.engine.dispose()


def _run_concurrently(url: str, workers: int, at_once: int) -> tuple[float, int, int, int, float, float | None]:
    """``workers`` processes organizing at once: (seconds from the start to the last one done,
    batches, model calls, batches without progress, the processes' CPU seconds, PostgreSQL's)."""
    mp = multiprocessing.get_context("spawn")  # each imports afresh: no engine or lock inherited
    start, end, done = mp.Barrier(workers + 1), mp.Barrier(workers + 1), mp.Queue()
    procs = [mp.Process(target=_concurrent_worker, args=(url, at_once, start, done, end)) for _ in range(workers)]
    for p in procs:
        p.start()
    start.wait()
    pg_before = _postgres_cpu_seconds()
    t = time.perf_counter()
    results = [done.get(timeout=3600) for _ in procs]
    secs = time.perf_counter() - t
    pg_after = _postgres_cpu_seconds()
    end.wait()
    for p in procs:
        p.join()
    pg = pg_after - pg_before if pg_before is not None and pg_after is not None else None
    batches, calls, zero, cpu = (sum(r[i] for r in results) for i in range(4))
    return secs, int(batches), int(calls), int(zero), float(cpu), pg


def _model_latency(ms: float) -> None:
    """Every offline model call of this process waits ``ms`` first, as a provider's answer does (a
    wait that holds no lock, as a request's): the offline model is otherwise instant, the worst case
    for worlds at once."""
    answer = LLMClient._call_offline

    def slow(self: LLMClient, req: Any) -> Any:
        time.sleep(ms / 1000)
        return answer(self, req)

    LLMClient._call_offline = slow  # type: ignore[method-assign]  # this benchmark's process only


def measure(
    events: int = 10_000,
    worlds: int = 10,
    floor: bool = True,
    say: Any = print,
    workers: int = 1,
    at_once: int = ObjectsConfig.worlds_at_once,
    latency_ms: float = 0.0,
) -> dict[str, Any]:
    """The organize measurement (``bench/run.py``'s objects stage calls it too): the keys of
    latest.json (``objects_organize_*``). With ``floor``, the set-based floor
    (``bench/objects_floor.py``) runs on a copy of the store taken before the real run, and its
    rows are compared with the real run's. ``at_once``: the run's ``worlds_at_once``; ``latency_ms``:
    each organize call of the measured run (and the floor's) waits that long first."""
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    copy = f"{schema}_floor"
    admin = create_engine(PG)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    out: dict[str, Any] = {"objects_organize_events": events, "objects_organize_worlds": worlds}
    try:
        store = Store(f"{PG}?options=-csearch_path%3D{schema}")
        ensure_schema(store, domains.version_locations())
        with TemporaryDirectory() as tmp:
            path = Path(tmp) / "events.jsonl"
            generate(path, events, worlds)
            ingest_file(store, path)
        octx = ObjectsContext(
            store, LLMClient(store, asset="bench"), ObjectsConfig(retry_backoff_seconds=0, worlds_at_once=at_once)
        )
        t = time.perf_counter()
        timeline.intake(octx)
        for w in range(worlds):
            worker.enqueue(octx, f"bench-{w}", "compact")
        comp = worker.run_worker(octx)
        t_compact = time.perf_counter() - t
        pending = sum(worker.pending_counts(octx).values())
        say(
            f"hot timeline + explicit compaction: {comp.committed} batches, {pending} pending events in {t_compact:.1f}s"
        )
        worker.enqueue_hourly(octx)
        if floor:
            objects_floor.clone(admin, schema, copy)
        # itertools.count: a step is atomic, so the counts hold with the run's worlds in threads
        statements = itertools.count()
        trips = {"checkouts": itertools.count(), "commits": itertools.count(), "rollbacks": itertools.count()}

        def count(*_args: Any) -> None:
            next(statements)

        def counter(key: str) -> Any:
            def one(*_args: Any) -> None:
                next(trips[key])

            return one

        hooks = [
            (store.engine, "before_cursor_execute", count),
            (store.engine.pool, "checkout", counter("checkouts")),  # each one a liveness ping (pool_pre_ping)
            (store.engine, "commit", counter("commits")),
            (store.engine, "rollback", counter("rollbacks")),
        ]
        if workers > 1:
            secs, batches, calls, zero, cpu, pg_cpu = _run_concurrently(
                f"{PG}?options=-csearch_path%3D{schema}", workers, at_once
            )
            pg = f"{1000 * pg_cpu / pending:.2f} ms" if pg_cpu is not None else "unread"
            say(
                f"organize, {workers} worker processes at once, {at_once} world(s) at once in each: {pending} events "
                f"in {secs:.1f}s = {pending / secs:,.1f} events/s; {calls / pending:.3f} model calls per event; "
                f"{batches} batches, {zero} without progress; "
                f"CPU per event: workers {1000 * cpu / pending:.2f} ms, PostgreSQL {pg}"
            )
            out.update(
                objects_organize_workers=workers,
                objects_organize_events_per_s=round(pending / secs, 1),
                objects_organize_seconds=round(secs, 2),
                objects_organize_calls_per_event=round(calls / pending, 3),
                objects_organize_zero_progress_batches=zero,
            )
            store.engine.dispose()
            return out
        if latency_ms:
            _model_latency(latency_ms)  # after the compaction: only organize's calls wait
            out["objects_organize_model_latency_ms"] = latency_ms
        for target, name, fn in hooks:
            event.listen(target, name, fn)
        pg_cpu, client_cpu = _postgres_cpu_seconds(), _client_cpu_seconds()
        t = time.perf_counter()
        rep = worker.run_worker(octx)
        secs = time.perf_counter() - t
        client_cpu = _client_cpu_seconds() - client_cpu
        pg_after = _postgres_cpu_seconds()
        pg_cpu = pg_after - pg_cpu if pg_cpu is not None and pg_after is not None else None
        for target, name, fn in hooks:
            event.remove(target, name, fn)
        sent = next(statements)
        made = {key: next(n) for key, n in trips.items()}
        with store.connect() as conn:
            continues = conn.execute(select(func.count()).where(objects_receipts.c.outcome == "continue")).scalar()
        say(
            f"organize, {rep.worlds_at_once} world(s) at once: {pending} events in {secs:.1f}s = "
            f"{pending / secs:,.1f} events/s; "
            f"{rep.model_calls} model calls = {rep.model_calls / max(1, pending):.3f} per event; "
            f"{sent / max(1, rep.batches):.1f} statements per batch ({rep.batches} batches); "
            f"outcomes {rep.outcomes}; continue {continues}; batches without progress {rep.zero_progress_batches} "
            f"(failed claims {rep.failures}, corrections {rep.corrections})"
        )
        per = max(1, rep.batches)
        say(
            f"per batch: {sent / per:.1f} statements, {made['commits'] / per:.2f} commits, "
            f"{made['checkouts'] / per:.2f} pool checkouts (pings), {made['rollbacks'] / per:.2f} rollbacks; "
            f"CPU per event: client {1000 * client_cpu / max(1, pending):.2f} ms, PostgreSQL "
            + (f"{1000 * pg_cpu / max(1, pending):.2f} ms" if pg_cpu is not None else "unread")
        )
        out.update(
            objects_organize_worlds_at_once=rep.worlds_at_once,
            objects_organize_events_per_s=round(pending / secs, 1),
            objects_organize_seconds=round(secs, 2),
            objects_organize_calls_per_event=round(rep.model_calls / max(1, pending), 3),
            objects_organize_statements_per_batch=round(sent / max(1, rep.batches), 1),
            objects_organize_zero_progress_batches=rep.zero_progress_batches,
            objects_organize_commits_per_batch=round(made["commits"] / per, 2),
            objects_organize_checkouts_per_batch=round(made["checkouts"] / per, 2),
            objects_organize_client_cpu_ms_per_event=round(1000 * client_cpu / max(1, pending), 2),
        )
        if pg_cpu is not None:
            out["objects_organize_postgres_cpu_ms_per_event"] = round(1000 * pg_cpu / max(1, pending), 2)
        if floor:
            fstore = Store(f"{PG}?options=-csearch_path%3D{copy}")
            fctx = ObjectsContext(fstore, LLMClient(fstore, asset="bench"), ObjectsConfig(retry_backoff_seconds=0))
            got = objects_floor.organize(fctx)
            fstore.engine.dispose()
            differ = objects_floor.compare(admin, schema, copy)
            say(
                f"floor (set-based): {got['events']} events, {got['pages']} pages in {got['seconds']:.2f}s "
                f"(reads {got['read_seconds']:.2f}s, offline model and checks {got['python_seconds']:.2f}s, "
                f"writes {got['write_seconds']:.2f}s; {got['statements']} statements) = "
                f"{got['events'] / got['seconds']:,.1f} events/s; real / floor {secs / got['seconds']:.1f}x; "
                f"rows {'identical' if not differ else differ}"
            )
            out.update(
                objects_organize_floor_events_per_s=round(got["events"] / got["seconds"], 1),
                objects_organize_floor_seconds=round(got["seconds"], 2),
                objects_organize_floor_python_seconds=round(got["python_seconds"], 2),
                objects_organize_ratio_to_floor=round(secs / got["seconds"], 1),
                objects_organize_floor_rows_match=not differ,
            )
        store.engine.dispose()
        return out
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {copy} CASCADE"))
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--worlds", type=int, default=10)
    parser.add_argument("--no-floor", action="store_true", help="the real run alone (no set-based floor)")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="organize in this many processes at once, as that many runs of the `llm` pool would (no floor)",
    )
    parser.add_argument(
        "--worlds-at-once",
        type=int,
        default=ObjectsConfig.worlds_at_once,
        help="the run's memory.objects.worlds_at_once (threads of one run; default: the configured default)",
    )
    parser.add_argument(
        "--model-latency-ms",
        type=float,
        default=0.0,
        help="each organize call waits this long first, as a provider's answer would (one process only)",
    )
    args = parser.parse_args()
    if args.model_latency_ms and args.workers > 1:
        parser.error("--model-latency-ms applies to one process: leave --workers at 1")
    floor = not args.no_floor and args.workers == 1
    out = measure(
        args.events,
        args.worlds,
        floor=floor,
        workers=args.workers,
        at_once=args.worlds_at_once,
        latency_ms=args.model_latency_ms,
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
