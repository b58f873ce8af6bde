"""A multiprocessing child (a step process of the multiprocess executor) exits when its parent (the
run worker) is killed; without the lifeline it lives on as an orphan (the fault this prevents). Both
ways a step can start: spawned by the run worker (Dagster's default) or forked by a forkserver the
run worker started (this code location's executor, defs/_shared/deployment.py)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from memory_pipeline.lib import lifeline


def _step(watch: bool, pid_file: str) -> None:
    if watch:
        assert lifeline.exit_with_parent() is True
        assert lifeline.exit_with_parent() is False  # once per process
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(120)


def _run_worker(start_method: str, watch: bool, pid_file: str) -> None:
    child = multiprocessing.get_context(start_method).Process(target=_step, args=(watch, pid_file))
    child.start()
    child.join()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _wait(what: str, probe, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
@pytest.mark.parametrize("watch", [True, False], ids=["lifeline", "without"])
def test_a_step_process_exits_when_its_run_worker_is_killed(tmp_path: Path, watch: bool, start_method: str) -> None:
    pid_file = tmp_path / "step.pid"
    worker = multiprocessing.get_context("spawn").Process(target=_run_worker, args=(start_method, watch, str(pid_file)))
    worker.start()
    try:
        _wait("the step process to start", lambda: pid_file.exists() and pid_file.read_text(), 60)
        step = int(pid_file.read_text())
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(10)
        if watch:
            _wait(f"step process {step} to exit", lambda: not _alive(step), 30)
        else:  # the orphan lives on (what the lifeline prevents); checked for a while, then ended here
            time.sleep(1.0)
            assert _alive(step)
            os.kill(step, signal.SIGKILL)
    finally:
        if worker.is_alive():
            worker.kill()


def test_no_lifeline_outside_a_multiprocessing_child() -> None:
    assert multiprocessing.parent_process() is None  # pytest's own process (a CLI, a code server alike)
    assert lifeline.exit_with_parent() is False
