"""Fault matrix: a run worker killed with SIGKILL mid-run, detected, and re-run.

The stack is production's (webserver + daemon on deploy/production/dagster.yaml, PostgreSQL
instance and store, Redis) with run monitoring polling every 5 s, and a real model path: litellm
against a local OpenAI-compatible server, which holds the call of one chosen day unanswered. A day
range backfilled through the UI's GraphQL mutation runs until that call is in flight; then SIGKILL,
as the kernel's OOM killer or a `kill -9` would send it.

1. The run's worker process (and the step process it started) is killed, its host lives on: the run
   is marked failed naming the signal (its code server sees its child die), the daemon's run
   retries re-execute it from failure (taking over the dead run's partition lease rather than
   waiting out its TTL), and an operator's re-execution afterwards costs no call at all.
2. The host is lost (the code server goes with the run worker): nothing is left to see the worker
   die, so the daemon's run monitoring fails the run at its maximum runtime; the operator
   re-executes it from failure.

Either way the rows equal a clean in-process run's, the days finished before the kill cost no call
again (a provider's answer is recorded the moment it is paid, though the batch's rows are not yet
committed), and the one call in flight at the kill is the only call made twice."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest
import redis
import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter, instance_for_test
from sqlalchemy import func, select

from memory_pipeline import domains, operations
from memory_pipeline.defs._shared.deployment import CODE_LOCATION_MODULE
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.settings import REPO_ROOT
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


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


@dataclass
class Killable:
    stack: DagsterStack
    instance: DagsterInstance
    store: Store
    server: FakeOpenAI
    clean_url: str


@contextmanager
def killable_stack(tmp_path: Path, workspace: Path | None = None) -> Iterator[Killable]:
    """The stack over fresh schemas, the events ingested, the webserver up, the model server
    holding the marked day's call; the daemon starts once a backfill is requested. ``workspace``:
    as ``DagsterStack`` takes it (default: production's standing code server)."""
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
        stack = DagsterStack(home, env, workspace)
        try:
            mp.setenv("DAGSTER_PG_URL", dagster_pg_url(dagster_url))
            instance = DagsterInstance.from_config(str(home))
            store = Store(memory_url)
            ingest_into(store, tmp_path / "events")
            stack.start("webserver")
            stack.wait_webserver(timeout=600)
            yield Killable(stack, instance, store, server, clean_url)
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


@dataclass
class Killed:
    run_id: str
    calls_before: int  # the ledger's last call id at the kill
    paid_before: dict[tuple[str, str], int]
    requests_before: int


def backfill_and_kill(k: Killable, tags: dict[str, str] | None, victim, whole_tree: bool = True) -> tuple[str, Killed]:
    """Backfill DAYS, wait for the held call, SIGKILL ``victim(run worker pid)``'s process tree (or
    the victim alone: then its step process must exit by itself before the provider answers)."""
    backfill_id = k.stack.launch_backfill(DAY_ASSET, DAYS, tags=tags)
    k.stack.start("daemon")
    k.stack.wait_until(f"the call of {DAYS[HELD]} to arrive", k.server.held.is_set, timeout=600)
    (run,) = k.instance.get_runs(filters=RunsFilter(tags={"dagster/backfill": backfill_id}))
    # A range run commits its rows per batch of days (one transaction), so none is written yet;
    # what was paid is: each finished day's calls already have their ledger rows and cached answers.
    assert days_written(k.store) == set()
    assert {day for day, _ in paid_calls(k.store)} == set(DAYS[:HELD])
    killed = Killed(run.run_id, last_call(k.store), paid_calls(k.store), len(k.server.requests))
    pid = k.stack.wait_until("the run worker's pid", lambda: run_worker_pid(k.instance, run.run_id), timeout=300)
    root = victim(pid)
    tree = process_tree(root)
    below = [cmdline(p) for p in tree[1:]]  # read before the kill: the forkserver exits with the worker
    for target in tree if whole_tree else [root]:
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if not whole_tree:  # the step process the run worker started dies with it (lib.lifeline)
        assert len(tree) > 1, f"no step process under the run worker {root}: {tree}"
        # It was forked by a forkserver that had loaded the code location (deployment.executor).
        assert [c for c in below if "multiprocessing.forkserver import main" in c and CODE_LOCATION_MODULE in c], below
        k.stack.wait_until(
            f"the step processes {tree[1:]} to exit with their run worker",
            lambda: not [p for p in tree if Path(f"/proc/{p}").exists() and not zombie(p)],
            timeout=300,
            interval=0.2,
        )
    k.server.release()  # the provider answers into a closed socket; later calls pass
    print(f"run worker {pid}: SIGKILL to {root}" + (f" and its descendants {tree}" if whole_tree else ""))
    return backfill_id, killed


def wait_failed(k: Killable, run_id: str, timeout: float):
    return k.stack.wait_until(
        f"run {run_id} to be marked failed",
        lambda: (r := k.instance.get_run_by_id(run_id)).status == DagsterRunStatus.FAILURE and r,
        timeout=timeout,
    )


def will_retry(k: Killable, run_id: str, timeout: float = 120) -> str:
    """The run's ``dagster/will_retry`` tag ("true" or "false"). Dagster adds it just after the run's
    status turns FAILURE (the process that stored the failure decides whether the daemon retries
    it), so a test reading the tags right after ``wait_failed`` could miss it: wait for it."""
    return k.stack.wait_until(
        f"run {run_id} to be tagged dagster/will_retry",
        lambda: k.instance.get_run_by_id(run_id).tags.get("dagster/will_retry"),
        timeout=timeout,
    )


def engine_messages(k: Killable, run_id: str) -> list[str]:
    return [e.message or "" for e in k.instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)]


def reexecute_from_failure(k: Killable, run_id: str, tags: dict[str, str] | None = None) -> str:
    """What the run page's "Re-execute > From failure" sends; waits for the new run to finish."""
    params = {"parentRunId": run_id, "strategy": "FROM_FAILURE"}
    if tags:
        params["extraTags"] = [{"key": key, "value": value} for key, value in tags.items()]
    launched = k.stack.graphql(REEXECUTE, {"params": params})["launchPipelineReexecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    rerun_id = launched["run"]["runId"]
    k.stack.wait_until("the re-execution to finish", lambda: k.instance.get_run_by_id(rerun_id).is_finished, 900)
    assert k.instance.get_run_by_id(rerun_id).status == DagsterRunStatus.SUCCESS, engine_messages(k, rerun_id)
    return rerun_id


def took_over_lease(k: Killable, run_id: str, dead_run_id: str) -> bool:
    """The re-run says it took the dead run's lease: its process seen gone on this host (at once), or
    its run seen ended (after a missed renewal)."""
    said = (f"run {dead_run_id} died without releasing its lease", f"took over the lease of run {dead_run_id}")
    return any(any(s in (e.message or "") for s in said) for e in k.instance.all_logs(run_id))


def assert_nothing_lost_nor_paid_twice(k: Killable, killed: Killed) -> None:
    """Rows of a clean run; finished days not called again; only the call in flight repeated."""
    got = summary_rows(k.store)
    again = paid_calls(k.store, after=killed.calls_before)
    assert not {p for p, _ in again} & set(DAYS[:HELD]), again  # days finished before the kill
    assert paid_calls(k.store) == {**killed.paid_before, **again}
    assert {key: n for key, n in paid_calls(k.store).items() if n != 1} == {}  # one paid call each
    assert killed.requests_before == sum(killed.paid_before.values()) + 1  # the one in flight
    requests = len(k.server.requests)

    clean = Store(k.clean_url)
    ingest_into(clean, k.stack.home.parent / "clean")
    with instance_for_test() as local:
        defs = make_defs(k.clean_url, REDIS_URL, model=MODEL, api_base=k.server.api_base, api_key="test-key")
        report = operations.materialize("day", DAYS[0], DAYS[-1], instance=local, defs=defs)
    assert report.success, report.runs[0].error
    assert got == summary_rows(clean)
    # w1 on 8 days; w2 on the 7 from its first day (the 7th), placeholders on its silent days.
    assert len(got) == 15
    assert paid_calls(k.store) == paid_calls(clean)
    assert requests == (len(k.server.requests) - requests) + 1  # a clean run's calls, and the held one again


def test_a_run_worker_killed_mid_run_is_detected_retried_and_costs_no_call_twice(tmp_path):
    with killable_stack(tmp_path) as k:
        # The run worker alone is killed: its step process exits with it (it wrote nothing more).
        backfill_id, killed = backfill_and_kill(k, None, victim=lambda worker: worker, whole_tree=False)

        # Detected: the run is failed, naming the signal, and marked for a retry.
        failed = wait_failed(k, killed.run_id, timeout=300)
        messages = engine_messages(k, killed.run_id)
        assert any("was terminated by signal 9 (SIGKILL)" in m for m in messages), messages
        late = [
            e.dagster_event.event_type_value
            for e in k.instance.all_logs(killed.run_id)
            if e.dagster_event is not None
            and e.dagster_event.event_type in (DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_SUCCESS)
        ]
        assert late == [], f"the killed run recorded {late}"
        assert will_retry(k, killed.run_id) == "true", failed.tags

        # Re-run by the daemon (run retries): from failure, the same range, inside the backfill.
        def retried():
            children = k.instance.get_runs(filters=RunsFilter(tags={"dagster/parent_run_id": killed.run_id}))
            assert not [r.run_id for r in children if r.status == DagsterRunStatus.FAILURE]
            done = [r for r in children if r.status == DagsterRunStatus.SUCCESS]
            return done[0] if done else None

        retry = k.stack.wait_until("the automatic retry to succeed", retried, timeout=900)
        assert retry.tags["dagster/retry_number"] == "1" and retry.tags["dagster/backfill"] == backfill_id
        assert (retry.tags["dagster/asset_partition_range_start"], retry.tags["dagster/asset_partition_range_end"]) == (
            DAYS[0],
            DAYS[-1],
        )
        assert took_over_lease(k, retry.run_id, killed.run_id), "the retry did not take over the dead run's lease"
        final = k.stack.wait_backfill(backfill_id, timeout=300)
        assert final["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), final
        assert_nothing_lost_nor_paid_twice(k, killed)

        # The operator's way too (the run page's "Re-execute from failure"): costs no call now.
        rows, before = summary_rows(k.store), (last_call(k.store), len(k.server.requests))
        reexecute_from_failure(k, killed.run_id)
        assert paid_calls(k.store, after=before[0]) == {} and len(k.server.requests) == before[1]
        assert summary_rows(k.store) == rows


def test_a_run_whose_host_is_lost_is_failed_by_run_monitoring_and_reexecuted(tmp_path):
    """The run worker and the code server that started it die together: only the daemon's run
    monitoring is left to notice, at the run's maximum runtime (here the run tag dagster/max_runtime,
    lowered to 10 s once the host is gone; 6 h by default). Retries are off for this run
    (dagster/max_retries 0): the operator re-executes it from failure, with a runtime limit of its own."""

    def code_server(worker: int) -> int:
        parent = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])
        line = cmdline(parent)
        assert "dagster" in line and ("grpc" in line or "code-server" in line), line
        return parent

    # The repository's workspace.yaml: the daemon's own code server, which it replaces at its next
    # workspace refresh once the host's is gone (a standing one would wait for its supervisor).
    with killable_stack(tmp_path, REPO_ROOT / "workspace.yaml") as k:
        # The limit is lowered only after the kill: on a loaded machine the run can take longer
        # than 120 s to reach the held call, and monitoring must not end it before the host is lost.
        # Once it is lost, 10 s: monitoring fails it at its first poll past 10 s from the run's start,
        # which is the next poll unless the run reached the held call sooner than that.
        # The daemon reads the tag from the run's record at every poll.
        tags = {"dagster/max_runtime": "3600", "dagster/max_retries": "0"}
        _, killed = backfill_and_kill(k, tags, victim=code_server)
        k.instance.add_run_tags(killed.run_id, {"dagster/max_runtime": "10"})

        failed = wait_failed(k, killed.run_id, timeout=600)
        messages = [e.message or "" for e in k.instance.all_logs(killed.run_id)]
        # The run monitoring daemon's words: it cancels the run, cannot reach its worker, fails it.
        assert "Canceling due to exceeding maximum runtime of 10 seconds." in messages, messages
        assert will_retry(k, killed.run_id) == "false", failed.tags  # retries on, this run's max_retries 0

        rerun_id = reexecute_from_failure(k, killed.run_id, tags={"dagster/max_runtime": "3600"})
        assert took_over_lease(k, rerun_id, killed.run_id), "the re-execution did not take over the dead run's lease"
        assert_nothing_lost_nor_paid_twice(k, killed)
