"""Seed 001 §3 (持续压缩不再永久压住夜间任务) on PostgreSQL: the nightly deep review and a compaction
run in another OS process take turns on the world's one lease, batch by batch, by least-recent
claim; a deep job that a run could not start (the lease busy) stays queued and is asked for again,
by ``worker.deep_worlds`` and by the Dagster sensor, until it has run."""

from __future__ import annotations

import json
import multiprocessing
import time
from datetime import timedelta

import pytest
from dagster import DagsterRunStatus, RunRequest, SkipReason, build_sensor_context, instance_for_test
from dagster._core.test_utils import create_run_for_test
from sqlalchemy import select, update

from memory_pipeline.definitions import build_defs
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store, leases
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.objects import graph, timeline, worker
from memory_pipeline.objects.config import ObjectsConfig
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.logic import JobMode, JobOrigin
from memory_pipeline.objects.tables import objects_jobs, objects_receipts, objects_worlds
from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource
from memory_pipeline_tests.conftest import CST, conversation, cst
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_objects import W, add
from memory_pipeline_tests.integration.test_objects_reliability import _with_objects


def _compact_answer(body) -> str:
    """The provider's answer to a compaction batch: a short head covering every node (JSON text)."""
    nodes = json.loads(body["messages"][-1]["content"])["nodes"]
    return json.dumps({"summary": "training notes", "covers": [n["id"] for n in nodes]})


def _compacting(url: str, api_base: str) -> None:
    """The other OS process: a compaction run (compact jobs only) with a provider model."""
    store = Store(url)
    llm = LLMClient(store, model="openai/fake-model", api_base=api_base, api_key="k", max_retries=0)
    worker.run_worker(ObjectsContext(store, llm, ObjectsConfig(retry_backoff_seconds=0)), modes=[JobMode.COMPACT])


def _wait(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.05)


def _modes(store) -> list[str]:
    with store.connect() as conn:
        r = objects_receipts.c
        return conn.execute(select(r.mode).where(r.mode != "organize").order_by(r.revision)).scalars().all()


def _status(store, job_id: int) -> str:
    with store.connect() as conn:
        return conn.execute(select(objects_jobs.c.status).where(objects_jobs.c.job_id == job_id)).scalar_one()


def test_the_nightly_deep_review_takes_turns_with_a_compaction_run_in_another_process(store, ingest):
    octx = _with_objects(store, ingest, n=2)
    add(ingest, [f"interval training note {i} " * 3 for i in range(160)], conv="c3")
    timeline.intake(octx)
    compact = worker.enqueue(octx, W, "compact")  # about 23 batches of a model taking 0.3 s each
    deep = worker.enqueue(octx, W, "deep", origin=JobOrigin.NIGHTLY)
    with FakeOpenAI() as server:
        server.latency = 0.3
        server.answer = _compact_answer
        other = multiprocessing.get_context("spawn").Process(target=_compacting, args=(store.url, server.api_base))
        other.start()
        try:
            _wait(lambda: _modes(store).count("compact") >= 2, 120, "the other process to be compacting")
            rep = worker.run_worker(octx, modes=[JobMode.DEEP])  # meets the world's lease held by the other
            compact_when_deep_ended = _status(store, compact["job_id"])
        finally:
            other.join(300)
    assert rep.lease_busy == [] and rep.batches == 2 and rep.committed == 1  # one review batch, then its end
    assert _status(store, deep["job_id"]) == "done" and compact_when_deep_ended != "done"
    assert other.exitcode == 0 and _status(store, compact["job_id"]) == "done"
    modes = _modes(store)
    at = modes.index("deep")  # the review took its turn between compaction batches
    assert modes.count("deep") == 1 and "compact" in modes[:at] and "compact" in modes[at + 1 :]


def test_a_deep_job_a_run_could_not_start_stays_queued_and_is_asked_for_again(store, ingest):
    _with_objects(store, ingest, n=2)
    night = cst(2026, 1, 11, 1, 0)  # before 02:50: no review is due, only the queued one is wanted
    octx = ObjectsContext(store, LLMClient(store), ObjectsConfig(retry_backoff_seconds=0), clock=lambda: night)
    worker.enqueue(octx, W, "deep", origin=JobOrigin.NIGHTLY, local_day=night.date())
    assert worker.deep_worlds(octx) == [(W, night.date())]
    leases.try_acquire(store, graph.LEASE_ASSET, W, "a-compaction-batch", timedelta(seconds=360), now=night)
    rep = worker.run_worker(octx, modes=[JobMode.DEEP], max_wait=0)
    assert (rep.batches, rep.lease_busy) == (0, [W])
    leases.release(store, graph.LEASE_ASSET, W, "a-compaction-batch")
    assert worker.deep_worlds(octx) == [(W, night.date())]  # still queued: asked for again
    assert worker.enqueue_deep(octx) == []  # (and never created twice)
    rep = worker.run_worker(octx, modes=[JobMode.DEEP])
    assert rep.jobs_done == 1 and worker.deep_worlds(octx) == []


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def defs(pg_url, redis_url, tmp_path):
    cfg = tmp_path / "memory.yaml"
    cfg.write_text("memory:\n  objects:\n    retry_backoff_seconds: 0\n")
    return build_defs(
        {
            "memory_store": MemoryStoreResource(database_url=pg_url),
            "kv_cache": CacheResource(redis_url=redis_url),
            "llm": LLMResource(),
            "memory_config": MemoryConfigResource(config_file=str(cfg)),
        }
    )


def _deep_sensor(defs, instance):
    sensor = defs.get_sensor_def("objects_deep_review_sensor")
    with build_sensor_context(instance=instance, resources=defs.resources) as ctx:
        return sensor(ctx)


def test_the_deep_review_sensor_asks_again_for_a_queued_deep_job_until_it_has_run(defs, instance, store, ingest):
    ingest(conversation(W, "a", cst(2026, 1, 10, 9), ["garden", "compost"]))
    defs.get_job_def("objects_compaction_job").execute_in_process(instance=instance)
    today = utcnow().astimezone(CST).date()
    octx = ObjectsContext(store, LLMClient(store), ObjectsConfig(retry_backoff_seconds=0))
    with store.begin() as conn:  # tonight's review was created (its date marked) but has not run
        conn.execute(update(objects_worlds).where(objects_worlds.c.world_id == W).values(last_deep_date=today))
    job = worker.enqueue(octx, W, "deep", origin=JobOrigin.NIGHTLY, local_day=today)
    first = _deep_sensor(defs, instance)
    assert isinstance(first, RunRequest) and first.tags["memory_pipeline/objects_origin"] == "nightly"
    again = _deep_sensor(defs, instance)  # a later tick, the job still queued: asked for again
    assert isinstance(again, RunRequest) and again.run_key != first.run_key
    in_flight = create_run_for_test(instance, job_name="objects_deep_review_job", status=DagsterRunStatus.STARTED)
    assert isinstance(_deep_sensor(defs, instance), SkipReason)  # not while a deep review run is in flight
    instance.report_run_failed(in_flight)  # that run ended without reviewing (say, the lease stayed busy)
    request = _deep_sensor(defs, instance)
    assert isinstance(request, RunRequest)
    run = defs.get_job_def("objects_deep_review_job").execute_in_process(
        instance=instance, run_config=request.run_config, tags=request.tags
    )
    assert run.success and _status(store, job["job_id"]) == "done"
    assert isinstance(_deep_sensor(defs, instance), SkipReason)  # it has run: nothing to ask for
