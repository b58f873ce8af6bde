"""Runs executed in a command's own process (``memory-pipeline backfill``, ``sleep backfill``: Dagster's
execute_in_process) have no run worker the daemon watches: killed with SIGKILL, such a run stays
"Started" in the instance. Each carries the host and pid of its process in its tags; a run of this
host whose process is gone is marked failed by the next operation here and by dead_runs_sensor."""

from __future__ import annotations

from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunsFilter,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from memory_pipeline.lib.store.leases import process_gone, this_process

HOST_TAG, PID_TAG = "memory_pipeline/host", "memory_pipeline/pid"


def process_tags() -> dict[str, str]:
    host, pid = this_process()
    return {HOST_TAG: host, PID_TAG: str(pid)}


def fail_dead_runs(instance: DagsterInstance) -> list[str]:
    """Mark failed every run the instance has as started or starting whose process (by its tags) ran
    on this host and is gone; one line each, naming the run and its pid. A run of another host is
    left to that host: its pid means nothing here."""
    host, _ = this_process()
    runs = instance.get_runs(
        RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING], tags={HOST_TAG: host})
    )
    lines = []
    for run in runs:
        pid = run.tags.get(PID_TAG, "")
        if not pid.isdigit() or not process_gone(host, int(pid)):
            continue
        why = f"its process (pid {pid} on host {host}) is gone (killed) without finishing"
        instance.report_run_failed(run, message=why)
        lines.append(f"run {run.run_id} ({run.job_name}) was still marked started but {why}: marked it failed")
    return lines


# Running by default: it launches nothing and writes nothing but the failure of a run whose process
# is provably gone, which is what an operator would otherwise do by hand in the UI.
@sensor(
    name="dead_runs_sensor",
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.RUNNING,
    description="Marks failed a run that a command executed in its own process (backfill, sleep backfill) "
    "on this host and that is still marked started although that process is gone (killed). Launches no run; "
    "the tick names each run it failed.",
)
def dead_runs_sensor(context: SensorEvaluationContext) -> SkipReason:
    lines = fail_dead_runs(context.instance)
    for line in lines:
        context.log.warning(line)
    return SkipReason("; ".join(lines) if lines else "no started run of this host has lost its process")
