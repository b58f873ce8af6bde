"""Seed 001 as Dagster assets on an ephemeral instance with the real PostgreSQL: the compaction
sensor, the hourly organize sensor (idle on an empty queue), the per-day outcomes with one check
result per partition, the 02:50 schedule and the projection."""

from __future__ import annotations

import logging

import pytest
from dagster import DagsterEventType, SkipReason, build_schedule_context, build_sensor_context, instance_for_test
from sqlalchemy import func, select

from memory_pipeline.definitions import build_defs
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.objects import logic
from memory_pipeline.objects.tables import objects_event_state, objects_jobs
from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource
from memory_pipeline_tests.conftest import CST, conversation, cst


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def defs(pg_url, redis_url, tmp_path):
    cfg = tmp_path / "memory.yaml"
    cfg.write_text(
        f"memory:\n  objects:\n    compact_threshold_tokens: 60\n    retry_backoff_seconds: 0\n"
        f"    projection_dir: {tmp_path / 'objects'}\n"
    )
    return build_defs(
        {
            "memory_store": MemoryStoreResource(database_url=pg_url),
            "kv_cache": CacheResource(redis_url=redis_url),
            "llm": LLMResource(),
            "memory_config": MemoryConfigResource(config_file=str(cfg)),
        }
    )


def _sensor(defs, name, instance, cursor=None):
    sensor = defs.get_sensor_def(name)
    with build_sensor_context(instance=instance, cursor=cursor, resources=defs.resources) as ctx:
        return sensor(ctx), ctx.cursor


def _calls(store) -> int:
    with store.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(llm_ledger)).scalar())


def test_sensors_drive_compaction_and_organize_and_days_get_one_check_result_each(
    defs, instance, store, ingest, tmp_path
):
    result, cursor = _sensor(defs, "objects_organize_sensor", instance)
    assert isinstance(result, SkipReason) and cursor  # the last check time is kept in the cursor
    assert _calls(store) == 0  # an empty queue calls no model
    ingest(
        conversation("w1", "a", cst(2026, 1, 10, 9), ["garden tomatoes planted today", "garden watering plan"] * 4)
        + conversation("w1", "b", cst(2026, 1, 11, 9), ["compost turned", "compost is warm"] * 4)
    )
    # the compaction sensor sees the threshold only once the timeline holds the events
    defs.get_job_def("objects_compaction_job").execute_in_process(instance=instance)
    ingest(conversation("w1", "c", cst(2026, 1, 11, 12), ["harvest basket ready"] * 20))
    result, _ = _sensor(defs, "objects_compaction_sensor", instance)
    assert not isinstance(result, SkipReason)
    run = defs.get_job_def("objects_compaction_job").execute_in_process(instance=instance)
    assert run.success
    with store.connect() as conn:
        states = dict(
            conn.execute(select(objects_event_state.c.state, func.count()).group_by(objects_event_state.c.state)).all()
        )
    assert states.get("pending", 0) > 0
    result, _ = _sensor(defs, "objects_organize_sensor", instance, cursor)
    assert not isinstance(result, SkipReason) and result.tags["memory_pipeline/objects_origin"] == "hourly"
    assert defs.get_job_def("objects_organize_job").execute_in_process(instance=instance).success
    mat = (
        instance.fetch_materializations(defs.get_assets_def("objects_archive").key, limit=1)
        .records[0]
        .asset_materialization.metadata
    )
    assert mat["zero_progress_batches"].value == 0 and mat["model_calls"].value > 0
    assert mat["worlds_at_once"].value == 1  # one world with work: one thread, whatever the default 4
    assert (tmp_path / "objects" / "w1" / "README.md").exists()

    job = defs.get_job_def("objects_outcomes_job")
    run = job.execute_in_process(
        instance=instance,
        tags={"dagster/asset_partition_range_start": "2026-01-10", "dagster/asset_partition_range_end": "2026-01-11"},
    )
    assert run.success
    evals = [
        e.dagster_event.event_specific_data
        for e in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    ]
    assert sorted(e.partition for e in evals) == ["2026-01-10", "2026-01-11"] and all(e.passed for e in evals)
    meta = {
        r.partition_key: r.asset_materialization.metadata["status"].value
        for r in instance.fetch_materializations(defs.get_assets_def("objects_event_outcomes").key, limit=10).records
    }
    assert meta["2026-01-10"] == "complete"  # every event of the day linked / archive_only
    assert meta["2026-01-11"] in ("complete", "partial")

    # late data: an event of 2026-01-10 arrives after the day's outcomes were materialized
    result, _ = _sensor(defs, "objects_outcomes_stale_sensor", instance)
    assert isinstance(result, SkipReason)
    ingest(conversation("w1", "late", cst(2026, 1, 10, 23), ["late garden note"]))
    defs.get_job_def("objects_compaction_job").execute_in_process(instance=instance)  # enters the hot timeline
    result, _ = _sensor(defs, "objects_outcomes_stale_sensor", instance)
    assert [r.partition_key for r in result] == ["2026-01-10"]


def test_deep_review_schedule_runs_once_per_local_date(defs, instance, store, ingest):
    ingest(conversation("w1", "a", cst(2026, 1, 10, 9), ["garden"]))
    defs.get_job_def("objects_compaction_job").execute_in_process(instance=instance)
    schedule = defs.get_schedule_def("objects_deep_review_schedule")
    assert schedule.cron_schedule == "50 2 * * *" and schedule.execution_timezone == "Asia/Shanghai"

    def tick():
        with build_schedule_context(instance=instance, resources=defs.resources) as ctx:
            return schedule.evaluate_tick(ctx)

    # the schedule applies the seed's rule to the real clock: due from 02:50 CST on a quiet world
    now_local = utcnow().astimezone(CST)
    expected = logic.deep_due(now_local, None, cst(2026, 1, 10, 9))
    first = tick()
    assert bool(first.run_requests) == expected
    if expected:
        (req,) = first.run_requests
        run = defs.get_job_def("objects_deep_review_job").execute_in_process(
            instance=instance, run_config=req.run_config, tags=req.tags
        )
        assert run.success
        with store.connect() as conn:
            jobs = conn.execute(select(objects_jobs.c.mode, objects_jobs.c.status, objects_jobs.c.local_date)).all()
        assert ("deep", "done", now_local.date()) in [tuple(j) for j in jobs]
    assert not tick().run_requests  # at most once per local date


def test_a_disabled_domain_does_no_work_and_says_so(pg_url, redis_url, instance, store, ingest, tmp_path):
    cfg = tmp_path / "off.yaml"
    cfg.write_text("memory:\n  objects:\n    enabled: false\n    compact_threshold_tokens: 1\n")
    defs = build_defs(
        {
            "memory_store": MemoryStoreResource(database_url=pg_url),
            "kv_cache": CacheResource(redis_url=redis_url),
            "llm": LLMResource(),
            "memory_config": MemoryConfigResource(config_file=str(cfg)),
        }
    )
    ingest(conversation("w1", "a", cst(2026, 1, 10, 9), ["garden"] * 4))
    result, _ = _sensor(defs, "objects_compaction_sensor", instance)
    assert isinstance(result, SkipReason) and "enabled" in result.skip_message
    assert defs.get_job_def("objects_compaction_job").execute_in_process(instance=instance).success
    mat = instance.fetch_materializations(defs.get_assets_def("objects_hot_timeline").key, limit=1).records[0]
    assert mat.asset_materialization.metadata["disabled"].value is True
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(objects_event_state)).scalar() == 0


def _failure(run) -> str:
    (event,) = run.get_step_failure_events()
    return event.step_failure_data.user_failure_data.description


def test_a_negative_max_batches_or_too_few_passes_fail_the_run_naming_the_field_before_any_work(
    defs, instance, store, ingest
):
    from dagster import RunConfig

    from memory_pipeline.defs.objects.assets import ObjectsRunConfig

    ingest(conversation("w1", "a", cst(2026, 1, 10, 9), ["garden tomatoes planted today"] * 8))
    assert defs.get_job_def("objects_compaction_job").execute_in_process(instance=instance).success
    with store.connect() as conn:
        jobs_before = conn.execute(select(func.count()).select_from(objects_jobs)).scalar()
    calls_before = _calls(store)
    run = defs.get_job_def("objects_organize_job").execute_in_process(
        instance=instance,
        run_config=RunConfig(ops={"objects_archive": ObjectsRunConfig(max_batches=-1)}),
        raise_on_error=False,
    )
    assert not run.success
    assert _failure(run) == "run config: max_batches must be 0 (the configured maximum) or more, got -1"
    with store.connect() as conn:  # refused before any work: no hourly job created, no model called
        assert conn.execute(select(func.count()).select_from(objects_jobs)).scalar() == jobs_before
    assert _calls(store) == calls_before
    run = defs.get_job_def("objects_projection_job").execute_in_process(
        instance=instance,
        run_config=RunConfig(ops={"objects_markdown_projection": ObjectsRunConfig(passes=0)}),
        raise_on_error=False,
    )
    assert not run.success and _failure(run) == "run config: passes must be at least 1, got 0"


def test_run_config_counts_past_the_integer_column_fail_the_run_naming_the_field(defs, instance, store):
    from dagster import RunConfig

    from memory_pipeline.defs.objects.assets import ObjectsRunConfig

    calls_before = _calls(store)
    run = defs.get_job_def("objects_organize_job").execute_in_process(
        instance=instance,
        run_config=RunConfig(ops={"objects_archive": ObjectsRunConfig(max_batches=2_147_483_648)}),
        raise_on_error=False,
    )
    assert not run.success
    assert _failure(run) == "run config: max_batches must be at most 2,147,483,647, got 2147483648"
    run = defs.get_job_def("objects_projection_job").execute_in_process(
        instance=instance,
        run_config=RunConfig(ops={"objects_markdown_projection": ObjectsRunConfig(passes=2_147_483_648)}),
        raise_on_error=False,
    )
    assert not run.success
    assert _failure(run) == "run config: passes must be at most 2,147,483,647, got 2147483648"
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(objects_jobs)).scalar() == 0
    assert _calls(store) == calls_before


def test_a_run_whose_batches_failed_says_it_is_degraded(pg_url, redis_url, instance, store, ingest, tmp_path):
    from memory_pipeline_tests.fake_openai import FakeOpenAI

    cfg = tmp_path / "memory.yaml"
    cfg.write_text("memory:\n  objects:\n    compact_threshold_tokens: 60\n    retry_backoff_seconds: 0\n")
    ingest(conversation("w1", "a", cst(2026, 1, 10, 9), ["garden tomatoes planted today"] * 8))
    with FakeOpenAI() as server:
        for _ in range(10):
            server.push("status", 400)  # the request's own fault: failed claims that end the job
        defs = build_defs(
            {
                "memory_store": MemoryStoreResource(database_url=pg_url),
                "kv_cache": CacheResource(redis_url=redis_url),
                "llm": LLMResource(model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0),
                "memory_config": MemoryConfigResource(config_file=str(cfg)),
            }
        )
        run = defs.get_job_def("objects_compaction_job").execute_in_process(instance=instance)
    assert run.success  # the asset stands; its failed batches are retried by later runs
    key = defs.get_assets_def("objects_compaction").key
    meta = instance.fetch_materializations(key, limit=1).records[0].asset_materialization.metadata
    assert meta["degraded"].value is True and meta["failed_claims"].value >= 1
    warnings = [
        e.message for e in instance.all_logs(run.run_id) if e.level == logging.WARNING and "degraded:" in e.message
    ]
    assert warnings and "failed claim(s)" in warnings[0]
    ok = build_defs(  # the offline model: a clean run is not degraded
        {
            "memory_store": MemoryStoreResource(database_url=pg_url),
            "kv_cache": CacheResource(redis_url=redis_url),
            "llm": LLMResource(),
            "memory_config": MemoryConfigResource(config_file=str(cfg)),
        }
    )
    assert ok.get_job_def("objects_organize_job").execute_in_process(instance=instance).success
    meta = instance.fetch_materializations(ok.get_assets_def("objects_archive").key, limit=1).records[0]
    assert meta.asset_materialization.metadata["degraded"].value is False


def six_worlds_pending(store, ingest) -> dict[str, str]:
    """w1..w6, one short event each, compacted by the offline model: each world's event pending,
    so an organize run has one batch per world. {world: event id}."""
    from memory_pipeline.lib.llm import LLMClient
    from memory_pipeline.objects import timeline, worker
    from memory_pipeline.objects.config import ObjectsConfig
    from memory_pipeline.objects.context import ObjectsContext
    from memory_pipeline_tests.integration.test_objects import add

    octx = ObjectsContext(store, LLMClient(store, asset="objects_test"), ObjectsConfig(retry_backoff_seconds=0))
    events = {f"w{i}": add(ingest, [f"garden note {i}"], world=f"w{i}", conv=f"c{i}")[0] for i in range(1, 7)}
    timeline.intake(octx)
    for world in events:
        worker.enqueue(octx, world, "compact")
    worker.run_worker(octx)
    return events


def breaker_state(store) -> dict:
    """What the provider's outage left: the ledger's outcomes, each world's organize job
    (status, claims, failures in a row, backing off), the failure rows per world, the leases."""
    from memory_pipeline.lib.store.tables import partition_leases
    from memory_pipeline.objects.tables import objects_failures

    j = objects_jobs.c
    with store.connect() as conn:
        outcomes = dict(  # the provider's calls (the setup's were the offline model's)
            conn.execute(
                select(llm_ledger.c.outcome, func.count())
                .where(llm_ledger.c.model.not_like("offline/%"))
                .group_by(llm_ledger.c.outcome)
            ).all()
        )
        jobs = {
            r.world_id: (r.status, r.claims, r.consecutive_failures, r.not_before is not None)
            for r in conn.execute(select(objects_jobs).where(j.mode == "organize"))
        }
        failures = dict(
            conn.execute(select(objects_failures.c.world_id, func.count()).group_by(objects_failures.c.world_id)).all()
        )
        leases = conn.execute(select(func.count()).select_from(partition_leases)).scalar_one()
    return {"ledger": outcomes, "jobs": jobs, "failures": failures, "leases": leases}


BACKING_OFF = ("queued", 1, 0, True)  # an outage's failed claim: backing off, not counted toward the five
UNTOUCHED = ("queued", 0, 0, False)  # handed back as it was: never claimed


def test_a_provider_outage_stops_the_worker_at_the_breaker_and_hands_the_refused_batch_back(
    pg_url, redis_url, instance, store, ingest, tmp_path, monkeypatch
):
    """Six worlds, one organize batch each; the provider fails every request. With the breaker's
    threshold (5) the first five batches are failed claims (one request each, backing off 600 s),
    the sixth world's call is refused without a request: its batch is handed back untouched, the
    run stops there and fails with the breaker's one line. The next run, the provider back, does
    exactly that batch: one request, none of the failed ones again before their backoff."""
    from memory_pipeline.objects.logic import EventState
    from memory_pipeline_tests.fake_openai import FakeOpenAI
    from memory_pipeline_tests.integration.test_objects import states
    from memory_pipeline_tests.integration.test_objects_batch_protocol import _linked

    events = six_worlds_pending(store, ingest)
    cfg = tmp_path / "memory.yaml"
    # one world at a time: the breaker's five failures, then the sixth world refused, in that order
    # (test_objects_worlds_at_once.py: the breaker with worlds at once)
    cfg.write_text(
        f"memory:\n  objects:\n    retry_backoff_seconds: 600\n    worlds_at_once: 1\n"
        f"    projection_dir: {tmp_path / 'objects'}\n"
    )
    monkeypatch.setenv("MEMORY_LLM_BREAKER_FAILURES", "5")
    with FakeOpenAI() as server:
        for _ in range(50):
            server.push("status", 500)
        defs = build_defs(
            {
                "memory_store": MemoryStoreResource(database_url=pg_url),
                "kv_cache": CacheResource(redis_url=redis_url),
                "llm": LLMResource(model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0),
                "memory_config": MemoryConfigResource(config_file=str(cfg)),
            }
        )
        job = defs.get_job_def("objects_organize_job")
        down = job.execute_in_process(instance=instance, raise_on_error=False)
        assert not down.success
        assert len(server.requests) == 5
        (failure,) = [e for e in down.all_events if e.is_step_failure]
        data = failure.step_failure_data
        line = data.error.message.strip().splitlines()[0]
        assert line == (
            f"dagster._core.definitions.events.Failure: LLM provider openai/fake at {server.api_base} is failing: "
            "InternalServerError: litellm.InternalServerError: InternalServerError: OpenAIException - scripted 500 "
            "(5 consecutive failures); stopping: the batch it refused was handed back untouched; the jobs not done "
            "stay queued for the next run"
        )
        assert "partitions" not in line
        meta = {k: v.value for k, v in data.user_failure_data.metadata.items()}
        assert (meta["stopped_at_world"], meta["batches"], meta["failed_claims"], meta["committed"]) == ("w6", 5, 5, 0)
        assert instance.all_logs(down.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY) == []
        state = breaker_state(store)
        assert state["ledger"] == {"error": 5, "breaker_open": 1}
        assert state["jobs"] == {**{f"w{i}": BACKING_OFF for i in range(1, 6)}, "w6": UNTOUCHED}
        assert state["failures"] == {f"w{i}": 1 for i in range(1, 6)}  # none for w6
        assert state["leases"] == 0
        assert set(states(store).values()) == {EventState.PENDING}  # nothing blocked

        # The provider is back (the next run, here the same process: past the breaker's cooldown).
        server.script.clear()
        server.tool_answer = lambda body: [_linked(body)]
        monkeypatch.setenv("MEMORY_LLM_BREAKER_COOLDOWN_SECONDS", "0")
        again = job.execute_in_process(instance=instance, raise_on_error=False)
        assert again.success
        assert len(server.requests) == 5 + 1  # w6's batch only; w1..w5 wait for their backoff
    state = breaker_state(store)
    assert state["ledger"] == {"error": 5, "breaker_open": 1, "ok": 1}
    assert state["jobs"]["w6"][0] == "done" and all(state["jobs"][f"w{i}"] == BACKING_OFF for i in range(1, 6))
    assert states(store)[events["w6"]] == EventState.LINKED
