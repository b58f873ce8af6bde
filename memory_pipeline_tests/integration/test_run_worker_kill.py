"""Fault matrix: a run worker killed with SIGKILL mid-run, detected, and re-run.

The stack is production's (webserver + daemon on deploy/production/dagster.yaml, PostgreSQL
instance and store, Redis) with run monitoring polling every 5 s, and a real model path: litellm
against a local OpenAI-compatible server, which holds the call of one chosen day unanswered. A day
range backfilled through the UI's GraphQL mutation runs until that call is in flight; then the
run's worker process (and the step process it started) get SIGKILL, as the kernel's OOM killer or a
`kill -9` would do. What must follow, without anyone's help:

- the run is marked failed, naming the signal (its code server sees its child die);
- the daemon's run retries re-execute it from failure; the retry takes over the dead run's partition
  lease (its run has ended and it stopped renewing) rather than waiting out its TTL;
- the rows equal a clean in-process run's; the days finished before the kill cost no call again;
  the one call in flight at the kill is the only call made twice;
- an operator's re-execution from failure (the run page's button) costs no call at all."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from datetime import date
from pathlib import Path

import pytest
import redis
import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter, instance_for_test
from sqlalchemy import func, select

from memory_pipeline import domains, operations
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.store import Store, make_engine
from memory_pipeline.lib.store.migrate import ensure_schema, forget_checked
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline_tests.conftest import REDIS_URL, conversation, cst
from memory_pipeline_tests.dagster_stack import (
    DagsterStack,
    create_schema,
    dagster_pg_url,
    drop_schema,
    production_home,
    stack_env,
)
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_dagster import make_defs

pytestmark = pytest.mark.e2e

DAY_ASSET = "temporal_day_summaries"
DAYS = [f"2026-04-{d:02d}" for d in range(6, 14)]  # eight closed days
HELD = 4  # the call of DAYS[4] is held: DAYS[0..3] are done when the worker is killed
MARKER = "kilnfire"
MODEL = "openai/fake-model"
ROW_FIELDS = ("world_id", "window", "period_start", "content", "empty_reason", "source_count", "source_ids")

REEXECUTE = """
mutation Reexecute($params: ReexecutionParams) {
  launchPipelineReexecution(reexecutionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message stack }
    ... on RunConflict { message }
    ... on InvalidStepError { invalidStepKey }
    ... on UnauthorizedError { message }
  }
}
"""


def pottery_events() -> list[dict]:
    """w1 every day (the held day's conversation carries the marker), w2 every other day."""
    events = []
    for i, day in enumerate(DAYS):
        d = date.fromisoformat(day)
        first = f"{MARKER} glaze test {i}" if i == HELD else f"pottery {day} glaze"
        events += conversation("w1", f"a{i}", cst(d.year, d.month, d.day, 9), [first, "kiln loaded"])
        if i % 2:
            events += conversation("w2", f"b{i}", cst(d.year, d.month, d.day, 20), [f"violin {day} scales", "etude"])
    return events


def answer(body: dict) -> str:
    """A deterministic answer per prompt: equal rows mean equal prompts and answers."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return f"kiln notes {hashlib.sha1(user.encode()).hexdigest()[:12]}"


def ingest_into(store: Store, folder: Path) -> None:
    ensure_schema(store, domains.version_locations())
    folder.mkdir(parents=True, exist_ok=True)
    batch = folder / "events.jsonl"
    batch.write_text("".join(json.dumps(e) + "\n" for e in pottery_events()), encoding="utf-8")
    assert ingest_file(store, batch).inserted == len(pottery_events())


def summary_rows(store: Store) -> list[tuple]:
    t = temporal_summaries.c
    with store.connect() as conn:
        rows = conn.execute(select(*(t[f] for f in ROW_FIELDS)).order_by(t.world_id, t.window, t.period_start))
        return [tuple(r) for r in rows]


def days_written(store: Store) -> set[str]:
    with store.connect() as conn:
        return {r[0].isoformat() for r in conn.execute(select(temporal_summaries.c.period_start).distinct())}


def paid_calls(store: Store, after: int = 0) -> dict[tuple[str, str], int]:
    """{(partition, world): model calls answered} of ledger rows after call id ``after``."""
    c = llm_ledger.c
    with store.connect() as conn:
        q = (
            select(c.partition, c.world_id, func.count())
            .where(c.call_id > after, c.outcome == "ok")
            .group_by(c.partition, c.world_id)
        )
        return {(p, w): n for p, w, n in conn.execute(q)}


def last_call(store: Store) -> int:
    with store.connect() as conn:
        return conn.execute(select(func.coalesce(func.max(llm_ledger.c.call_id), 0))).scalar_one()


def run_worker_pid(instance: DagsterInstance, run_id: str) -> int | None:
    """The run worker's pid, from the engine event it logs when it starts."""
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        if (record.message or "").startswith("Started process for run (pid: "):
            return int(record.message.split("pid: ")[1].split(")")[0])
    return None


def process_tree(root: int) -> list[int]:
    """``root`` and every live descendant (the step processes the run worker started)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def test_a_run_worker_killed_mid_run_is_detected_retried_and_costs_no_call_twice(tmp_path):
    home = production_home(tmp_path / "dagster_home")
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    config["run_monitoring"]["poll_interval_seconds"] = 5  # short intervals for the test only
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    dagster_schema, dagster_url = create_schema("kill_dagster")
    memory_schema, memory_url = create_schema("kill_memory")
    clean_schema, clean_url = create_schema("kill_clean")
    cache = redis.Redis.from_url(REDIS_URL)
    cache.flushdb()
    mp = pytest.MonkeyPatch()
    instance = None
    left: list[int] = []
    with FakeOpenAI() as server:
        server.answer = answer
        server.hold(MARKER)
        env = stack_env(home, dagster_url, memory_url, REDIS_URL)
        env.update(MEMORY_LLM_MODEL=MODEL, MEMORY_LLM_API_BASE=server.api_base, MEMORY_LLM_API_KEY="test-key")
        stack = DagsterStack(home, env)
        try:
            mp.setenv("DAGSTER_PG_URL", dagster_pg_url(dagster_url))
            instance = DagsterInstance.from_config(str(home))
            store = Store(memory_url)
            ingest_into(store, tmp_path / "events")
            stack.start("webserver")
            stack.wait_webserver(timeout=240)
            backfill_id = stack.launch_backfill(DAY_ASSET, DAYS)
            stack.start("daemon")

            # Mid-run: the held day's call has reached the provider.
            stack.wait_until(f"the call of {DAYS[HELD]} to arrive", server.held.is_set, timeout=600)
            (run,) = instance.get_runs(filters=RunsFilter(tags={"dagster/backfill": backfill_id}))
            assert days_written(store) == set(DAYS[:HELD])
            calls_before_kill = last_call(store)
            paid_before_kill = paid_calls(store)
            requests_before_kill = len(server.requests)
            pid = stack.wait_until("the run worker's pid", lambda: run_worker_pid(instance, run.run_id), timeout=60)
            killed = process_tree(pid)
            for victim in killed:
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            server.release()  # the provider answers into a closed socket; later calls pass
            print(f"SIGKILL to run worker {pid} and its step processes: {killed}")

            # Detected: the run is failed, naming the signal.
            failed = stack.wait_until(
                f"run {run.run_id} to be marked failed",
                lambda: (r := instance.get_run_by_id(run.run_id)).status == DagsterRunStatus.FAILURE and r,
                timeout=300,
            )
            messages = [e.message or "" for e in instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT)]
            assert any("was terminated by signal 9 (SIGKILL)" in m for m in messages), messages
            assert failed.tags.get("dagster/will_retry") == "true", failed.tags

            # Re-run by the daemon (run retries): from failure, the same range, to success.
            def retried():
                children = instance.get_runs(filters=RunsFilter(tags={"dagster/parent_run_id": run.run_id}))
                done = [r for r in children if r.status == DagsterRunStatus.SUCCESS]
                failed_children = [r for r in children if r.status == DagsterRunStatus.FAILURE]
                assert not failed_children, [r.run_id for r in failed_children]
                return done[0] if done else None

            retry = stack.wait_until("the automatic retry to succeed", retried, timeout=900)
            assert retry.tags["dagster/retry_number"] == "1"
            assert retry.tags["dagster/backfill"] == backfill_id
            assert (
                retry.tags["dagster/asset_partition_range_start"],
                retry.tags["dagster/asset_partition_range_end"],
            ) == (
                DAYS[0],
                DAYS[-1],
            )
            took_over = [
                e.message
                for e in instance.all_logs(retry.run_id)
                if "took over the lease of run " + run.run_id in (e.message or "")
            ]
            assert took_over, "the retry did not take over the killed run's lease"
            final = stack.wait_backfill(backfill_id, timeout=300)
            assert final["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), final

            # Nothing lost, nothing paid twice but the call in flight at the kill.
            got = summary_rows(store)
            again = paid_calls(store, after=calls_before_kill)
            assert not {p for p, _ in again} & set(DAYS[:HELD]), again  # finished days: no call
            assert {(p, w): n for (p, w), n in paid_calls(store).items() if n != 1} == {}
            assert paid_calls(store) == {**paid_before_kill, **again}
            requests_after_retry = len(server.requests)

            clean = Store(clean_url)
            ingest_into(clean, tmp_path / "clean")
            with instance_for_test() as local:
                defs = make_defs(clean_url, REDIS_URL, model=MODEL, api_base=server.api_base, api_key="test-key")
                report = operations.materialize("day", DAYS[0], DAYS[-1], instance=local, defs=defs)
            assert report.success, report.runs[0].error
            assert got == summary_rows(clean)
            # w1 on 8 days; w2 on the 7 from its first day (the 7th), placeholders on its silent days.
            assert len(got) == 15
            assert paid_calls(store) == paid_calls(clean)
            clean_requests = len(server.requests) - requests_after_retry
            assert requests_after_retry == clean_requests + 1  # the held call, sent again by the retry
            assert requests_before_kill == sum(paid_before_kill.values()) + 1

            # The operator's way (the run page's "Re-execute from failure"): costs no call now.
            before = last_call(store), len(server.requests)
            result = stack.graphql(REEXECUTE, {"params": {"parentRunId": run.run_id, "strategy": "FROM_FAILURE"}})
            launched = result["launchPipelineReexecution"]
            assert launched["__typename"] == "LaunchRunSuccess", launched
            rerun_id = launched["run"]["runId"]
            stack.wait_until(
                "the re-execution to finish",
                lambda: instance.get_run_by_id(rerun_id).is_finished,
                timeout=600,
            )
            assert instance.get_run_by_id(rerun_id).status == DagsterRunStatus.SUCCESS
            assert paid_calls(store, after=before[0]) == {} and len(server.requests) == before[1]
            assert summary_rows(store) == got
        finally:
            server.release()
            left = stack.stop()
            if instance is not None:
                instance.dispose()
            mp.undo()
            for url in (memory_url, clean_url):
                make_engine(url).dispose()
            make_engine.cache_clear()
            forget_checked()
            cache.flushdb()
            cache.close()
            for schema in (dagster_schema, memory_schema, clean_schema):
                drop_schema(schema)
    assert not left, f"processes of the stack still alive after SIGKILL: {left}"
