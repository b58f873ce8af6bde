"""Missed nights caught up through Dagster's own machinery: the scheduler daemon's iteration
(``launch_scheduled_runs``: which missed ticks of the running schedules it evaluates, in an order
it shuffles) and the run queue daemon's (``QueuedRunCoordinatorDaemon`` on the production queue:
FIFO, the ``llm`` pool), in process with the clock set (Dagster's ``freeze_time``), each launched
run executed where it is launched. One night runs, three are missed, the daemon comes back at 10:00,
then the next night: every day ends up done, each stage of a day after the stage it needs, deep
sleep of day N after day N-1's, and no run fails."""

from __future__ import annotations

import logging
from datetime import datetime

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
from memory_pipeline.sleep.tables import semantic_memories, sleep_runs
from memory_pipeline_tests.conftest import conversation, cst

SCHEDULES = ("sleep_light_schedule", "sleep_deep_schedule", "sleep_autobiography_schedule")
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
    # older ones); light sleep's requests every missed day, deep sleep's and the autobiography's
    # wait for the stage they need, whichever the daemon evaluated first.
    missed_tick = cst(2026, 3, 6, 2, 0).timestamp()
    light = ticks_of(instance, remote["sleep_light_schedule"])
    assert [(t, s) for t, s, _r in light[1:]] == [(missed_tick, TickStatus.SUCCESS)]
    deep = ticks_of(instance, remote["sleep_deep_schedule"])
    assert [(t, s) for t, s, _r in deep[1:]] == [(missed_tick + 3600, TickStatus.SKIPPED)]
    assert "2026-03-03 waits for sleep_light_sleep of that day" in deep[-1][2]
    auto = ticks_of(instance, remote["sleep_autobiography_schedule"])
    assert [s for _t, s, _r in auto[1:]] == [TickStatus.SKIPPED] and "waits for sleep_deep_sleep" in auto[-1][2]
    caught = instance.get_runs(limit=1)[0]  # the missed days as ONE light run, oldest first
    assert caught.job_name == "sleep_light_job" and caught.status == DagsterRunStatus.SUCCESS
    assert (caught.tags["dagster/asset_partition_range_start"], caught.tags["dagster/asset_partition_range_end"]) == (
        "2026-03-03",
        "2026-03-05",
    )
    assert len(instance.get_runs()) == 4

    for hour in (2, 3, 4):  # the next night: deep sleep and the autobiography catch up in order
        tick(context, cst(2026, 3, 7, hour, 0, 30))
    runs = instance.get_runs()
    assert len(runs) == 7 and all(r.status == DagsterRunStatus.SUCCESS for r in runs), [
        (r.job_name, r.status) for r in runs
    ]
    deep_run = next(r for r in runs if r.job_name == "sleep_deep_job")  # newest first
    assert (
        deep_run.tags["dagster/asset_partition_range_start"],
        deep_run.tags["dagster/asset_partition_range_end"],
    ) == (
        "2026-03-03",
        "2026-03-06",
    )
    days = ["2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05", "2026-03-06"]
    for key in ("sleep_light_sleep", "sleep_deep_sleep", "sleep_autobiography"):
        assert sorted(instance.get_materialized_partitions(AssetKey(key))) == days
    # Order, from each day's state record: deep sleep of N after N-1's and after light sleep of N;
    # the autobiography of N after deep sleep of N.
    with store.connect() as conn:
        finished = {
            (stage, day.isoformat()): at
            for stage, day, at, status in conn.execute(
                select(sleep_runs.c.stage, sleep_runs.c.day, sleep_runs.c.finished_at, sleep_runs.c.status).where(
                    sleep_runs.c.world_id == DAY_ROW
                )
            )
            if status == "done"
        }
        contents = set(
            conn.execute(select(semantic_memories.c.content).where(semantic_memories.c.status == "active")).scalars()
        )
    assert len(finished) == 15
    for prev, day in zip(days, days[1:], strict=False):
        assert finished[("deep_sleep", prev)] < finished[("deep_sleep", day)]
    for day in days:
        assert finished[("light_sleep", day)] < finished[("deep_sleep", day)] < finished[("autobiography_cron", day)]
    assert "我不喜欢吃辣" in contents and "我喜欢吃辣" not in contents  # 03-04's deep sleep saw 03-02's fact
