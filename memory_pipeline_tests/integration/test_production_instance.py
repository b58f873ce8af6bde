"""deploy/production/dagster.yaml: runs, event logs and schedules in PostgreSQL (dagster-postgres)."""

import shutil

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


def test_embedded_default_instance_limits_the_llm_pool(tmp_path, monkeypatch):
    from dagster._core.instance.config import PoolGranularity

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with operations.get_instance() as instance:
        assert (tmp_path / "dagster.yaml").read_text() == operations.INSTANCE_YAML
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 1
        assert config.pool_config.pool_granularity == PoolGranularity.RUN
