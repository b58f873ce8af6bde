"""End to end on a deployed stack: dagster-webserver and dagster-daemon (subprocesses, production
dagster.yaml on PostgreSQL and workspace: one standing code server), a day range backfilled through the
GraphQL mutation the UI's Materialize button sends, then the memory store's rows and the day
check's results."""

from __future__ import annotations

from datetime import date

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterEventType, DagsterRunStatus
from sqlalchemy import select

from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline_tests.dagster_stack import CHECK_EXECUTIONS
from memory_pipeline_tests.integration.conftest import DAY_ASSET, DAY_CHECK, E2E_DAYS, STRICT_PER_PARTITION_CHECKS

# One deployment (the package-scoped `deployed`) serves both modules: under pytest-xdist they run
# in one worker (--dist loadgroup), which starts it once.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("dagster_stack")]


def test_a_day_range_backfilled_from_the_api_writes_the_seed_rows_and_passes_its_check(deployed):
    print("seconds:", deployed.seconds)
    backfill = deployed.backfill
    assert backfill["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), backfill
    assert backfill["isAssetBackfill"] and backfill["numPartitions"] == len(E2E_DAYS)
    runs = backfill["runs"]
    # BackfillPolicy.single_run: the whole range is one run, tagged with its first and last key.
    assert len(runs) == 1, runs
    (run,) = runs
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert run["status"] == "SUCCESS", run
    assert (tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]) == (
        E2E_DAYS[0],
        E2E_DAYS[-1],
    )
    assert tags["dagster/backfill"] == deployed.backfill_id and tags["dagster/from_ui"] == "true"
    assert deployed.instance.get_run_by_id(run["runId"]).status == DagsterRunStatus.SUCCESS
    # Nothing else ran: schedules and sensors are off until someone turns them on.
    assert [r.run_id for r in deployed.instance.get_runs()] == [run["runId"]]
    # The UI's daemon page: every daemon the production instance needs reports a heartbeat.
    statuses = deployed.stack.wait_daemons_healthy(timeout=300)
    assert {"BACKFILL", "QUEUED_RUN_COORDINATOR", "SCHEDULER", "SENSOR"} <= set(statuses), statuses
    # Production's workspace: the webserver and the daemon load no code of their own (with a
    # module's workspace each starts a code server, the daemon a new one at every refresh).
    for name in ("webserver", "daemon"):
        assert not [c for c in deployed.stack.members(name) if " api grpc " in c], deployed.stack.members(name)

    # The seed's rows: one per world alive that day, placeholders with their reason, sources on
    # every non-empty row; w2 did not exist before the 3rd, so it has no row for the 2nd.
    with deployed.store.connect() as conn:
        rows = conn.execute(
            select(
                temporal_summaries.c.world_id,
                temporal_summaries.c.period_start,
                temporal_summaries.c.empty_reason,
                temporal_summaries.c.content,
                temporal_summaries.c.source_count,
                temporal_summaries.c.source_ids,
            ).where(temporal_summaries.c.window == "day")
        ).all()
    got = {(r.world_id, r.period_start.isoformat()): r.empty_reason for r in rows}
    assert got == {
        ("w1", "2026-03-02"): None,
        ("w1", "2026-03-03"): "no_sessions",
        ("w1", "2026-03-04"): None,
        ("w1", "2026-03-05"): "no_sessions",
        ("w2", "2026-03-03"): None,
        ("w2", "2026-03-04"): "no_sessions",
        ("w2", "2026-03-05"): "empty",  # messages that day, but tool output only
    }
    for r in rows:
        if r.empty_reason is None:
            # One conversation of two turns: its two message ids are the sources.
            assert r.content and r.source_count == 1 and len(r.source_ids) == 2, r
        else:
            assert r.content == "" and r.source_count == 0 and r.source_ids == [], r
    assert {r.period_start for r in rows} == {date.fromisoformat(d) for d in E2E_DAYS}

    # The asset is materialized for every partition of the range, as the instance records it.
    assert deployed.instance.get_materialized_partitions(AssetKey(DAY_ASSET)) == set(E2E_DAYS)

    assert_day_check(deployed, run["runId"], strict=STRICT_PER_PARTITION_CHECKS)


def assert_day_check(deployed, run_id: str, *, strict: bool) -> None:
    """The day check ran in the backfill's run and no evaluation failed, as both the instance's
    event log and GraphQL's assetCheckExecutions tell. ``strict``: one passed evaluation per
    partition of the range, and none without a partition."""
    key = AssetCheckKey(AssetKey(DAY_ASSET), DAY_CHECK)
    logs = deployed.instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    every = [e.dagster_event.event_specific_data for e in logs]
    print(
        f"check evaluations in run {run_id}:",
        [(e.asset_check_key.to_user_string(), e.partition, e.passed) for e in every],
    )
    evaluations = [e for e in every if e.asset_check_key == key]
    assert evaluations, f"no evaluation of {key} in run {run_id}: {every}"
    assert all(e.passed for e in evaluations), [(e.partition, e.passed, e.metadata) for e in evaluations]
    # A UI backfill runs every check of the asset, the freshness check too: it judges the newest
    # closed day, which a backfill of old days does not write, so it fails here. No other may.
    failed = {e.asset_check_key.name for e in every if not e.passed}
    assert failed <= {"freshness_check"}, failed

    executions = deployed.stack.graphql(
        CHECK_EXECUTIONS, {"assetKey": {"path": [DAY_ASSET]}, "checkName": DAY_CHECK, "limit": 100}
    )["assetCheckExecutions"]
    ours = [x for x in executions if x["runId"] == run_id]
    print("assetCheckExecutions:", ours)
    assert ours, executions
    assert not [x for x in ours if x["status"] in ("FAILED", "EXECUTION_FAILED")], ours
    assert any(x["status"] == "SUCCEEDED" for x in ours), ours

    if strict:
        by_partition = sorted((e.partition, e.passed) for e in evaluations)
        assert by_partition == [(d, True) for d in E2E_DAYS], by_partition
        # Each names the materialization it checked: without it the UI counts the partition as
        # missing (its result is not "current"), though GraphQL lists the execution as succeeded.
        targets = {e.partition: e.target_materialization_data for e in evaluations}
        assert all(t is not None and t.run_id == run_id for t in targets.values()), targets
        # GraphQL (what the check's Partitions tab shows): one succeeded execution per partition,
        # none skipped, none without a partition.
        assert sorted((x["partition"], x["status"]) for x in ours) == [(d, "SUCCEEDED") for d in E2E_DAYS], ours
