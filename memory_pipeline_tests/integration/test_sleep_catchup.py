"""Missed nights caught up through Dagster's own machinery: the scheduler daemon's iteration
(``launch_scheduled_runs``: which missed ticks of the running schedules it evaluates, in an order
it shuffles) and the run queue daemon's (``QueuedRunCoordinatorDaemon`` on the production queue:
FIFO, the ``llm`` pool), in process with the clock set (Dagster's ``freeze_time``), each launched
run executed where it is launched. One night runs, three are missed, the daemon comes back at 10:00,
then the next night: every day ends up done, each stage of a day after the stage it needs, deep
sleep of day N after day N-1's, and no run fails."""

from __future__ import annotations

import logging
from datetime import date, datetime

import pytest
import yaml
from dagster import AssetKey, DagsterRunStatus, RunsFilter, instance_for_test
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.scheduler.instigation import TickStatus
from dagster._core.test_utils import freeze_time
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon
from dagster._scheduler.scheduler import launch_scheduled_runs
from sqlalchemy import select

from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline.sleep.light import DAY_ROW
from memory_pipeline.sleep.snapshots import snapshot
from memory_pipeline.sleep.tables import semantic_memories, sleep_runs
from memory_pipeline_tests.conftest import conversation, cst

SCHEDULES = ("sleep_light_schedule", "sleep_deep_schedule", "sleep_autobiography_schedule")
ORDER = ("light_sleep", "deep_sleep", "autobiography_cron")  # a day's stages, in order
LOG = logging.getLogger("sleep_catchup_test")


def production_queue() -> dict:
    """The production instance's run queue and pools (its storage stays the test's)."""
    prod = yaml.safe_load((REPO_ROOT / "deploy" / "production" / "dagster.yaml").read_text(encoding="utf-8"))
    return {"run_coordinator": prod["run_coordinator"], "concurrency": prod["concurrency"]}


@pytest.fixture
def deployment(pg_url, redis_url, monkeypatch, tmp_path):
    monkeypatch.setenv("CATCHUP_DATABASE_URL", pg_url)
    monkeypatch.setenv("CATCHUP_REDIS_URL", redis_url)
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "data"))
    with instance_for_test(overrides=production_queue(), synchronous_run_launcher=True) as instance:
        origin = InProcessCodeLocationOrigin(
            LoadableTargetOrigin(
                module_name="memory_pipeline_tests.catchup_location",
                attribute="defs",
                working_directory=str(REPO_ROOT),
            ),
            location_name="memory_pipeline",
        )
        with WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as context:
            yield instance, context


def schedules(context):
    location = next(iter(context.create_request_context().get_code_location_entries().values())).code_location
    (repo,) = location.get_repositories().values()
    return {name: repo.get_schedule(name) for name in SCHEDULES}


def tick(context, at: datetime) -> None:
    """One scheduler pass at ``at``, then the run queue until it is empty (each launched run runs)."""
    with freeze_time(at):
        list(launch_scheduled_runs(context, LOG, end_datetime_utc=at, iteration_times={}))
        queue = QueuedRunCoordinatorDaemon(interval_seconds=1)
        for _ in range(10):
            if not context.instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.QUEUED])):
                break
            list(queue.run_iteration(context))


def ticks_of(instance, remote):
    out = instance.get_ticks(remote.get_remote_origin_id(), remote.selector_id)
    return sorted((t.timestamp, t.status, t.skip_reason or "") for t in out)


def test_missed_nights_are_caught_up_oldest_first_each_stage_after_the_one_it_needs(deployment, store, ingest):
    instance, context = deployment
    ingest(
        conversation("w1", "s-1", cst(2026, 3, 2, 9), ["我喜欢吃辣", "好", "garden tomatoes tomatoes", "ok"])
        + conversation("w1", "s-2", cst(2026, 3, 3, 9), ["我喜欢喝茶；住在杭州", "好"])
        + conversation("w1", "s-3", cst(2026, 3, 4, 9), ["我不喜欢吃辣", "哦"])
        + conversation("w2", "s-9", cst(2026, 3, 5, 20), ["marathon pacing marathon", "ok"])
    )
    remote = schedules(context)
    with freeze_time(cst(2026, 3, 3, 1, 0)):  # the schedules are turned on before the first night
        for s in remote.values():
            instance.start_schedule(s)
    for hour in (2, 3, 4):  # the night of 03-03: day 03-02, each stage at its hour
        tick(context, cst(2026, 3, 3, hour, 0, 30))
    runs = instance.get_runs()
    assert len(runs) == 3 and all(r.status == DagsterRunStatus.SUCCESS for r in runs)

    # Down for the nights of 03-04, 03-05 and 03-06; back at 10:00 on 03-06.
    tick(context, cst(2026, 3, 6, 10, 0))
    # Dagster evaluates the newest missed tick of each schedule (no partition set: no replay of the
    # older ones), in an order it shuffles. The first one requests ONE run of the nights job over the
    # missed days, day by day (each day's light, deep and autobiography before the next day's), up
    # to the last day all of whose stages are due at its hour (03-05 at 04:00, 03-04 before); the
    # others skip while that run is queued.
    missed_tick = cst(2026, 3, 6, 2, 0).timestamp()
    evaluated = {
        name: ticks_of(instance, remote[name])[1:]  # the first night's tick is [0]
        for name in SCHEDULES
    }
    assert sorted(t for ticks in evaluated.values() for t, _s, _r in ticks) == [
        missed_tick,
        missed_tick + 3600,
        missed_tick + 7200,
    ]
    statuses = sorted(s.value for ticks in evaluated.values() for _t, s, _r in ticks)
    assert statuses == sorted(s.value for s in (TickStatus.SUCCESS, TickStatus.SKIPPED, TickStatus.SKIPPED))
    skipped = [r for ticks in evaluated.values() for _t, s, r in ticks if s == TickStatus.SKIPPED]
    assert all("of sleep_nights_job is not finished" in r for r in skipped)
    caught = instance.get_runs(limit=1)[0]
    assert caught.job_name == "sleep_nights_job" and caught.status == DagsterRunStatus.SUCCESS
    assert caught.tags["dagster/asset_partition_range_start"] == "2026-03-03"
    assert caught.tags["dagster/asset_partition_range_end"] in ("2026-03-04", "2026-03-05")
    assert len(instance.get_runs()) == 4

    for hour in (2, 3, 4):  # the next night: what is left, each stage after the one it needs
        tick(context, cst(2026, 3, 7, hour, 0, 30))
    runs = instance.get_runs()
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs), [(r.job_name, r.status) for r in runs]
    days = ["2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05", "2026-03-06"]
    for key in ("sleep_light_sleep", "sleep_deep_sleep", "sleep_autobiography"):
        assert sorted(instance.get_materialized_partitions(AssetKey(key))) == days
    # Order, from each day's state record: every place finished after the one before it (light
    # sleep of N+1 after the autobiography of N: it reads what day N left).
    with store.connect() as conn:
        finished = [
            (day, ORDER.index(stage), at)
            for stage, day, at, status in conn.execute(
                select(sleep_runs.c.stage, sleep_runs.c.day, sleep_runs.c.finished_at, sleep_runs.c.status).where(
                    sleep_runs.c.world_id == DAY_ROW
                )
            )
            if status == "done"
        ]
        contents = set(
            conn.execute(select(semantic_memories.c.content).where(semantic_memories.c.status == "active")).scalars()
        )
    assert len(finished) == 15
    in_order = [at for _d, _r, at in sorted(finished)]
    assert in_order == sorted(in_order)
    assert "我不喜欢吃辣" in contents and "我喜欢吃辣" not in contents  # 03-04's deep sleep saw 03-02's fact
    # Each day's snapshot is that day's set: 03-04's negation is in no earlier snapshot.
    assert "我不喜欢吃辣" not in {r["content"] for r in snapshot(store, "w1", date(2026, 3, 3)).values()}
    assert "我喜欢喝茶；住在杭州" not in {r["content"] for r in snapshot(store, "w1", date(2026, 3, 2)).values()}
