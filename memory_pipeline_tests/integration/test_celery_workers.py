"""MEMORY_EXECUTOR=celery on a real Redis broker: a run whose queue no worker consumes says so as it
starts (queue name, no consumer) and runs once a worker starts; `memory-pipeline celery-worker`
writes the broker URL mode 0600 in folders of mode 0700, and stops on SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from dagster import DagsterInstance, execute_job, reconstructable

from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline_tests.celery_probe import celery_probe
from memory_pipeline_tests.conftest import REDIS_URL
from memory_pipeline_tests.dagster_stack import spawn_logged

BIN = Path(sys.executable).parent
WARNING = 'celery queue "dagster": no consumer'


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _messages(instance: DagsterInstance, run_id: str) -> list[tuple[int, str]]:
    """(level, message) of the run's log lines."""
    return [(record.level, record.user_message) for record in instance.all_logs(run_id)]


def _run_in_thread(instance: DagsterInstance) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def go() -> None:
        with execute_job(reconstructable(celery_probe), instance=instance, raise_on_error=False) as result:
            box["success"], box["run_id"] = result.success, result.run_id

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, box


def _latest_run_id(instance: DagsterInstance) -> str | None:
    runs = instance.get_runs(limit=1)
    return runs[0].run_id if runs else None


@pytest.fixture
def broker(monkeypatch):
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    monkeypatch.setenv("MEMORY_CELERY_BROKER_URL", REDIS_URL)
    yield REDIS_URL
    client.flushdb()
    client.close()


def test_a_queue_without_consumer_is_named_at_launch_and_the_worker_keeps_the_broker_url_private(
    tmp_path, broker, monkeypatch
):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = DagsterInstance.get()
    worker = None
    try:
        thread, box = _run_in_thread(instance)
        run_id = _wait(lambda: _latest_run_id(instance), 60, "the run to be created")
        _wait(lambda: any(WARNING in m for _, m in _messages(instance, run_id)), 60, "the no-consumer warning")
        (line,) = [(lvl, m) for lvl, m in _messages(instance, run_id) if WARNING in m]
        assert line[0] == logging.WARNING, line
        assert "MEMORY_CELERY_BROKER_URL" in line[1] and "redis://" not in line[1]
        assert thread.is_alive()  # the step waits for a worker

        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        log = tmp_path / "worker.log"
        worker = spawn_logged(
            [str(BIN / "memory-pipeline"), "celery-worker", "-n", "probe-1", "--concurrency", "1"], env, log
        )
        thread.join(timeout=240)
        assert not thread.is_alive(), log.read_text(errors="replace")[-3000:]
        assert box == {"success": True, "run_id": run_id}

        folder = home / "dagster_celery" / "config" / "probe-1"
        module = folder / "dagster_celery_config.py"
        assert stat.S_IMODE(module.stat().st_mode) == 0o600
        for f in (folder, folder.parent, folder.parent.parent):
            assert stat.S_IMODE(f.stat().st_mode) == 0o700, f
        assert f"broker_url = {broker!r}" in module.read_text()

        # With the worker up, the next run names it and warns of nothing.
        thread, box = _run_in_thread(instance)
        thread.join(timeout=240)
        assert box.get("success"), log.read_text(errors="replace")[-3000:]
        said = [m for _, m in _messages(instance, box["run_id"])]
        assert not any(WARNING in m for m in said)
        assert any(m.startswith('celery queue "dagster": consumed by probe-1@') for m in said), said

        worker.send_signal(signal.SIGTERM)  # the command became the worker: the signal reaches it
        assert worker.wait(timeout=60) == 0
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        instance.dispose()


def test_the_worker_name_becomes_a_folder_so_a_path_is_refused():
    done = subprocess.run(
        [str(BIN / "memory-pipeline"), "celery-worker", "-n", "../x"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "--name '../x'" in done.stderr
