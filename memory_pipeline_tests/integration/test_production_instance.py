"""deploy/production/dagster.yaml: runs, event logs and schedules in PostgreSQL (dagster-postgres)."""

import shutil

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
