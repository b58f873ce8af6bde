"""Runs launched as the production instance launches them, for the benchmark's comparisons.

The daemon (a backfill, the run queue) ends in ``instance.launch_run``: the default run launcher
asks the code server to start a run worker process, and the job's executor (multiprocess, the
project's default) starts a process per step. ``CodeServer`` is that path without the daemon: a
``dagster api grpc`` process serving the code location (as a deployment's code server does), runs
created from its remote job and launched with ``instance.launch_run``, one at a time, each waited
for. What is left out is the queue's and the backfill daemon's own polling between runs, which
would only add to each run.

The code server is this process's environment with ``env`` over it (a value None unsets the
variable): the store's URL, the batch size. The run and step workers inherit it from the server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCATION = "memory_pipeline"


class LaunchedRunFailed(RuntimeError):
    pass


class CodeServer:
    """``with CodeServer(instance, env) as server: server.run(window, first, last)``."""

    def __init__(self, instance, env: dict[str, str | None], ready_timeout: int = 300):
        self.instance, self.env, self.ready_timeout = instance, env, ready_timeout

    def __enter__(self) -> CodeServer:
        from dagster._core.workspace.context import WorkspaceProcessContext
        from dagster._core.workspace.load_target import GrpcServerTarget
        from dagster._grpc.client import DagsterGrpcClient
        from dagster._grpc.server import wait_for_grpc_server

        self._tmp = tempfile.TemporaryDirectory()
        socket = str(Path(self._tmp.name, "grpc.sock"))
        args = [sys.executable, "-m", "dagster", "api", "grpc", "--module-name", "memory_pipeline.definitions"]
        args += ["--working-directory", str(ROOT), "--location-name", LOCATION, "--socket", socket]
        env = {k: v for k, v in {**os.environ, **self.env}.items() if v is not None}  # None: unset
        self.process = subprocess.Popen(args, env=env, cwd=ROOT)
        self.client = DagsterGrpcClient(socket=socket)
        try:
            wait_for_grpc_server(self.process, self.client, args, timeout=self.ready_timeout)
            self._workspace = WorkspaceProcessContext(
                self.instance, GrpcServerTarget(host="localhost", port=None, socket=socket, location_name=LOCATION)
            )
            self.context = self._workspace.__enter__().create_request_context()
        except BaseException:
            self._stop()
            raise
        self.location = self.context.get_code_location(LOCATION)
        (self.repo,) = self.location.get_repositories().values()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._workspace.__exit__(*exc)
        finally:
            self._stop()

    def _stop(self) -> None:
        """The server exits once its runs are done; it is ended (by its pid) if it does not."""
        try:
            self.client.shutdown_server()
        except Exception:  # noqa: BLE001 - already gone
            pass
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._tmp.cleanup()

    def run(self, window: str, first: str, last: str, *, poll: float = 0.05) -> float:
        """One run of ``window``'s job over [first, last] (one partition when equal), launched and
        waited for: seconds from its creation to its end. Raises if it did not succeed."""
        from dagster._core.definitions.selector import JobSubsetSelector
        from dagster._core.storage.tags import (
            ASSET_PARTITION_RANGE_END_TAG,
            ASSET_PARTITION_RANGE_START_TAG,
            PARTITION_NAME_TAG,
        )

        from memory_pipeline.operations import run_config
        from memory_pipeline.operations.registry import targets

        target = targets()[window]
        config = run_config(window)
        tags = {"memory_pipeline/operation": window}
        if first == last:
            tags[PARTITION_NAME_TAG] = first
        else:
            tags |= {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}
        started = time.perf_counter()
        job = self.location.get_job(
            JobSubsetSelector(
                location_name=self.location.name, repository_name=self.repo.name, job_name=target.job, op_selection=None
            )
        )
        plan = self.location.get_execution_plan(
            job, config, step_keys_to_execute=None, known_state=None, instance=self.instance
        ).execution_plan_snapshot
        run = self.instance.create_run(
            job_name=job.name,
            run_id=None,
            run_config=config,
            resolved_op_selection=None,
            step_keys_to_execute=plan.step_keys_to_execute,
            op_selection=None,
            status=None,
            root_run_id=None,
            parent_run_id=None,
            tags={**job.tags, **tags},
            job_snapshot=job.job_snapshot,
            execution_plan_snapshot=plan,
            parent_job_snapshot=job.parent_job_snapshot,
            remote_job_origin=job.get_remote_origin(),
            job_code_origin=job.get_python_origin(),
            asset_selection=None,
            asset_check_selection=None,
            asset_graph=self.repo.asset_graph,
        )
        self.instance.launch_run(run.run_id, self.context)
        while not (done := self.instance.get_run_by_id(run.run_id)).is_finished:
            time.sleep(poll)
        seconds = time.perf_counter() - started
        if done.status.value != "SUCCESS":
            failures = [
                e.dagster_event.event_specific_data.error.message.strip()
                for e in self.instance.all_logs(run.run_id)
                if e.dagster_event and e.dagster_event.is_step_failure
            ]
            raise LaunchedRunFailed(
                f"launched {window} run {first}..{last} ({run.run_id}) ended {done.status.value}: "
                + (failures[0] if failures else "no step failure recorded (see the run's events)")
            )
        return seconds
