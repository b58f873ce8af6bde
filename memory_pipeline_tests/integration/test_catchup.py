"""The pure catch-up rule of the nightly schedules, and the real scheduler daemon after downtime."""

import logging
from datetime import datetime

from memory_pipeline.defs._shared.catchup import catchup_keys
from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline_tests.conftest import CST

KEYS = ["d1", "d2", "d3", "d4", "d5", "d6"]


def test_newest_only_on_a_fresh_deployment():
    assert catchup_keys(KEYS, set(), 31) == ["d6"]
    assert catchup_keys(KEYS, {"d6"}, 31) == []


def test_gap_after_the_last_materialized_partition():
    assert catchup_keys(KEYS, {"d1", "d2"}, 31) == ["d3", "d4", "d5", "d6"]
    assert catchup_keys(KEYS, {"d2", "d4"}, 31) == ["d5", "d6"]  # the d3 hole is a backfill's business
    assert catchup_keys(KEYS, {"d1"}, 3) == ["d6"]  # beyond the look-back: newest only
    assert catchup_keys([], set(), 31) == [] and catchup_keys(KEYS, set(), 0) == []


def test_the_scheduler_daemon_creates_the_missed_runs_after_downtime(pg_url, monkeypatch):
    from dagster import AssetKey, AssetMaterialization
    from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time, instance_for_test
    from dagster._core.workspace.load_target import ModuleTarget
    from dagster._scheduler.scheduler import launch_scheduled_runs
    from dagster._time import get_current_datetime

    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)  # the code server loads the location with this env
    overrides = {"run_launcher": {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"}}
    with instance_for_test(overrides=overrides) as instance:
        target = ModuleTarget(
            module_name="memory_pipeline.definitions",
            attribute="defs",
            working_directory=str(REPO_ROOT),
            location_name="memory_pipeline",
        )
        with create_test_daemon_workspace_context(target, instance) as workspace:
            entry = next(iter(workspace.create_request_context().get_code_location_entries().values()))
            assert entry.code_location, entry.load_error
            repo = next(iter(entry.code_location.get_repositories().values()))
            with freeze_time(datetime(2026, 1, 9, 0, 10, tzinfo=CST)):
                instance.start_schedule(repo.get_schedule("temporal_day_schedule"))
                instance.report_runless_asset_event(
                    AssetMaterialization(AssetKey("temporal_day_summaries"), partition="2026-01-08")
                )
            with freeze_time(datetime(2026, 1, 13, 0, 10, tzinfo=CST)):  # down since the 9th
                list(launch_scheduled_runs(workspace, logging.getLogger("test"), get_current_datetime(), {}))
            runs = instance.get_runs()
    assert sorted(r.tags.get("dagster/partition") for r in runs) == [
        "2026-01-09",
        "2026-01-10",
        "2026-01-11",
        "2026-01-12",
    ]
    assert {r.job_name for r in runs} == {"temporal_day_job"}
