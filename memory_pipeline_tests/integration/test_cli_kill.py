"""Fault: a command-line run (``memory-pipeline backfill``) killed with SIGKILL mid-run. Nothing
watches a run executed in the CLI's own process, so the instance keeps it "Started" and its
partition leases keep 5 minutes to run. The re-run on the same host sees that the process named by
the run's tags and the leases is gone: it marks the dead run failed, says so in one line naming the
run and its pid, and takes the leases over at once (no wait for their expiry)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus
from sqlalchemy import func, select

from memory_pipeline.lib.store import Store, leases
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline_tests.conftest import REDIS_URL
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_run_worker_kill import (
    DAY_ASSET,
    DAYS,
    HELD,
    MARKER,
    MODEL,
    answer,
    days_written,
    ingest_into,
)

CLI = str(Path(sys.executable).parent / "memory-pipeline")


def cli_env(home: Path, memory_url: str, server: FakeOpenAI) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        MEMORY_DATABASE_URL=memory_url,
        MEMORY_DATA_DIR=str(home / "data"),
        REDIS_URL=REDIS_URL,
        MEMORY_LLM_MODEL=MODEL,
        MEMORY_LLM_API_BASE=server.api_base,
        MEMORY_LLM_API_KEY="test-key",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PYTHONUNBUFFERED="1",
    )
    return env


def paid(store: Store) -> dict[tuple[str, str], int]:
    c = llm_ledger.c
    with store.connect() as conn:
        q = select(c.partition, c.world_id, func.count()).where(c.outcome == "ok").group_by(c.partition, c.world_id)
        return {(p, w): n for p, w, n in conn.execute(q)}


def test_a_killed_cli_backfill_is_marked_failed_and_its_rerun_takes_over_at_once(pg_url, tmp_path):
    store = Store(pg_url)
    ingest_into(store, tmp_path / "events")
    home = tmp_path / "dagster_home"
    home.mkdir()
    command = [CLI, "backfill", "day", "--from", DAYS[0], "--to", DAYS[-1]]
    with FakeOpenAI() as server:
        server.answer = answer
        server.hold(MARKER)
        env = cli_env(home, pg_url, server)
        first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert server.held.wait(timeout=300), "the backfill never reached the held day's call"
        finally:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=60)
        lease = leases.current(store, DAY_ASSET, DAYS[HELD])
        assert lease is not None and lease.pid == first.pid and lease.dead
        dead_run = lease.holder
        instance = DagsterInstance.from_config(str(home))
        try:
            assert instance.get_run_by_id(dead_run).status == DagsterRunStatus.STARTED  # nothing watched it
            requests_at_kill = len(server.requests)
            server.release()  # the killed run's call in flight ends; the re-run's calls are answered

            again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
            said = again.stdout + again.stderr
            assert again.returncode == 0, said
            assert (
                f"run {dead_run} (temporal_day_job) was still marked started but its process (pid {first.pid}" in said
            )
            assert "marked it failed" in said, said
            assert f"run {dead_run} died without releasing its lease (pid {first.pid}" in said, said
            assert "took it over at once" in said and "is working on this partition" not in said, said
            assert instance.get_run_by_id(dead_run).status == DagsterRunStatus.FAILURE
        finally:
            instance.dispose()
    assert days_written(store) == set(DAYS)
    calls = paid(store)
    assert set(calls.values()) == {1}  # each needed call paid once
    # Only the call in flight at the kill was asked twice (its answer never reached the killed run).
    assert (
        len(server.requests) == sum(calls.values()) + 1
        and requests_at_kill == sum(n for (p, _), n in calls.items() if p in DAYS[:HELD]) + 1
    )
