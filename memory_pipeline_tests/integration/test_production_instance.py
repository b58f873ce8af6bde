"""deploy/production/dagster.yaml: runs, event logs and schedules in PostgreSQL (dagster-postgres)."""

import logging
import shutil
from datetime import UTC, datetime, timedelta

import pytest
from dagster import DagsterInstance

from memory_pipeline import operations
from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline.operations.registry import targets
from memory_pipeline_tests.conftest import conversation, cst
from memory_pipeline_tests.integration.test_dagster import make_defs


def test_production_instance_keeps_runs_in_postgres(tmp_path, monkeypatch, pg_url, redis_url, ingest):
    shutil.copy(REPO_ROOT / "deploy" / "production" / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_PG_URL", pg_url.replace("postgresql+psycopg2://", "postgresql://"))
    ingest(conversation("w1", "a", cst(2026, 3, 4, 9), ["tomatoes planted", "tomatoes watered"]))
    with DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        report = operations.materialize(
            "day", "2026-03-04", "2026-03-04", instance=instance, defs=make_defs(pg_url, redis_url)
        )
        assert report.success
        (run,) = instance.get_runs()
        assert run.job_name == "temporal_day_job" and run.tags["dagster/partition"] == "2026-03-04"
        assert "2026-03-04" in instance.get_materialized_partitions(targets()["day"].asset_key)


@pytest.fixture
def production_instance(tmp_path, monkeypatch, pg_url):
    """deploy/production/dagster.yaml as it ships, its storage in a test schema."""
    shutil.copy(REPO_ROOT / "deploy" / "production" / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_PG_URL", pg_url.replace("postgresql+psycopg2://", "postgresql://"))
    with DagsterInstance.get() as instance:
        yield instance


def test_production_instance_limits_the_llm_pool(production_instance):
    from dagster._core.instance.config import PoolGranularity

    config = production_instance.get_concurrency_config()
    assert config.pool_config.default_pool_limit == 2 and production_instance.global_op_concurrency_default_limit == 2
    assert config.pool_config.pool_granularity == PoolGranularity.RUN
    assert type(production_instance.run_coordinator).__name__ == "QueuedRunCoordinator"
    assert config.run_queue_config.max_concurrent_runs == 4  # moved under concurrency > runs
    # A dequeue that cannot reach the code server is retried past the daemon's 60 s workspace refresh.
    queue = config.run_queue_config
    assert queue.max_user_code_failure_retries * queue.user_code_failure_retry_delay > 60


def test_embedded_default_instance_limits_the_llm_pool(tmp_path, monkeypatch):
    from dagster._core.instance.config import PoolGranularity

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with operations.get_instance() as instance:
        assert (tmp_path / "dagster.yaml").read_text() == operations.INSTANCE_YAML
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 1
        assert config.pool_config.pool_granularity == PoolGranularity.RUN


def test_production_instance_monitors_runs_and_retries_the_dead_ones(production_instance):
    """A run whose worker died stays "Started" (the default run launcher cannot probe it) until the
    monitoring daemon fails it past max_runtime_seconds; run retries then re-execute it. A run whose
    asset failed is not retried."""
    from dagster import DagsterEvent, DagsterEventType, DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test, create_test_daemon_workspace_context
    from dagster._core.workspace.load_target import EmptyWorkspaceTarget
    from dagster._daemon.auto_run_reexecution.auto_run_reexecution import should_retry
    from dagster._daemon.monitoring.run_monitoring import execute_run_monitoring_iteration

    instance = production_instance
    assert instance.run_monitoring_enabled
    assert (instance.run_monitoring_start_timeout_seconds, instance.run_monitoring_cancel_timeout_seconds) == (300, 300)
    assert instance.run_monitoring_max_runtime_seconds == 21600
    assert instance.run_monitoring_poll_interval_seconds == 60
    assert instance.run_monitoring_max_resume_run_attempts == 0 and not instance.run_launcher.supports_resume_run
    assert not instance.run_launcher.supports_check_run_worker_health  # why the max runtime is the signal
    assert instance.run_retries_enabled and instance.run_retries_max_retries == 2
    assert not instance.run_retries_retry_on_asset_or_op_failure
    assert {"MONITORING", "EVENT_LOG_CONSUMER", "QUEUED_RUN_COORDINATOR"} <= set(instance.get_required_daemon_types())

    started = datetime.now(UTC) - timedelta(hours=7)
    dead = create_run_for_test(instance, job_name="temporal_day_job", status=DagsterRunStatus.NOT_STARTED)
    instance.report_dagster_event(
        DagsterEvent(DagsterEventType.RUN_START.value, job_name=dead.job_name),
        run_id=dead.run_id,
        timestamp=started.timestamp(),
    )
    assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.STARTED
    with create_test_daemon_workspace_context(EmptyWorkspaceTarget(), instance) as workspace:
        list(execute_run_monitoring_iteration(workspace, logging.getLogger("test")))
    failed = instance.get_run_by_id(dead.run_id)
    assert failed.status == DagsterRunStatus.FAILURE
    messages = [e.message for e in instance.all_logs(dead.run_id) if e.dagster_event and e.message]
    # What the run's log shows the operator, in this order.
    assert messages.index("Canceling due to exceeding maximum runtime of 21600 seconds.") < messages.index(
        "This job is being forcibly marked as failed. The computational resources created by the run may "
        "not have been fully cleaned up."
    )
    assert should_retry(failed, instance)  # the event log consumer re-executes it from failure

    asset_failed = create_run_for_test(
        instance,
        job_name="temporal_month_job",
        status=DagsterRunStatus.FAILURE,
        tags={"dagster/failure_reason": "STEP_FAILURE"},
    )
    assert not should_retry(asset_failed, instance)  # missing children, LLM hard failure: not retried


def test_a_launcher_without_resume_refuses_resume_attempts(tmp_path, monkeypatch, pg_url):
    """Why max_resume_run_attempts stays 0: the default run launcher cannot resume a run."""
    from dagster._check import CheckError

    text = (REPO_ROOT / "deploy" / "production" / "dagster.yaml").read_text()
    (tmp_path / "dagster.yaml").write_text(text.replace("max_resume_run_attempts: 0", "max_resume_run_attempts: 1"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_PG_URL", pg_url.replace("postgresql+psycopg2://", "postgresql://"))
    with pytest.raises(CheckError, match="does not support resuming runs"):
        DagsterInstance.get()
