"""A run a command executed in its own process (``backfill``, ``sleep backfill``) and that was
killed stays "Started" in the instance; dead_runs_sensor (running by default) marks it failed without
waiting for the next command on the host, and leaves alone a run whose process lives or that ran on
another host."""

from __future__ import annotations

import subprocess
import sys

import pytest
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, build_sensor_context, instance_for_test
from dagster._core.utils import make_new_run_id

from memory_pipeline.defs._shared.dead_runs import HOST_TAG, PID_TAG, dead_runs_sensor
from memory_pipeline.lib.store.leases import this_process


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


def _started(instance: DagsterInstance, host: str, pid: int) -> str:
    run = DagsterRun(
        job_name="temporal_day_job",
        run_id=make_new_run_id(),
        status=DagsterRunStatus.STARTED,
        tags={HOST_TAG: host, PID_TAG: str(pid)},
    )
    instance.add_run(run)
    return run.run_id


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process any more
    return child.pid


def test_a_started_run_whose_process_is_gone_is_marked_failed_by_the_sensor(instance):
    host, me = this_process()
    dead = _started(instance, host, _dead_pid())
    alive = _started(instance, host, me)
    elsewhere = _started(instance, "another-host", _dead_pid())  # its pid means nothing here

    result = dead_runs_sensor.evaluate_tick(build_sensor_context(instance=instance))

    assert instance.get_run_by_id(dead).status == DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(alive).status == DagsterRunStatus.STARTED
    assert instance.get_run_by_id(elsewhere).status == DagsterRunStatus.STARTED
    assert not result.run_requests
    assert dead in result.skip_message and "is gone (killed)" in result.skip_message
    (failure,) = [
        e for e in instance.all_logs(dead) if e.dagster_event and e.dagster_event.event_type_value == "PIPELINE_FAILURE"
    ]
    assert "is gone (killed) without finishing" in failure.message

    again = dead_runs_sensor.evaluate_tick(build_sensor_context(instance=instance))
    assert again.skip_message == "no started run of this host has lost its process"
