"""Seed 001 §3: one valid lease per world, and a worker per agent: a run advances up to
``worlds_at_once`` worlds at once, each in a thread of its own, so a provider's latency is waited
out for several worlds together. The run's batch limit, its report, its model counts and the
provider's breaker hold across the threads; on SQLite a run takes one world at a time. The
provider is the local OpenAI-compatible fake server."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from memory_pipeline import domains
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.objects import offline_rules, timeline, worker
from memory_pipeline.objects.config import ObjectsConfig
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.tables import objects_event_state, objects_jobs
from memory_pipeline_tests.conftest import cst, event
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_objects import octx_for
from memory_pipeline_tests.integration.test_objects_model import _submission
from memory_pipeline_tests.integration.test_objects_reliability import _leases_now

WORLDS = ["w1", "w2", "w3"]


def _ready(store, tmp_path: Path, per_world: int) -> dict[str, list[str]]:
    """``per_world`` events in each world, ingested, in the hot timeline and compacted: pending."""
    ids: dict[str, list[str]] = {}
    lines = []
    for world in WORLDS:
        evs = [
            event(world, f"c-{world}", "user", f"{world} plans a greenhouse, note {i}", cst(2026, 1, 10, 9, i))
            for i in range(per_world)
        ]
        ids[world] = [e["message_id"] for e in evs]
        lines += evs
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines), encoding="utf-8")
    ingest_file(store, path)
    octx = octx_for(store)
    timeline.intake(octx)
    for world in WORLDS:
        worker.enqueue(octx, world, "compact")
    worker.run_worker(octx)
    return ids


def _states(store) -> dict[str, str]:
    with store.connect() as conn:
        return dict(conn.execute(select(objects_event_state.c.event_id, objects_event_state.c.state)).all())


def _provider_octx(store, server, **cfg) -> ObjectsContext:
    # a timeout past the barrier's: on a loaded machine the three threads' first calls may be slow
    llm = LLMClient(
        store, model="openai/fake-model", api_base=server.api_base, api_key="test", max_retries=0,
        asset="objects_test", timeout_seconds=600,
    )  # fmt: skip
    return ObjectsContext(store, llm, ObjectsConfig(retry_backoff_seconds=0, **cfg))


class InFlight:
    """The provider's answer, counting the requests it answers at once (``peak``)."""

    def __init__(self, barrier: threading.Barrier | None = None):
        self.barrier, self.now, self.peak, self.lock = barrier, 0, 0, threading.Lock()
        self.waited = 0

    def __call__(self, body) -> str:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            first = self.barrier is not None and self.waited < self.barrier.parties
            self.waited += first
        try:
            if first:
                assert self.barrier is not None
                self.barrier.wait()  # raises BrokenBarrierError after its timeout: the calls came one by one
            else:
                time.sleep(0.02)
            return _submission(body)
        finally:
            with self.lock:
                self.now -= 1


def test_a_run_waits_for_the_model_of_its_worlds_at_once(store, tmp_path):
    """Three worlds' first calls are in flight together (the provider answers none until all three
    have come); every event is linked, and the report and the client's counts are the run's whole,
    as the ledger has it."""
    ids = _ready(store, tmp_path, per_world=2)
    with FakeOpenAI() as server:
        answer = InFlight(threading.Barrier(3, timeout=300))
        server.answer = answer
        octx = _provider_octx(store, server)
        for world in WORLDS:
            worker.enqueue(octx, world, "organize")
        rep = worker.run_worker(octx)
    assert answer.peak == rep.worlds_at_once == 3  # 4 configured, one thread per world with work
    assert {_states(store)[e] for world in WORLDS for e in ids[world]} == {"linked"}
    assert rep.failures == 0 and rep.jobs_done == 3 and rep.committed == 6
    assert rep.model_calls == len(server.requests) == 6
    with store.connect() as conn:
        ok = conn.execute(
            select(func.count())
            .select_from(llm_ledger)
            .where(llm_ledger.c.task == "objects_organize", llm_ledger.c.outcome == "ok")
        ).scalar()
    assert octx.llm.stats.calls == ok == 6


def test_the_run_takes_exactly_its_max_batches_across_its_worlds(store, tmp_path):
    """max_batches bounds the run, not each thread: 4 batches over three worlds of 3 events each,
    and what they committed is what is linked; the next run finishes the rest."""
    ids = _ready(store, tmp_path, per_world=3)
    octx = octx_for(store)
    for world in WORLDS:
        worker.enqueue(octx, world, "organize")
    rep = worker.run_worker(octx, max_batches=4)
    assert rep.batches == 4
    linked = [e for world in WORLDS for e in ids[world] if _states(store)[e] == "linked"]
    assert len(linked) == rep.committed >= 1
    rest = worker.run_worker(octx)
    assert rest.failures == 0
    assert {_states(store)[e] for world in WORLDS for e in ids[world]} == {"linked"}


def test_an_open_breaker_stops_every_world_of_the_run_with_the_whole_report(store, tmp_path):
    """The provider down: the breaker opens after its 3 failures, the thread refused stops the run,
    the others stop after their batch, and the run's report counts every failed claim of every
    thread, one per request sent. No event is blocked: an outage never blocks (seed 001 §5 and the
    breaker's rule)."""
    ids = _ready(store, tmp_path, per_world=2)
    with FakeOpenAI() as server:
        for _ in range(20):
            server.push("status", 500)
        llm = LLMClient(
            store, model="openai/fake-model", api_base=server.api_base, api_key="test", max_retries=0,
            asset="objects_test", breaker_failures=3, breaker_cooldown_seconds=3600,
        )  # fmt: skip
        octx = ObjectsContext(store, llm, ObjectsConfig(retry_backoff_seconds=0))
        for world in WORLDS:
            worker.enqueue(octx, world, "organize")
        with pytest.raises(worker.ProviderStopped) as stopped:
            worker.run_worker(octx)
        sent = len(server.requests)
    rep = stopped.value.report
    assert 3 <= sent <= 3 + len(WORLDS) - 1  # the breaker's 3, and the calls already in flight
    assert rep.failures == sent and rep.blocked_events == 0 and rep.jobs_failed == 0
    # each thread's next call after the breaker opened is refused without a request, then it stops
    assert octx.llm.stats.failures == sent and 1 <= octx.llm.stats.refused <= len(WORLDS)
    with store.connect() as conn:
        outcomes = conn.execute(
            select(llm_ledger.c.outcome, func.count())
            .where(llm_ledger.c.task == "objects_organize")
            .group_by(llm_ledger.c.outcome)
        ).all()
    assert dict(outcomes) == {"error": sent, "breaker_open": octx.llm.stats.refused}
    assert {_states(store)[e] for world in WORLDS for e in ids[world]} == {"pending"}
    assert stopped.value.world in WORLDS


def test_on_sqlite_a_run_takes_one_world_at_a_time(tmp_path):
    """SQLite's writers wait for each other: whatever worlds_at_once says, one world at a time (one
    request in flight), and every event is linked."""
    lite = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    ensure_schema(lite, domains.version_locations())
    ids = _ready(lite, tmp_path, per_world=2)
    with FakeOpenAI() as server:
        answer = InFlight()
        server.answer = answer
        octx = _provider_octx(lite, server, worlds_at_once=4)
        assert worker.worlds_at_once(octx) == 1
        for world in WORLDS:
            worker.enqueue(octx, world, "organize")
        rep = worker.run_worker(octx)
    assert answer.peak == rep.worlds_at_once == 1 and rep.failures == 0 and rep.committed == 6
    assert {_states(lite)[e] for world in WORLDS for e in ids[world]} == {"linked"}


def test_one_world_at_a_time_is_the_run_as_before(store, tmp_path):
    """worlds_at_once 1: one request in flight over three worlds."""
    ids = _ready(store, tmp_path, per_world=2)
    with FakeOpenAI() as server:
        answer = InFlight()
        server.answer = answer
        octx = _provider_octx(store, server, worlds_at_once=1)
        for world in WORLDS:
            worker.enqueue(octx, world, "organize")
        rep = worker.run_worker(octx)
    assert answer.peak == rep.worlds_at_once == 1 and rep.committed == 6
    assert {_states(store)[e] for world in WORLDS for e in ids[world]} == {"linked"}


def test_an_interrupted_run_stops_every_world_and_leaves_no_lease_nor_running_job(store, tmp_path, monkeypatch):
    """The run's own thread interrupted inside a batch (the process told to stop): its batch is given
    back as in a run of one world at a time, the other threads finish the batch in hand and stop;
    no world's lease stays held, no job reads running, and the next run links every event."""
    ids = _ready(store, tmp_path, per_world=2)
    real = offline_rules.organize

    def model(*args, **kwargs):
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(offline_rules, "organize", model)
    octx = octx_for(store)
    for world in WORLDS:
        worker.enqueue(octx, world, "organize")
    with pytest.raises(KeyboardInterrupt):
        worker.run_worker(octx)
    assert _leases_now(store) == []
    with store.connect() as conn:
        jobs = set(conn.execute(select(objects_jobs.c.status).where(objects_jobs.c.mode == "organize")).scalars())
    assert jobs <= {"queued", "done"} and "queued" in jobs
    states = _states(store)
    assert {states[e] for world in WORLDS for e in ids[world]} <= {"pending", "linked"}
    monkeypatch.setattr(offline_rules, "organize", real)
    assert worker.run_worker(octx).failures == 0
    assert {_states(store)[e] for world in WORLDS for e in ids[world]} == {"linked"}


@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
def test_objects_run_says_how_many_worlds_it_advanced_at_once(kind, store, tmp_path, monkeypatch):
    """`objects run` says the worlds it advanced at once: three worlds with work, worlds_at_once 4,
    three on PostgreSQL; on SQLite one, and it says why."""
    from typer.testing import CliRunner

    from memory_pipeline.cli import app

    url = store.url if kind == "postgres" else f"sqlite:///{tmp_path / 'memory.sqlite'}"
    cfg = tmp_path / "memory.yaml"
    cfg.write_text("memory:\n  objects:\n    worlds_at_once: 4\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_DATABASE_URL", url)
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(cfg))
    lines = [
        event(world, f"c-{world}", "user", f"{world} plans a greenhouse", cst(2026, 1, 10, 9, 0)) for world in WORLDS
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines), encoding="utf-8")
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(path)]).exit_code == 0
    for world in WORLDS:
        assert runner.invoke(app, ["objects", "organize", world, "--now"]).exit_code == 0
    ran = runner.invoke(app, ["objects", "run"])
    assert ran.exit_code == 0, ran.output
    said = " ".join(ran.output.split())
    if kind == "postgres":
        assert said.endswith("; worlds at once 3"), said
    else:
        assert said.endswith("; worlds at once 1 (of worlds_at_once 4: one on SQLite)"), said
