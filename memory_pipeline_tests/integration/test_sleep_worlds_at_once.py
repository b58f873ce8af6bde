"""Seed 003's stages run per world: light and deep sleep ask the model about up to
``memory.sleep.worlds_at_once`` worlds at once, each in a thread with a client of its own, while
each world's writes (its memories, its state record, its calls' ledger rows) stay in the run's thread,
in the worlds' order. A provider's latency is then waited out for several worlds together. After a
failure the worlds already asked are still written; on SQLite one world at a time. The provider is
the local OpenAI-compatible fake server."""

from __future__ import annotations

import json
import threading
import time
from datetime import date

import pytest
from sqlalchemy import func, select

from memory_pipeline import domains
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.llm.client import LLMHardFailure
from memory_pipeline.lib.settings import ConfigError
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.sleep import memory as mem
from memory_pipeline.sleep.config import SleepConfig
from memory_pipeline.sleep.context import SleepContext, worlds_at_once
from memory_pipeline.sleep.deep import run_deep_sleep
from memory_pipeline.sleep.light import run_light_sleep
from memory_pipeline.sleep.tables import semantic_memory_snapshots, sleep_runs
from memory_pipeline_tests.conftest import CST, conversation, cst, fresh_schema
from memory_pipeline_tests.fake_openai import FakeOpenAI

D = date(2026, 3, 2)
WORLDS = ["w1", "w2", "w3"]


def _events() -> list[dict]:
    events = []
    for n, world in enumerate(WORLDS):
        events += conversation(
            world,
            f"s-{world}",
            cst(2026, 3, 2, 9 + n),
            [f"{world}: 我喜欢吃辣", "好的", f"{world} planted tomatoes in the garden today", "nice"],
        )
    return events


def _day(ingest) -> None:
    ingest(_events())


def _ctx(store, tmp_path, llm=None, **cfg) -> SleepContext:
    config = SleepConfig(log_dir=str(tmp_path / "logs"), **cfg).validate()
    return SleepContext(store, llm or LLMClient(store, asset="sleep_test", partition=D.isoformat()), config, CST)


def _provider(store, server) -> LLMClient:
    # a timeout past the barrier's: on a loaded machine the three threads' first calls may be slow
    return LLMClient(
        store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0,
        asset="sleep_light_sleep", partition=D.isoformat(), timeout_seconds=600, breaker_failures=100,
    )  # fmt: skip


def _world_of(body) -> str:
    said = json.dumps(body["messages"], ensure_ascii=False)
    return next(w for w in WORLDS if f"{w}:" in said)


class Together:
    """Each world's first request waits until ``parties`` have arrived (a barrier); counts the
    requests in flight at once (``peak``). ``fail``: the worlds whose requests get a 500."""

    def __init__(self, parties: int | None, fail: frozenset[str] = frozenset()):
        self.barrier = threading.Barrier(parties, timeout=300) if parties else None
        self.fail, self.now, self.peak, self.lock = fail, 0, 0, threading.Lock()
        self.seen: set[str] = set()

    def __call__(self, body) -> tuple[str, object]:
        world = _world_of(body)
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            first = world not in self.seen
            self.seen.add(world)
        try:
            if first and self.barrier is not None:
                self.barrier.wait()  # BrokenBarrierError after its timeout: the worlds came one by one
            else:
                time.sleep(0.02)
            return ("status", 500) if world in self.fail else ("ok", f"nothing new for {world}")
        finally:
            with self.lock:
                self.now -= 1


def _records(store, stage: str) -> dict[str, str]:
    with store.connect() as conn:
        q = select(sleep_runs.c.world_id, sleep_runs.c.status).where(sleep_runs.c.stage == stage)
        return dict(conn.execute(q).tuples().all())


def _ledger(store) -> dict[str, int]:
    with store.connect() as conn:
        q = select(llm_ledger.c.outcome, func.count()).where(llm_ledger.c.task == "light_sleep")
        return dict(conn.execute(q.group_by(llm_ledger.c.outcome)).tuples().all())


def test_light_sleep_asks_the_model_about_its_worlds_at_once(store, ingest, tmp_path):
    """Three worlds' calls are in flight together (the provider answers none until all three have
    come); each world's record and ledger row are written, and the counts are the run's whole."""
    _day(ingest)
    with FakeOpenAI() as server:
        together = Together(3)
        server.step = together
        ctx = _ctx(store, tmp_path, llm=_provider(store, server))
        result = run_light_sleep(ctx, D)
        sent = len(server.requests)
    assert together.peak == result.worlds_at_once == 3  # 4 configured, one thread per world asked
    assert _records(store, "light_sleep") == {"*": "done", "w1": "done", "w2": "done", "w3": "done"}
    assert result.worlds == 3 and result.llm_calls == sent == 3
    assert _ledger(store) == {"ok": 3} and ctx.llm.stats.calls == 3  # the threads' calls, in the run's count


def test_worlds_at_once_write_what_one_world_at_a_time_writes(store, ingest, tmp_path):
    """The offline model, light then deep sleep: at 4 at once in one store, at 1 in another with
    the same events, the same memories (ids included), snapshots and records."""
    _day(ingest)

    def picture(store) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]], dict[str, str]]:
        with store.connect() as conn:
            active = mem.load_active(conn, WORLDS)
            s = semantic_memory_snapshots.c
            snaps = conn.execute(select(s.world_id, s.memory_id).order_by(s.world_id, s.memory_id)).tuples().all()
        memories = sorted((w, m.id, m.content) for w, ms in active.items() for m in ms)
        return memories, list(snaps), _records(store, "deep_sleep")

    at_four = _ctx(store, tmp_path)
    assert worlds_at_once(at_four) == 4
    light, deep = run_light_sleep(at_four, D), run_deep_sleep(at_four, D)
    assert (light.worlds_at_once, deep.worlds_at_once) == (3, 3) and light.created >= 6
    with fresh_schema() as url:
        other = Store(url)
        ensure_schema(other, domains.version_locations())
        path = tmp_path / "same.jsonl"
        path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in _events()), encoding="utf-8")
        ingest_file(other, path)
        at_one = _ctx(other, tmp_path, worlds_at_once=1)
        light, deep = run_light_sleep(at_one, D), run_deep_sleep(at_one, D)
        assert (light.worlds_at_once, deep.worlds_at_once) == (1, 1)
        alone = picture(other)
    together = picture(store)
    assert together == alone and together[0] and together[1]
    assert set(together[2].values()) == {"done"}


def test_a_failed_world_fails_the_run_and_the_worlds_asked_with_it_are_written(store, ingest, tmp_path):
    """w2's call fails (a 500, no retry) while w1's and w3's are in flight with it: the run raises
    w2's failure, naming its world; w2's record says failed, and w1 and w3 are written (their calls
    were made: the next run does not pay for them again). Every call has its ledger row."""
    _day(ingest)
    with FakeOpenAI() as server:
        server.step = Together(3, fail=frozenset({"w2"}))
        with pytest.raises(LLMHardFailure) as failed:
            run_light_sleep(_ctx(store, tmp_path, llm=_provider(store, server)), D)
    assert "light_sleep of world w2, day 2026-03-02: nothing of this attempt was written" in failed.value.__notes__
    assert _records(store, "light_sleep") == {"*": "failed", "w1": "done", "w2": "failed", "w3": "done"}
    assert _ledger(store) == {"ok": 2, "error": 1}
    # The next run asks only w2, and finishes the day.
    with FakeOpenAI() as server:
        server.step = Together(None)
        again = run_light_sleep(_ctx(store, tmp_path, llm=_provider(store, server)), D)
        assert [_world_of(b) for b in server.requests] == ["w2"]
    assert again.reused == 2 and _records(store, "light_sleep")["*"] == "done"


def test_on_sqlite_a_stage_asks_one_world_at_a_time(tmp_path):
    """SQLite's writers wait for each other: whatever worlds_at_once says, one request in flight."""
    lite = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    ensure_schema(lite, domains.version_locations())
    path = tmp_path / "day.jsonl"
    events = []
    for n, world in enumerate(WORLDS):
        events += conversation(world, f"s-{world}", cst(2026, 3, 2, 9 + n), [f"{world}: 我喜欢吃辣", "好的"])
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    ingest_file(lite, path)
    with FakeOpenAI() as server:
        together = Together(None)
        server.step = together
        ctx = _ctx(lite, tmp_path, llm=_provider(lite, server), worlds_at_once=4)
        assert worlds_at_once(ctx) == 1
        result = run_light_sleep(ctx, D)
    assert together.peak == result.worlds_at_once == 1 and result.llm_calls == 3
    assert _records(lite, "light_sleep") == {"*": "done", "w1": "done", "w2": "done", "w3": "done"}


@pytest.mark.parametrize("value", [0, 9])
def test_worlds_at_once_is_within_1_to_8(value):
    with pytest.raises(ConfigError, match="memory.sleep.worlds_at_once"):
        SleepConfig(worlds_at_once=value).validate()
