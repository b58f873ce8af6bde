"""What the UI's "Materialize" launches when the operator selects the December days and the month
together: an asset backfill, run by the real backfill daemon against the code location in a code
server, its runs launched in subprocesses (as in production). The day range is one run; the month
run is launched only after it, finds its children and succeeds without waiting."""

import logging
import time
from datetime import date

from sqlalchemy import select

from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline_tests.conftest import conversation, cst

DAYS = [f"2025-12-{d:02d}" for d in range(1, 32)]


def _range(run) -> tuple[str, str]:
    return run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"]


def test_a_backfill_of_days_and_their_month_runs_the_month_after_the_days(
    pg_url, redis_url, store, ingest, monkeypatch, tmp_path
):
    from dagster import AssetKey, DagsterEventType, DagsterRunStatus
    from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
    from dagster._core.test_utils import create_test_daemon_workspace_context, instance_for_test
    from dagster._core.workspace.load_target import ModuleTarget
    from dagster._daemon.backfill import execute_backfill_iteration
    from dagster._time import get_current_timestamp

    ingest(
        conversation("w1", "a", cst(2025, 12, 30, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w2", "e", cst(2025, 12, 31, 8), ["marathon pacing", "marathon intervals"])
    )
    # The code server and the run workers read the store and cache from the environment.
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path))
    day, month = AssetKey("temporal_day_summaries"), AssetKey("temporal_month_summaries")
    # Runs start as soon as the backfill submits them (no queue daemon in this test).
    coordinator = {"module": "dagster._core.run_coordinator", "class": "DefaultRunCoordinator"}
    with instance_for_test(overrides={"run_coordinator": coordinator}) as instance:
        target = ModuleTarget(
            module_name="memory_pipeline.definitions",
            attribute="defs",
            working_directory=str(REPO_ROOT),
            location_name="memory_pipeline",
        )
        with create_test_daemon_workspace_context(target, instance) as workspace:
            asset_graph = workspace.create_request_context().asset_graph
            # The UI's launch of a selection with different partitionings: the days are the anchor,
            # the month is every partition downstream of them.
            backfill = PartitionBackfill.from_asset_partitions(
                backfill_id="dec2025",
                asset_graph=asset_graph,
                partition_names=DAYS,
                asset_selection=[day, month],
                backfill_timestamp=get_current_timestamp(),
                tags={},
                dynamic_partitions_store=instance,
                all_partitions=False,
                title=None,
                description=None,
                run_config=None,
            )
            instance.add_backfill(backfill)
            started = time.monotonic()
            while time.monotonic() < started + 900:  # a deadline: a loaded machine took over 180 s
                list(execute_backfill_iteration(workspace, logging.getLogger("test")))
                status = instance.get_backfill("dec2025").status
                if status not in (BulkActionStatus.REQUESTED, BulkActionStatus.FAILING):
                    break
                time.sleep(1)
            runs = sorted(instance.get_runs(), key=lambda r: instance.get_run_record_by_id(r.run_id).create_timestamp)
            records = {r.run_id: instance.get_run_record_by_id(r.run_id) for r in runs}
            assert status == BulkActionStatus.COMPLETED_SUCCESS, [(r.run_id, r.status) for r in runs]
            day_written = max(r.timestamp for r in instance.fetch_materializations(day, limit=100).records)
            retries = [e for r in runs for e in instance.all_logs(r.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)]
    assert [r.status for r in runs] == [DagsterRunStatus.SUCCESS, DagsterRunStatus.SUCCESS]
    day_run, month_run = runs
    assert day_run.asset_selection == {day} and month_run.asset_selection == {month}
    assert _range(day_run) == ("2025-12-01", "2025-12-31")  # one run for the range
    assert _range(month_run) == ("2025-12", "2025-12")
    # The month run was launched once the day partitions were written (the backfill orders it after
    # them; it need not wait for the day run's checks), and never waited itself.
    assert records[month_run.run_id].create_timestamp.timestamp() >= day_written
    assert retries == []
    with store.connect() as conn:
        months = conn.execute(
            select(temporal_summaries.c.world_id, temporal_summaries.c.source_count).where(
                temporal_summaries.c.window == "month", temporal_summaries.c.period_start == date(2025, 12, 1)
            )
        ).all()
    assert sorted(months) == [("w1", 1), ("w2", 1)]
