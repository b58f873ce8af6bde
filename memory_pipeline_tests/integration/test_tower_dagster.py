"""Seed 004 in Dagster on the real PostgreSQL: the structural and summary assets as one run per range
with one check result per partition, the structural job outside the `llm` pool, the two independent
schedulers (sensors), late data requested by its sensor, and the semantic tick as a run."""

import json
import re
from datetime import timedelta

import pytest
from dagster import DagsterEventType, RunRequest, SkipReason, build_sensor_context, instance_for_test
from sqlalchemy import func, select

from memory_pipeline import operations
from memory_pipeline.defs.tower import assets as tower_assets
from memory_pipeline.defs.tower.resources import TowerResource
from memory_pipeline.defs.tower.sensors import (
    tower_late_data_sensor,
    tower_semantic_tick_sensor,
    tower_structural_refresh_sensor,
)
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.resources import LLMResource, MemoryConfigResource, MemoryStoreResource
from memory_pipeline.tower import summaries
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.logic import Granularity, WindowQuery
from memory_pipeline.tower.summaries import SummaryContext
from memory_pipeline.tower.tables import tower_summaries
from memory_pipeline_tests.conftest import CST, conversation, cst
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_dagster import make_defs


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def defs(pg_url, redis_url):
    return make_defs(pg_url, redis_url)


@pytest.fixture
def worklog(store):
    tower = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="t", partition=p), run_jobs="inline")
    tower.append(
        "worklog",
        [
            {
                "content": {"project": p, "did": f"{p} work on day {d}: migrated the database"},
                "at": cst(2026, 1, d, 18).isoformat(),
            }
            for d in (5, 6, 7)
            for p in ("alpha", "beta")
        ],
    )
    return tower


def _checks(instance, run_id) -> list[tuple[str, str, bool]]:
    logs = instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    return [
        (
            e.dagster_event.event_specific_data.check_name,
            e.dagster_event.event_specific_data.partition,
            e.dagster_event.event_specific_data.passed,
        )
        for e in logs
    ]


def _ledger(store, asset) -> list[tuple[str, str]]:
    with store.connect() as conn:
        return [
            (r.partition, r.outcome)
            for r in conn.execute(
                select(llm_ledger.c.partition, llm_ledger.c.outcome).where(llm_ledger.c.asset == asset)
            )
        ]


def test_windows_and_summaries_as_range_runs_with_a_check_result_per_partition(defs, instance, store, ingest, worklog):
    ingest(conversation("w1", "c1", cst(2026, 1, 5, 9), ["tomatoes planted", "tomatoes watered"]))
    report = operations.materialize("tower_windows", "2026-01-05", "2026-01-11", instance=instance, defs=defs)
    assert report.success and len(report.runs) == 1 and report.runs[0].partitions == 7
    results = _checks(instance, report.runs[0].run_id)
    assert sorted(p for c, p, _ in results if c == "tower_windows_cover_entries") == [
        f"2026-01-{d:02d}" for d in range(5, 12)
    ]
    assert all(passed for _, _, passed in results)
    assert operations.materialize(
        "tower_week_windows", "2026-01-05", "2026-01-05", instance=instance, defs=defs
    ).success
    day = operations.materialize("tower_day_summaries", "2026-01-05", "2026-01-07", instance=instance, defs=defs)
    assert day.success
    # worklog: one summary per closed natural day per project, each call a ledger row of its partition.
    assert sorted(_ledger(store, "tower_day_summaries")) == sorted(
        (f"2026-01-0{d}", "ok") for d in (5, 6, 7) for _ in ("alpha", "beta")
    )
    week = operations.materialize("tower_week_summaries", "2026-01-05", "2026-01-05", instance=instance, defs=defs)
    assert week.success
    assert _ledger(store, "tower_week_summaries") == [("2026-01-05", "ok"), ("2026-01-05", "ok")]  # one per group
    drift = [r for r in _checks(instance, week.runs[0].run_id) if r[0] == "tower_week_summaries_drift"]
    assert drift == [("tower_week_summaries_drift", "2026-01-05", True)]
    again = operations.materialize("tower_week_summaries", "2026-01-05", "2026-01-05", instance=instance, defs=defs)
    assert again.success and len(_ledger(store, "tower_week_summaries")) == 2  # no call on the second run
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(tower_summaries)).scalar_one() == 8  # 6 days + 2 weeks


def test_drift_fails_a_week_that_equals_its_day_byte_for_byte(store, worklog):
    t = summaries.types_io.get(store, "worklog")
    worklog.summarize("worklog", WindowQuery.parse("week", "2026-01-05", group="alpha"))
    with store.connect() as conn:
        day = (
            conn.execute(
                select(tower_summaries).where(
                    tower_summaries.c.granularity == "day", tower_summaries.c.group_value == "alpha"
                )
            )
            .mappings()
            .first()
        )
        week = conn.execute(select(tower_summaries).where(tower_summaries.c.granularity == "week")).mappings().first()
    sctx = SummaryContext(store, LLMClient(store, asset="drift"), TowerConfig(), CST)
    ok = summaries.drift(sctx, Granularity.WEEK, cst(2026, 1, 5).date(), 3)
    assert [d.identical_to_child for d in ok] == [False] and 0 <= ok[0].score <= 1
    # A week whose text is a day's text byte for byte: no compression happened, the check says so.
    with store.begin() as conn:
        row = {k: v for k, v in week.items() if k != "record_id"}
        conn.execute(tower_summaries.insert().values({**row, "text": day["text"], "refs": [day["record_id"]]}))
    bad = summaries.drift(sctx, Granularity.WEEK, cst(2026, 1, 5).date(), 3)
    assert [d.identical_to_child for d in bad] == [True]
    assert t.summaries_enabled


def test_structural_job_is_outside_the_llm_pool_and_the_two_schedulers_are_independent(defs, pg_url, store, ingest):
    assert tower_assets.tower_day_windows.op.pool is None
    assert tower_assets.tower_week_windows.op.pool is None
    assert tower_assets.tower_day_summaries.op.pool == "llm" and tower_assets.tower_semantic_tick.op.pool == "llm"
    resource = TowerResource(
        memory_store=MemoryStoreResource(database_url=pg_url), llm=LLMResource(), memory_config=MemoryConfigResource()
    )

    def evaluate(sensor, instance, cursor=None):
        with build_sensor_context(instance=instance, resources={"tower": resource}, cursor=cursor) as ctx:
            return sensor(ctx), ctx.cursor

    with instance_for_test() as instance:
        first, cursor = evaluate(tower_structural_refresh_sensor, instance)
        assert isinstance(first, list) and isinstance(first[0], RunRequest)
        assert first[0].partition_key == tower_assets.cst_day_open.get_last_partition_key()
        assert isinstance(evaluate(tower_structural_refresh_sensor, instance, cursor)[0], SkipReason)  # within 60 s
        tick, tick_cursor = evaluate(tower_semantic_tick_sensor, instance)
        assert isinstance(tick, RunRequest)
        assert isinstance(evaluate(tower_semantic_tick_sensor, instance, tick_cursor)[0], SkipReason)  # within 10 min

        # Late data (the last 31 days): a closed day materialized, then a message of it ingested: its
        # partition is requested, once; after the re-run nothing is stale.
        day = (utcnow().astimezone(CST) - timedelta(days=3)).date()
        key = day.isoformat()
        assert operations.materialize("tower_windows", key, key, instance=instance, defs=defs).success
        assert isinstance(evaluate(tower_late_data_sensor, instance)[0], SkipReason)
        ingest(conversation("w1", "late", cst(day.year, day.month, day.day, 22), ["a late message", "another"]))
        requests, _ = evaluate(tower_late_data_sensor, instance)
        assert [r.partition_key for r in requests] == [key]
        assert operations.materialize("tower_windows", key, key, instance=instance, defs=defs).success
        assert isinstance(evaluate(tower_late_data_sensor, instance)[0], SkipReason)
        page = Tower(store, TowerConfig(), CST).recall("agent/activity", WindowQuery.parse("day", key))
        assert page["total_entries"] == 2 and not page["stale"]


def test_the_semantic_tick_runs_as_a_run(defs, instance, store, worklog):
    result = defs.resolve_job_def("tower_semantic_tick_job").execute_in_process(instance=instance)
    assert result.success
    mats = instance.fetch_materializations(tower_assets.tower_semantic_tick.key, limit=1).records
    meta = {k: v.value for k, v in mats[0].asset_materialization.metadata.items()}
    # The entries are from January; the latest settled day and week (now) have none: nothing to do.
    assert meta["summaries_written"] == 0 and meta["llm_calls"] == 0


def test_re_materializing_a_summary_partition_appends_never_replaces(defs, instance, store, worklog):
    assert operations.materialize(
        "tower_day_summaries", "2026-01-05", "2026-01-05", instance=instance, defs=defs
    ).success
    with store.connect() as conn:
        first = conn.execute(select(tower_summaries.c.record_id, tower_summaries.c.group_value)).all()
    assert sorted(g for _, g in first) == ["alpha", "beta"]
    worklog.append(
        "worklog", {"content": {"project": "alpha", "did": "a late fix"}, "at": cst(2026, 1, 5, 20).isoformat()}
    )
    assert operations.materialize(
        "tower_day_summaries", "2026-01-05", "2026-01-05", instance=instance, defs=defs
    ).success
    with store.connect() as conn:
        after = conn.execute(select(tower_summaries.c.record_id, tower_summaries.c.group_value)).all()
    assert set(first) <= set(after) and sorted(g for _, g in after) == ["alpha", "alpha", "beta"]  # beta reused
    newest = worklog.get_summary("worklog", WindowQuery.parse("day", "2026-01-05", group="alpha"))["summaries"][0]
    assert newest["record_id"] == max(r for r, g in after if g == "alpha") and newest["entry_count"] == 2


def _fresh_results(instance, run_id) -> list:
    logs = instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    return [
        e.dagster_event.event_specific_data
        for e in logs
        if e.dagster_event.event_specific_data.check_name == "tower_windows_fresh"
    ]


def test_freshness_check_warns_with_the_count_when_entries_pass_the_materialization(defs, instance, ingest, worklog):
    """Stale but consistent, made explicit: the check run by itself through Dagster after two late
    entries reports the partition not passed, severity WARN, with the count; a refresh clears it."""
    from dagster import AssetCheckSeverity, AssetSelection, Definitions, define_asset_job

    from memory_pipeline.defs.tower.checks import day_windows_fresh

    key = "2026-01-05"
    built = operations.materialize("tower_windows", key, key, instance=instance, defs=defs)
    assert built.success
    (first,) = _fresh_results(instance, built.runs[0].run_id)
    assert first.partition == key and first.passed and first.metadata["entries_not_in_view"].value == 0

    # Past the materialization point: two conversation messages of that day (the activity type's raw
    # series). A Tower.append to a closed materialized day refreshes its refs at once (by design), so
    # the stale state a reader meets is this one (and the open day between two minute refreshes).
    ingest(conversation("w1", "late", cst(2026, 1, 5, 22), ["a late message", "another late one"]))
    check_only = Definitions.merge(
        defs,
        Definitions(
            jobs=[
                define_asset_job(
                    "tower_fresh_check_only",
                    selection=AssetSelection.checks(day_windows_fresh),
                )
            ]
        ),
    ).resolve_job_def("tower_fresh_check_only")
    # A checks-only job selects no asset, so Dagster cannot validate partition_key; the partition tag
    # is what a launch of the check for one partition (as the UI does) carries.
    one_day = {"dagster/partition": key}
    stale_run = check_only.execute_in_process(instance=instance, tags=one_day)
    assert stale_run.success
    assert not stale_run.get_asset_materialization_events()  # the check alone: the view was not rebuilt
    (stale,) = _fresh_results(instance, stale_run.run_id)
    assert stale.partition == key and stale.passed is False and stale.severity == AssetCheckSeverity.WARN
    assert stale.metadata["entries_not_in_view"].value == 2
    # an operator's time: whole seconds in the configured zone
    assert re.fullmatch(r"2026-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00", stale.metadata["materialized_at"].value)

    assert operations.materialize("tower_windows", key, key, instance=instance, defs=defs).success
    again = check_only.execute_in_process(instance=instance, tags=one_day)
    (fresh,) = _fresh_results(instance, again.run_id)
    assert fresh.passed and fresh.metadata["entries_not_in_view"].value == 0


def test_a_structural_run_feeds_no_message_into_an_archived_activity_type(defs, instance, store, ingest):
    tower = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="t", partition=p), run_jobs="inline")
    tower.delete_type("agent/activity")
    ingest(conversation("w", "c", cst(2026, 1, 5, 12), ["hi"]))
    key = "2026-01-05"
    run = operations.materialize("tower_windows", key, key, instance=instance, defs=defs)
    assert run.success
    (event,) = instance.fetch_materializations(tower_assets.tower_day_windows.key, limit=1).records
    metadata = event.asset_materialization.metadata
    assert metadata["activity_entries_fed"].value == 0
    assert metadata["activity_feed"].value == "agent/activity archived: no message fed"
    recalled = tower.recall("agent/activity", WindowQuery.parse("day", key))
    assert recalled["total_entries"] == 0 and not recalled["stale"]
    assert tower.get_type("agent/activity")["archived"] is True
    fresh = [r for r in _checks(instance, run.runs[0].run_id) if r[0] == "tower_windows_fresh"]
    assert fresh == [("tower_windows_fresh", key, True)]  # a message it will never take is not "late"


def test_a_provider_outage_stops_a_summary_run_with_the_breakers_line(
    pg_url, redis_url, instance, store, worklog, monkeypatch
):
    """Every request fails: after 1 failed call (MEMORY_LLM_BREAKER_FAILURES) the run stops with
    the breaker's one line: alpha's week failed, beta's is refused without a request (without the
    breaker each group fails alone and the run succeeds with warnings)."""
    monkeypatch.setenv("MEMORY_LLM_BREAKER_FAILURES", "1")
    with FakeOpenAI() as fake:
        for _ in range(50):
            fake.push("status", 500)
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0)
        week = operations.materialize("tower_week_summaries", "2026-01-05", "2026-01-05", instance=instance, defs=defs)
        assert not week.success and len(fake.requests) == 1
        line = week.runs[0].error.splitlines()[0]
        assert line == (
            f"LLM provider openai/fake at {fake.api_base} is failing: "
            "InternalServerError: litellm.InternalServerError: InternalServerError: OpenAIException - scripted 500 "
            "(1 consecutive failures); stopping: the partitions not done are left for the next run"
        )
    assert sorted(outcome for _, outcome in _ledger(store, "tower_week_summaries")) == [
        "breaker_open",
        "error",
    ]


def test_a_summary_range_stopped_by_the_breaker_materializes_the_days_before_it(
    pg_url, redis_url, instance, store, worklog, monkeypatch
):
    """Days 5..7: day 5's two calls are answered, day 6's first fails and opens the breaker. The run
    fails with the breaker's line; day 5 is materialized by it with its metadata, days 6 and 7 are not."""
    monkeypatch.setenv("MEMORY_LLM_BREAKER_FAILURES", "1")
    with FakeOpenAI() as fake:
        for project in ("alpha", "beta"):
            fake.push("ok", json.dumps({"conclusions": [f"{project} day 5"]}))
        for _ in range(10):
            fake.push("status", 500)
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0)
        day = operations.materialize("tower_day_summaries", "2026-01-05", "2026-01-07", instance=instance, defs=defs)
    (run,) = day.runs
    assert not run.success
    assert run.error.splitlines()[0].endswith("stopping: the partitions not done are left for the next run")
    records = instance.fetch_materializations(tower_assets.tower_day_summaries.key, limit=10).records
    assert [(r.asset_materialization.partition, r.run_id) for r in records] == [("2026-01-05", run.run_id)]
    meta = {k: v.value for k, v in records[0].asset_materialization.metadata.items()}
    assert (meta["summaries_written"], meta["failed"], meta["llm_answered"]) == (2, 0, 2)
    assert sorted(_ledger(store, "tower_day_summaries")) == [
        ("2026-01-05", "ok"),
        ("2026-01-05", "ok"),
        ("2026-01-06", "breaker_open"),
        ("2026-01-06", "error"),
    ]


def test_llm_calls_in_a_summary_runs_metadata_are_its_ledger_rows(pg_url, redis_url, instance, store, worklog):
    """The week of 2026-01-05 bottom-up, two projects of three days each: alpha's first child is
    answered after a retry, its second fails (alpha's week fails); beta's three children and its
    aggregate are answered. Every call is one ledger row, and llm_calls says as many."""
    answers = iter(range(100))
    with FakeOpenAI() as fake:
        fake.answer = lambda body: json.dumps({"conclusions": [f"summary number {next(answers)}"]})
        fake.push("status", 500).push("ok", json.dumps({"conclusions": ["alpha day 5"]})).push("status", 400)
        defs = make_defs(
            pg_url,
            redis_url,
            model="openai/fake",
            api_base=fake.api_base,
            api_key="k",
            max_retries=1,
            backoff_seconds=0.01,
        )
        week = operations.materialize("tower_week_summaries", "2026-01-05", "2026-01-05", instance=instance, defs=defs)
        # 7 for the summaries (the retried call went out twice), 1 for the drift check's recompute.
        assert week.success and len(fake.requests) == 8
    rows = _ledger(store, "tower_week_summaries")
    # The week's own call under its partition; each child day made bottom-up under that day's key
    # (alpha and beta on 01-05 and the week itself share "2026-01-05").
    assert sorted(rows) == [
        ("2026-01-05", "ok"),
        ("2026-01-05", "ok"),
        ("2026-01-05", "ok"),
        ("2026-01-06", "error"),
        ("2026-01-06", "ok"),
        ("2026-01-07", "ok"),
    ]
    (mat,) = instance.fetch_materializations(tower_assets.tower_week_summaries.key, limit=10).records
    meta = {k: v.value for k, v in mat.asset_materialization.metadata.items()}
    assert meta["llm_calls"] == len(rows) == 6  # 3 + 1 beta, alpha's day 5 (retried) and day 6 (failed)
    assert (meta["llm_answered"], meta["llm_failures"], meta["llm_cache_hits"]) == (5, 1, 0)
    assert (meta["summaries_written"], meta["failed"]) == (5, 1)  # alpha's day 5, beta's 3 days and week
    # The run succeeded, the week partition is materialized, and its check says alpha's week failed
    # (no call of its own: the 8 requests above are the summaries' and the drift check's).
    complete = _complete_results(instance, mat.run_id)["2026-01-05"]
    assert not complete.passed and complete.metadata["failed_windows"].value == 1
    assert "worklog week 2026-01-05 [alpha]" in complete.metadata["first_failed"].value


def _complete_results(instance, run_id) -> dict:
    logs = instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    results = [e.dagster_event.event_specific_data for e in logs]
    return {r.partition: r for r in results if r.check_name == "tower_summaries_complete"}


def _days_with_alphas_day_5_failing(fake, pg_url, redis_url, instance):
    """Days 5..7, alpha and beta each: alpha's day 5 call (the first) fails alone (a 400; the breaker
    stays closed), the others are answered. The run succeeds: a window failing alone backs off."""
    answers = iter(range(100))
    fake.answer = lambda body: json.dumps({"conclusions": [f"summary number {next(answers)}"]})
    fake.push("status", 400)
    defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0)
    day = operations.materialize("tower_day_summaries", "2026-01-05", "2026-01-07", instance=instance, defs=defs)
    (run,) = day.runs
    assert run.success and run.partitions == 3
    return defs, run


def test_a_summary_window_that_fails_alone_fails_its_partitions_completeness_check_until_redone(
    pg_url, redis_url, instance, store, worklog
):
    """The partition is materialized (the run succeeds, by design), and its check says the truth:
    failed, WARN, naming the window, its type, the reason and the next attempt (configured zone,
    whole seconds). Once the tower's own retry (an explicit call) redoes the window, the check run
    alone passes: it reads the retry ledger, never the model."""
    from dagster import AssetCheckSeverity, AssetSelection, Definitions, define_asset_job

    with FakeOpenAI() as fake:
        defs, run = _days_with_alphas_day_5_failing(fake, pg_url, redis_url, instance)
    results = _complete_results(instance, run.run_id)
    assert {k: r.passed for k, r in results.items()} == {"2026-01-05": False, "2026-01-06": True, "2026-01-07": True}
    failed = results["2026-01-05"]
    assert failed.severity == AssetCheckSeverity.WARN and failed.metadata["failed_windows"].value == 1
    table = failed.metadata["first_failed"].value
    assert "worklog day 2026-01-05 [alpha]" in table and "| worklog |" in table and "scripted 400" in table
    assert re.search(r"\| \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00 \|", table), table
    assert results["2026-01-06"].metadata["failed_windows"].value == 0

    redone = worklog.summarize("worklog", WindowQuery.parse("day", "2026-01-05", group="alpha"))
    assert redone["jobs"][0]["state"] == "succeeded"
    check_only = Definitions.merge(
        defs,
        Definitions(
            jobs=[
                define_asset_job(
                    "tower_complete_check_only",
                    selection=AssetSelection.checks_for_assets(tower_assets.tower_day_summaries),
                )
            ]
        ),
    ).resolve_job_def("tower_complete_check_only")
    again = check_only.execute_in_process(instance=instance, tags={"dagster/partition": "2026-01-05"})
    assert again.success and not again.get_asset_materialization_events()
    (passed,) = _complete_results(instance, again.run_id).values()
    assert passed.partition == "2026-01-05" and passed.passed and passed.metadata["failed_windows"].value == 0


def test_backfill_re_runs_a_summary_partition_left_with_a_failed_window_and_not_the_clean_ones(
    pg_url, redis_url, instance, store, worklog
):
    """`memory-pipeline backfill` (mode "changed") over days 5..7 after alpha's day 5 failed alone:
    one run of day 5 only, with the reason; its check passes; a second backfill launches nothing."""
    with FakeOpenAI() as fake:
        defs, _ = _days_with_alphas_day_5_failing(fake, pg_url, redis_url, instance)
        calls = len(fake.requests)
        report = operations.materialize(
            "tower_day_summaries", "2026-01-05", "2026-01-07", mode="changed", instance=instance, defs=defs
        )
        assert report.reasons == {"2026-01-05": "1 window failed (worklog day 2026-01-05 [alpha])"}
        assert [(r.first, r.last, r.success) for r in report.runs] == [("2026-01-05", "2026-01-05", True)]
        assert report.skipped_existing == 2 and len(fake.requests) == calls + 1  # alpha's day 5 only
        assert {k: r.passed for k, r in _complete_results(instance, report.runs[0].run_id).items()} == {
            "2026-01-05": True
        }
        clean = operations.materialize(
            "tower_day_summaries", "2026-01-05", "2026-01-07", mode="changed", instance=instance, defs=defs
        )
        assert clean.runs == [] and clean.reasons == {} and clean.skipped_existing == 3


def test_month_summaries_are_an_operator_target_for_a_type_whose_cap_reaches_month(store, worklog, instance, defs):
    worklog.create_type("garden/log", chain=["day", "month"], summaries=True, summary_cap="month")
    worklog.append(
        "garden/log",
        [{"content": f"tomatoes watered on day {d}", "at": cst(2026, 1, d, 9).isoformat()} for d in (5, 6)],
    )
    assert operations.materialize("tower_windows", "2026-01-05", "2026-01-07", instance=instance, defs=defs).success
    assert operations.materialize("tower_month_windows", "2026-01", "2026-01", instance=instance, defs=defs).success
    month = operations.materialize(
        "tower_month_summaries", "2026-01", "2026-01", mode="changed", instance=instance, defs=defs
    )
    assert month.success and month.requested == 1, month
    assert ("2026-01", "ok") in _ledger(store, "tower_month_summaries")
    complete = [r for r in _checks(instance, month.runs[0].run_id) if r[0] == "tower_summaries_complete"]
    assert complete == [("tower_summaries_complete", "2026-01", True)]
    again = operations.materialize(
        "tower_month_summaries", "2026-01", "2026-01", mode="changed", instance=instance, defs=defs
    )
    assert again.requested == 0 and again.skipped_existing == 1 and not again.runs
