"""Seed 001 in Dagster (ephemeral instance, real PostgreSQL): a day whose only unorganized event
is oversized is partial and its check says so (a warning naming the event); the projection sensor
asks for a pass when a projected file is deleted, though the store did not change."""

from __future__ import annotations

from dagster import AssetCheckSeverity, DagsterEventType, RunRequest, SkipReason

from memory_pipeline.objects import logic
from memory_pipeline_tests.conftest import conversation, cst
from memory_pipeline_tests.integration.test_objects_dagster import _sensor, defs, instance  # noqa: F401 (fixtures)


def test_a_day_with_an_oversized_event_is_partial_and_its_check_warns(defs, instance, store, ingest):  # noqa: F811
    ingest(conversation("w1", "a", cst(2026, 1, 10, 9), ["x" * 32_001, "garden tomatoes planted", "garden plan"]))
    assert defs.get_job_def("objects_compaction_job").execute_in_process(instance=instance).success
    assert defs.get_job_def("objects_organize_job").execute_in_process(instance=instance).success
    run = defs.get_job_def("objects_outcomes_job").execute_in_process(instance=instance, partition_key="2026-01-10")
    assert run.success
    (check,) = [
        e.dagster_event.event_specific_data
        for e in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    ]
    assert not check.passed and check.severity == AssetCheckSeverity.WARN
    assert check.metadata["not_organized"].value == 1 and check.metadata["problems"].value == 0
    assert "oversized (32,001 characters" in check.metadata["first_not_organized"].value
    (mat,) = instance.fetch_materializations(defs.get_assets_def("objects_event_outcomes").key, limit=1).records
    assert mat.asset_materialization.metadata["status"].value == str(logic.DayStatus.PARTIAL)


def test_the_projection_sensor_asks_for_a_pass_when_a_file_is_deleted(defs, instance, store, ingest, tmp_path):  # noqa: F811
    ingest(conversation("w1", "a", cst(2026, 1, 10, 9), ["garden tomatoes planted today"] * 12))  # over 60 tokens
    defs.get_job_def("objects_compaction_job").execute_in_process(instance=instance)
    defs.get_job_def("objects_organize_job").execute_in_process(instance=instance)  # archive + projection
    result, _ = _sensor(defs, "objects_projection_sensor", instance)
    assert isinstance(result, SkipReason)
    (readme := tmp_path / "objects" / "w1" / "README.md").unlink()
    next(iter((tmp_path / "objects" / "w1" / "knowledge").glob("*.md"))).unlink()
    result, _ = _sensor(defs, "objects_projection_sensor", instance)
    assert isinstance(result, RunRequest) and result.tags["memory_pipeline/projection"].startswith("object files")
    run = defs.get_job_def("objects_projection_job").execute_in_process(instance=instance)
    meta = run.asset_materializations_for_node("objects_markdown_projection")[0].metadata
    assert meta["files_found_missing"].value == 1 and readme.exists()
    result, _ = _sensor(defs, "objects_projection_sensor", instance)
    assert isinstance(result, SkipReason)
