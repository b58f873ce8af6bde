"""Past one machine, with no change in the assets.

- Celery: two `dagster-celery worker` processes on a Redis broker, a PostgreSQL-backed instance
  (webserver + daemon as production runs them), MEMORY_EXECUTOR=celery and backfills split into
  runs of at most two partitions. A day range backfilled through the UI's GraphQL mutation becomes
  three runs whose steps the workers execute; the rows equal those of one in-process run.
- Kubernetes: deploy/k8s/dagster.yaml loads into a K8sRunLauncher and the code location's jobs
  build a k8s_job_executor that takes the launcher's pod settings. No cluster is contacted: the
  pod's service-account files are written for the in-cluster loader, which only reads them."""

from __future__ import annotations

import json
import shutil
from datetime import date

import pytest
import redis
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, instance_for_test
from sqlalchemy import func, select

from memory_pipeline import domains, operations
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline.lib.store import Store, make_engine
from memory_pipeline.lib.store.migrate import ensure_schema, forget_checked
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline_tests.conftest import CELERY_BROKER_URL, REDIS_URL, conversation, cst, event
from memory_pipeline_tests.dagster_stack import (
    CeleryWorkers,
    DagsterStack,
    create_schema,
    dagster_pg_url,
    drop_schema,
    production_home,
    stack_env,
)
from memory_pipeline_tests.integration.test_dagster import make_defs

pytestmark = pytest.mark.e2e

# The Celery broker (and result store): a Redis database of its own, never a roll cache's.
BROKER_URL = CELERY_BROKER_URL
DAY_ASSET = "temporal_day_summaries"
DAYS = ["2026-02-02", "2026-02-03", "2026-02-04", "2026-02-05", "2026-02-06", "2026-02-07"]
PER_RUN = 2
WORKERS = ["celery-a", "celery-b"]
ROW_FIELDS = ("world_id", "window", "period_start", "content", "empty_reason", "source_count", "source_ids")


def range_events() -> list[dict]:
    """w1 every other day, w2 from the 4th (tool output only on the 6th): summaries, no_sessions
    and empty placeholders, and no row for w2 before it existed."""
    events = []
    for i, day in enumerate(DAYS):
        d = date.fromisoformat(day)
        if i % 2 == 0:
            events += conversation("w1", f"a{i}", cst(d.year, d.month, d.day, 9), [f"seedlings {i} potted", "watered"])
    events += conversation("w2", "b0", cst(2026, 2, 4, 20), ["marathon intervals", "tempo run"])
    events += conversation("w2", "b1", cst(2026, 2, 7, 7), ["long run planned", "shoes bought"])
    events.append(event("w2", "b2", "tool", '{"ok": true}', cst(2026, 2, 6, 10)))
    return events


def ingest_into(store: Store, folder, events) -> None:
    ensure_schema(store, domains.version_locations())
    batch = folder / "events.jsonl"
    batch.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    assert ingest_file(store, batch).inserted == len(events)


def summary_rows(store: Store) -> list[tuple]:
    t = temporal_summaries.c
    with store.connect() as conn:
        rows = conn.execute(select(*(t[f] for f in ROW_FIELDS)).order_by(t.world_id, t.window, t.period_start))
        return [tuple(r) for r in rows]


def calls_by_partition(store: Store) -> dict[str, int]:
    c = llm_ledger.c
    with store.connect() as conn:
        return dict(conn.execute(select(c.partition, func.count()).group_by(c.partition)).all())


@pytest.fixture
def broker():
    client = redis.Redis.from_url(BROKER_URL)
    client.flushdb()
    yield BROKER_URL
    client.flushdb()
    client.close()


def test_a_backfill_split_into_bounded_runs_executes_on_two_celery_workers_with_single_process_rows(tmp_path, broker):
    home = production_home(tmp_path / "dagster_home")
    dagster_schema, dagster_url = create_schema("dist_dagster")
    memory_schema, memory_url = create_schema("dist_memory")
    single_schema, single_url = create_schema("dist_single")
    cache = redis.Redis.from_url(REDIS_URL)
    cache.flushdb()
    env = stack_env(home, dagster_url, memory_url, REDIS_URL)
    env.update(
        MEMORY_EXECUTOR="celery",
        MEMORY_CELERY_BROKER_URL=broker,
        MEMORY_BACKFILL_MAX_PARTITIONS_PER_RUN=str(PER_RUN),
    )
    stack = DagsterStack(home, env)
    workers = CeleryWorkers(home, env, WORKERS)
    mp = pytest.MonkeyPatch()
    instance = None
    left: list[int] = []
    try:
        mp.setenv("DAGSTER_PG_URL", dagster_pg_url(dagster_url))
        instance = DagsterInstance.from_config(str(home))  # tables exist before the processes start
        store = Store(memory_url)
        ingest_into(store, tmp_path, range_events())
        workers.start()  # loading beside the code server, which stack.start waits for
        stack.start("webserver")
        workers.wait_ready(timeout=600)
        stack.wait_webserver(timeout=600)
        backfill_id = stack.launch_backfill(DAY_ASSET, DAYS)
        stack.start("daemon")
        try:
            backfill = stack.wait_backfill(backfill_id, timeout=900)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{workers.log_tails()}") from None
        if backfill["status"] not in ("COMPLETED", "COMPLETED_SUCCESS"):  # whole: the daemon's error, every log
            runs_seen = [(r["runId"][:8], r["status"]) for r in backfill["runs"]]
            raise stack.fail(
                f"backfill {backfill['status']}, error {backfill.get('error')}, runs {runs_seen}\n{workers.log_tails()}"
            )

        # multi_run(2): six days are three runs of two consecutive days each.
        runs = sorted(
            backfill["runs"],
            key=lambda r: {t["key"]: t["value"] for t in r["tags"]}.get("dagster/asset_partition_range_start", ""),
        )
        ranges = []
        for run in runs:
            tags = {t["key"]: t["value"] for t in run["tags"]}
            assert run["status"] == "SUCCESS", (run, workers.log_tails())
            ranges.append((tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]))
        assert ranges == [(DAYS[0], DAYS[1]), (DAYS[2], DAYS[3]), (DAYS[4], DAYS[5])], ranges

        # Every step of every run was executed by one of the two Celery workers (its engine event
        # names the worker), none by the run worker itself.
        taken: dict[str, list[str]] = {}
        for run in runs:
            run_id = run["runId"]
            assert instance.get_run_by_id(run_id).status == DagsterRunStatus.SUCCESS
            steps = {e.step_key for e in instance.all_logs(run_id, of_type=DagsterEventType.STEP_SUCCESS) if e.step_key}
            delegated = {}
            for e in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
                if e.step_key and "in celery worker" in (e.message or ""):
                    host = e.dagster_event.engine_event_data.metadata["Celery worker"].value
                    delegated[e.step_key] = host
            assert DAY_ASSET in steps and steps <= set(delegated), (run_id, steps, delegated)
            assert all(h.split("@")[0] in WORKERS for h in delegated.values()), delegated
            for step, host in delegated.items():
                taken.setdefault(host.split("@")[0], []).append(f"{run_id[:8]}:{step}")
        print("steps per celery worker:", taken)

        distributed_rows = summary_rows(store)
        distributed_calls = calls_by_partition(store)

        # The same events and range in one process (Dagster's in-process execution of the range).
        single = Store(single_url)
        (tmp_path / "single").mkdir()
        ingest_into(single, tmp_path / "single", range_events())
        with instance_for_test() as local:
            report = operations.materialize(
                "day", DAYS[0], DAYS[-1], instance=local, defs=make_defs(single_url, REDIS_URL)
            )
        assert report.success, report.runs[0].error
        assert len(distributed_rows) == 10  # w1 on 6 days, w2 on 4
        assert distributed_rows == summary_rows(single)
        # Not one call more: each day was summarized once, by whichever worker had it.
        assert distributed_calls == calls_by_partition(single)
        # One `day` call per world with material that day; none for days without (placeholders).
        assert distributed_calls == {"2026-02-02": 1, "2026-02-04": 2, "2026-02-06": 1, "2026-02-07": 1}
    finally:
        left = workers.stop() + stack.stop()
        if instance is not None:
            instance.dispose()
        mp.undo()
        for url in (memory_url, single_url):
            make_engine(url).dispose()
        make_engine.cache_clear()
        forget_checked()
        cache.flushdb()
        cache.close()
        for schema in (dagster_schema, memory_schema, single_schema):
            drop_schema(schema)
    assert not left, f"processes still alive after SIGKILL: {left}"


K8S_DAGSTER_YAML = REPO_ROOT / "deploy" / "k8s" / "dagster.yaml"


@pytest.fixture
def pod_environment(tmp_path, monkeypatch):
    """What Kubernetes gives a pod: the API's address in the environment and the service account's
    token and CA files. The address is never contacted (nothing here calls the API)."""
    from kubernetes.config import incluster_config

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("test-service-account-token")
    ca.write_text("not a certificate: never used, no connection is made\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))


def test_the_kubernetes_configuration_builds_its_run_launcher_and_step_executor(tmp_path, monkeypatch, pod_environment):
    from dagster import DagsterRun
    from dagster._config import process_config
    from dagster._core.definitions.reconstruct import ReconstructableJob, ReconstructableRepository
    from dagster._core.executor.init import InitExecutorContext
    from dagster._core.executor.step_delegating import StepDelegatingExecutor
    from dagster_k8s import K8sRunLauncher
    from dagster_k8s.container_context import K8sContainerContext
    from dagster_k8s.executor import K8sStepHandler

    from memory_pipeline.definitions import build_defs

    schema, url = create_schema("k8s_dagster")
    instance = None
    try:
        home = tmp_path / "dagster_home"
        home.mkdir()
        shutil.copy(K8S_DAGSTER_YAML, home / "dagster.yaml")
        monkeypatch.setenv("DAGSTER_PG_URL", dagster_pg_url(url))
        instance = DagsterInstance.from_config(str(home))
        launcher = instance.run_launcher
        assert isinstance(launcher, K8sRunLauncher)
        assert (launcher.job_namespace, launcher.job_image, launcher.dagster_home) == (
            "memory-pipeline",
            "memory-pipeline:latest",
            "/opt/dagster/dagster_home",
        )
        assert launcher.instance_config_map == "memory-pipeline-dagster-instance"
        # Secrets reach the pods from a Kubernetes Secret, by name: no value in the file.
        assert launcher.env_secrets == ["memory-pipeline-secrets"]
        assert launcher.env_config_maps == ["memory-pipeline-env"]
        # A dead run pod is seen by run monitoring and resumed in a new pod.
        assert launcher.supports_check_run_worker_health and launcher.supports_resume_run
        assert instance.run_monitoring_enabled and instance.run_monitoring_max_resume_run_attempts == 2

        # The code location under MEMORY_EXECUTOR=k8s: each step of a run becomes a Kubernetes Job.
        monkeypatch.setenv("MEMORY_EXECUTOR", "k8s")
        monkeypatch.setenv("MEMORY_BACKFILL_MAX_PARTITIONS_PER_RUN", "31")
        defs = build_defs()
        job = defs.get_job_def("temporal_day_job")
        assert job.executor_def.name == "k8s"
        assert str(defs.resolve_assets_def(DAY_ASSET).backfill_policy) == (
            "BackfillPolicy.multi_run(max_partitions_per_run=31)"
        )
        processed = process_config(job.executor_def.config_schema.config_type, {})
        assert processed.success, processed.errors
        recon = ReconstructableJob(
            ReconstructableRepository.for_module("memory_pipeline.definitions", "defs", str(REPO_ROOT)),
            "temporal_day_job",
        )
        executor = job.executor_def.executor_creation_fn(
            InitExecutorContext(
                job=recon, executor_def=job.executor_def, executor_config=processed.value, instance=instance
            )
        )
        assert isinstance(executor, StepDelegatingExecutor)
        handler = executor._step_handler
        assert isinstance(handler, K8sStepHandler)
        # What the handler gives a step's Job (its first step at launch): the run pod's settings
        # from the launcher, merged with the executor's own (none here).
        run = DagsterRun(job_name="temporal_day_job", run_id="0" * 8 + "-0000-0000-0000-" + "0" * 12)
        step_context = K8sContainerContext.create_for_run(run, launcher, include_run_tags=False).merge(
            handler._executor_container_context
        )
        assert step_context.namespace == "memory-pipeline"
        k8s = step_context.run_k8s_config
        print("step pod config:", k8s)
        env_from = k8s.container_config["env_from"]
        assert {"secret_ref": {"name": "memory-pipeline-secrets"}} in env_from
        assert {"config_map_ref": {"name": "memory-pipeline-env"}} in env_from
        assert k8s.pod_spec_config["service_account_name"] == "memory-pipeline"
    finally:
        if instance is not None:
            instance.dispose()
        drop_schema(schema)
