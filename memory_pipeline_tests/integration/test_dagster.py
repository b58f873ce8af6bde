"""The Dagster layer on an ephemeral instance with the real PostgreSQL and Redis: every asset,
ranges as one run, backfill missing vs rebuild, checks, metadata, schedules and sensors."""

import json
import logging
import re
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterEventType,
    build_multi_asset_sensor_context,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
)
from sqlalchemy import func, select

from memory_pipeline import operations
from memory_pipeline.definitions import build_defs
from memory_pipeline.defs._shared.partitions import cst_day, cst_day_open
from memory_pipeline.defs.temporal import assets
from memory_pipeline.lib.store.tables import llm_ledger, partition_leases
from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource
from memory_pipeline.temporal import summaries
from memory_pipeline.temporal.tables import temporal_summaries, warmup_requests
from memory_pipeline_tests.conftest import CST, conversation, cst
from memory_pipeline_tests.fake_openai import FakeOpenAI


def make_defs(pg_url, redis_url, **llm):
    return build_defs(
        {
            "memory_store": MemoryStoreResource(database_url=pg_url),
            "kv_cache": CacheResource(redis_url=redis_url),
            "llm": LLMResource(**llm),
            "memory_config": MemoryConfigResource(),
        }
    )


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def defs(pg_url, redis_url):
    return make_defs(pg_url, redis_url)


@pytest.fixture
def new_year(ingest):
    ingest(
        conversation("w1", "a", cst(2025, 12, 30, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "b", cst(2025, 12, 31, 22), ["compost turned", "compost warm"])
        + conversation("w1", "c", cst(2026, 1, 2, 9, 5), ["harvest plan", "harvest basket"])
        + conversation("w1", "d", cst(2026, 1, 2, 9, 12), ["deploy fixed", "deploy shipped"])
        + conversation("w2", "e", cst(2025, 12, 31, 8), ["marathon pacing", "marathon intervals"])
    )


def _materializations(instance, asset) -> dict:
    records = instance.fetch_materializations(asset.key, limit=1000).records
    out = {}
    for r in reversed(records):
        m = r.asset_materialization
        out[m.partition] = {k: v.value for k, v in m.metadata.items()}
    return out


def _recorded(instance, asset, run_id) -> list[str]:
    """The partitions run ``run_id`` recorded a materialization of, once per event."""
    records = instance.fetch_materializations(asset.key, limit=1000).records
    return sorted(r.asset_materialization.partition for r in records if r.run_id == run_id)


def _check_results(instance, run_id) -> list[bool]:
    logs = instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    return [e.dagster_event.event_specific_data.passed for e in logs]


def _ok_calls(store) -> int:
    with store.connect() as conn:
        return conn.execute(
            select(func.count()).select_from(llm_ledger).where(llm_ledger.c.outcome == "ok")
        ).scalar_one()


def test_every_asset_materializes_as_one_run_per_range_with_metadata(defs, instance, store, new_year):
    steps = [
        ("chunks", "2025-12-30", "2026-01-02", "2026-01-02T10:00:00+08:00"),
        ("peer_rolls", "2026-01-02", "2026-01-02", "2026-01-02T10:00:00+08:00"),
        ("day", "2025-12-30", "2026-01-01", ""),
        ("month", "2025-12", "2025-12", ""),
        ("year", "2025", "2025", ""),
    ]
    for window, lo, hi, as_of in steps:
        report = operations.materialize(window, lo, hi, as_of=as_of, instance=instance, defs=defs)
        assert report.success, report.runs[0].error
        assert len(report.runs) == 1  # a range is one run (BackfillPolicy.single_run)
        assert all(_check_results(instance, report.runs[0].run_id))
    rolls = operations.run_system_rolls("2026-01-02T10:00:00+08:00", instance=instance, defs=defs)
    assert rolls.success

    days = _materializations(instance, assets.temporal_day_summaries)
    assert sorted(days) == ["2025-12-30", "2025-12-31", "2026-01-01"]
    d31 = days["2025-12-31"]
    assert d31["worlds"] == 2 and d31["non_empty"] == 2 and d31["rows_written"] == 2
    assert d31["llm_calls"] == 2 and d31["llm_tokens_in"] > 0 and d31["placeholders"] == {}
    assert days["2026-01-01"]["placeholders"] == {"no_sessions": 2}
    assert days["2025-12-30"]["placeholders"] == {}  # w2 did not exist yet: no row at all
    assert "| world | period | summary |" in d31["preview"] and "| w1 | 2025-12-31 |" in d31["preview"]
    chunks = _materializations(instance, assets.temporal_day_chunks)
    assert chunks["2026-01-02"]["chunks_written"] == 2 and chunks["2025-12-31"]["chunks_written"] == 2
    month = _materializations(instance, assets.temporal_month_summaries)["2025-12"]
    assert month["non_empty"] == 2
    assert _materializations(instance, assets.temporal_year_summaries)["2025"]["non_empty"] == 2
    assert _materializations(instance, assets.temporal_peer_rolls)["2026-01-02"]["warmed"] >= 1
    with store.connect() as conn:
        windows = dict(
            conn.execute(select(temporal_summaries.c.window, func.count()).group_by(temporal_summaries.c.window)).all()
        )
    assert windows == {"day": 5, "month": 2, "year": 2}


AUDITS = {
    "chunks": (assets.temporal_day_chunks, "chunks_have_sources_in_closed_buckets", "chunks_audited"),
    "day": (assets.temporal_day_summaries, "day_rows_have_sources_and_no_future", "rows_audited"),
    "month": (assets.temporal_month_summaries, "month_rows_have_sources_and_no_future", "rows_audited"),
    "year": (assets.temporal_year_summaries, "year_rows_have_sources_and_no_future", "rows_audited"),
}


def test_a_range_run_records_one_current_check_result_per_partition(defs, instance, new_year):
    """What the UI counts: after a single-run range over N partitions, each audit check holds N
    evaluations of that run, one per partition key, passed, none left planned (shown "skipped"),
    each tied to the materialization of its own partition (so shown as current)."""
    import asyncio

    from dagster import AssetCheckKey
    from dagster._core.loader import LoadingContextForTest
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionResolvedStatus

    steps = [
        ("chunks", "2025-12-30", "2026-01-02", "2026-01-02T10:00:00+08:00", {"2025-12-30": 1, "2026-01-01": 0}),
        ("day", "2025-12-29", "2026-01-02", "", {"2025-12-29": 0, "2025-12-30": 1, "2025-12-31": 2}),
        ("month", "2025-11", "2025-12", "", {"2025-11": 0, "2025-12": 2}),
        ("year", "2024", "2025", "", {"2024": 0, "2025": 2}),
    ]
    loading = LoadingContextForTest(instance)
    for window, lo, hi, as_of, audited in steps:
        asset, check_name, unit = AUDITS[window]
        report = operations.materialize(window, lo, hi, as_of=as_of, instance=instance, defs=defs)
        assert report.success, report.runs[0].error
        (run,) = report.runs
        keys, _ = operations.partition_keys(window, lo, hi)
        assert run.partitions == len(keys) > 1
        records = [
            r
            for r in instance.event_log_storage.get_asset_check_execution_history(
                AssetCheckKey(asset.key, check_name), limit=1000
            )
            if r.run_id == run.run_id
        ]
        assert sorted(r.partition for r in records) == keys  # no result without a partition
        materialized = {
            r.partition_key: r.storage_id
            for r in instance.fetch_materializations(asset.key, limit=1000).records
            if r.run_id == run.run_id
        }
        for r in records:
            assert asyncio.run(r.resolve_status(loading)) == AssetCheckExecutionResolvedStatus.SUCCEEDED
            assert r.evaluation.target_materialization_data.storage_id == materialized[r.partition]
            assert asyncio.run(r.targets_latest_materialization(loading))
            meta = {k: v.value for k, v in r.evaluation.metadata.items()}
            assert meta["problems"] == 0 and meta["first_problems"] == "none"
            if r.partition in audited:
                assert meta[unit] == audited[r.partition], (window, r.partition, meta)
        events = instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
        assert sorted(e.dagster_event.event_specific_data.partition for e in events) == keys


def test_a_failed_audit_is_a_failed_result_of_that_partition_only(defs, instance, store, new_year):
    """A row without sources fails the day check of its own partition only, the problem named."""
    from dagster import AssetCheckKey, AssetSelection, Definitions, define_asset_job
    from sqlalchemy import update

    from memory_pipeline.defs.temporal.checks import temporal_checks

    assert operations.materialize("day", "2025-12-30", "2025-12-31", instance=instance, defs=defs).success
    with store.begin() as conn:
        conn.execute(
            update(temporal_summaries)
            .where(temporal_summaries.c.period_start == date(2025, 12, 31), temporal_summaries.c.world_id == "w2")
            .values(source_ids=[], source_count=0)
        )
    asset, check_name, _ = AUDITS["day"]
    (day_check,) = [c for c in temporal_checks if c.check_key.name == check_name]
    audit = define_asset_job("audit_days", selection=AssetSelection.checks(day_check))
    result = (
        Definitions.merge(defs, Definitions(jobs=[audit]))
        .resolve_job_def("audit_days")
        .execute_in_process(
            instance=instance,
            tags={
                "dagster/asset_partition_range_start": "2025-12-30",
                "dagster/asset_partition_range_end": "2025-12-31",
            },
            raise_on_error=False,
        )
    )
    assert result.success  # a failed audit is a result, not a crash
    records = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(asset.key, check_name), limit=10
    )
    latest = {r.partition: r for r in reversed(records)}
    assert latest["2025-12-30"].evaluation.passed
    bad = latest["2025-12-31"].evaluation
    assert not bad.passed and bad.metadata["problems"].value == 1 and bad.metadata["rows_audited"].value == 2
    assert "w2 day 2025-12-31: non-empty row without sources" in bad.metadata["first_problems"].value


def test_backfill_missing_skips_placeholders_and_rebuild_reruns_everything(defs, instance, store, new_year):
    assert operations.materialize("day", "2026-01-01", "2026-01-01", instance=instance, defs=defs).success
    with store.connect() as conn:
        placeholder = conn.execute(
            select(temporal_summaries.c.updated_at, temporal_summaries.c.empty_reason).where(
                temporal_summaries.c.period_start == date(2026, 1, 1)
            )
        ).all()
    assert {r[1] for r in placeholder} == {"no_sessions"}
    missing = operations.materialize("day", "2025-12-29", "2026-01-03", mode="missing", instance=instance, defs=defs)
    assert (missing.requested, missing.skipped_existing) == (5, 1)
    assert [(r.first, r.last) for r in missing.runs] == [("2025-12-29", "2025-12-31"), ("2026-01-02", "2026-01-03")]
    again = operations.materialize("day", "2025-12-29", "2026-01-03", mode="missing", instance=instance, defs=defs)
    assert again.requested == 0 and again.runs == []
    rebuild = operations.materialize("day", "2025-12-29", "2026-01-03", mode="rebuild", instance=instance, defs=defs)
    assert rebuild.requested == 6 and [(r.first, r.last, r.partitions) for r in rebuild.runs] == [
        ("2025-12-29", "2026-01-03", 6)
    ]


def test_a_forced_rebuild_rewrites_an_unchanged_row_that_fails_its_check_from_the_llm_cache(
    pg_url, redis_url, instance, store, new_year
):
    """A row corrupted in the store (its sources emptied) fails its check, but its period's record
    shows nothing changed: a backfill leaves it, a rebuild rewrites it, with every answer from the
    LLM cache (ledger cache hits, no request to the provider)."""
    from sqlalchemy import update

    from memory_pipeline.temporal.summaries import audit_period

    def rows() -> list[tuple]:
        t = temporal_summaries.c
        with store.connect() as conn:
            q = select(t.world_id, t.period_start, t.content, t.source_ids, t.source_count).order_by(
                t.world_id, t.period_start
            )
            return [tuple(r) for r in conn.execute(q.where(t.window == "day"))]

    def outcomes() -> dict[str, int]:
        with store.connect() as conn:
            return dict(conn.execute(select(llm_ledger.c.outcome, func.count()).group_by(llm_ledger.c.outcome)).all())

    tz = ZoneInfo("Asia/Shanghai")
    with FakeOpenAI() as server:
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k")
        assert operations.materialize("day", "2025-12-30", "2025-12-31", instance=instance, defs=defs).success
        clean, paid = rows(), len(server.requests)
        assert paid == 3 and outcomes() == {"ok": 3}
        with store.begin() as conn:
            conn.execute(
                update(temporal_summaries)
                .where(temporal_summaries.c.period_start == date(2025, 12, 31), temporal_summaries.c.world_id == "w2")
                .values(source_ids=[], source_count=0)
            )
        assert audit_period(store, "day", date(2025, 12, 31), tz) != []
        left = operations.materialize("day", "2025-12-30", "2025-12-31", mode="changed", instance=instance, defs=defs)
        assert left.runs == [] and rows() != clean  # unchanged per its record: a backfill leaves it

        rebuilt = operations.materialize("day", "2025-12-31", "2025-12-31", rebuild=True, instance=instance, defs=defs)
        assert rebuilt.success, rebuilt.runs[0].error
        assert rows() == clean and audit_period(store, "day", date(2025, 12, 31), tz) == []
        assert len(server.requests) == paid  # no new provider call
        assert outcomes() == {"ok": 3, "cache_hit": 2}  # both worlds of 2025-12-31, from the cache
        (mat,) = [
            e.asset_materialization
            for e in instance.all_logs(rebuilt.runs[0].run_id)
            if e.asset_materialization is not None
        ]
        assert mat.metadata["skipped_unchanged"].value is False


def test_to_is_capped_at_cst_today_and_bad_ranges_are_named():
    today = datetime.now(ZoneInfo("Asia/Shanghai")).date()
    keys, notes = operations.partition_keys("day", (today - timedelta(days=3)).isoformat(), "2099-01-01")
    assert keys[-1] == (today - timedelta(days=1)).isoformat() and "capped" in notes[0]
    chunk_keys, _ = operations.partition_keys("chunks", (today - timedelta(days=1)).isoformat(), "2099-01-01")
    assert chunk_keys[-1] == today.isoformat()  # the open day exists for the */30 tick only
    assert cst_day.get_last_partition_key() == (today - timedelta(days=1)).isoformat()
    assert cst_day_open.get_last_partition_key() == today.isoformat()
    with pytest.raises(operations.RangeError, match="--from '2026/01/01' is not a partition key of day"):
        operations.partition_keys("day", "2026/01/01", None)
    with pytest.raises(operations.RangeError, match="--to '2026-1-5' is not a partition key of day"):
        operations.partition_keys("day", "2026-01-01", "2026-1-5")
    with pytest.raises(operations.RangeError, match="empty range"):
        operations.partition_keys("month", "2026-03", "2026-01")
    with pytest.raises(operations.RangeError, match="unknown window"):
        operations.partition_keys("week", None, None)


def test_unchanged_range_costs_no_llm_calls_unless_forced(defs, instance, store, new_year):
    operations.materialize("day", "2025-12-30", "2026-01-02", instance=instance, defs=defs)
    first = _ok_calls(store)
    assert first == 4  # one per non-empty (day, world) pair
    operations.materialize("day", "2025-12-30", "2026-01-02", instance=instance, defs=defs)
    assert _ok_calls(store) == first
    operations.materialize("day", "2025-12-30", "2026-01-02", force_llm=True, instance=instance, defs=defs)
    assert _ok_calls(store) == 2 * first


def _backfill_in_a_process(pg_url, redis_url, llm, lo, hi, queue) -> None:
    """One operator's backfill in a process of its own (as two launched runs are)."""
    try:
        with instance_for_test() as own:
            report = operations.materialize("day", lo, hi, instance=own, defs=make_defs(pg_url, redis_url, **llm))
            waits = [
                e.user_message
                for e in own.all_logs(report.runs[0].run_id)
                if "is working on this partition" in e.user_message
            ]
        queue.put((report.success, report.runs[0].error, waits))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put((False, f"{type(exc).__name__}: {exc}", []))


def test_overlapping_backfills_never_pay_twice(pg_url, redis_url, store, ingest):
    """Two runs over overlapping day ranges at once, in two processes (two UI backfills): each
    partition is worked on by one run at a time (its lease), the other does it afterwards by reusing
    the rows. Together they pay one model call per non-empty (world, day) pair, as one run would,
    and leave the rows one run leaves."""
    import multiprocessing

    events = []
    for w in range(6):
        for d in range(5):  # 2025-12-29 .. 2026-01-02
            at = cst(2025, 12, 29, 9, w) + timedelta(days=d)
            events += conversation(f"w{w}", f"c{w}-{d}", at, [f"garden {w} {d}", f"reply {w} {d}"])
    ingest(events)
    pairs = 6 * 5
    with FakeOpenAI() as server:
        server.latency = 0.1
        llm = dict(model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        procs = [
            ctx.Process(target=_backfill_in_a_process, args=(pg_url, redis_url, llm, lo, hi, queue))
            for lo, hi in (("2025-12-28", "2026-01-02"), ("2025-12-29", "2026-01-03"))
        ]
        for p in procs:
            p.start()
        results = [queue.get(timeout=300) for _ in procs]
        for p in procs:
            p.join(60)
        assert all(ok for ok, _, _ in results), results
        assert len(server.requests) == pairs
        with store.connect() as conn:
            outcomes = dict(
                conn.execute(select(llm_ledger.c.outcome, func.count()).group_by(llm_ledger.c.outcome)).all()
            )
            rows = conn.execute(select(temporal_summaries)).mappings().all()
        assert outcomes == {"ok": pairs}  # not a single duplicate call, not even a cache hit
        assert len([r for r in rows if r["empty_reason"] is None]) == pairs
        assert {r["period_start"] for r in rows} == {date(2025, 12, 29) + timedelta(days=i) for i in range(6)}
        # One more run over the whole range finds every row as it would have written it.
        with instance_for_test() as own:
            again = operations.materialize(
                "day", "2025-12-28", "2026-01-03", instance=own, defs=make_defs(pg_url, redis_url, **llm)
            )
            assert again.success
            meta = _materializations(own, assets.temporal_day_summaries)
        assert sum(m["rows_written"] for m in meta.values()) == 0 and sum(m["llm_calls"] for m in meta.values()) == 0
        assert len(server.requests) == pairs
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(partition_leases)).scalar_one() == 0  # all released


def test_a_range_whose_every_partition_failed_says_the_other_worlds_rows_are_written(
    pg_url, redis_url, instance, store, ingest
):
    """w1's calls fail on both days, w2's are answered: both partitions fail, and the line said "no
    new row written (rows kept)" while w2's two rows had just been written."""
    ingest(
        conversation("w1", "a", cst(2026, 2, 2, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "b", cst(2026, 2, 3, 9), ["tomatoes staked", "tomatoes tied"])
        + conversation("w2", "c", cst(2026, 2, 2, 10), ["marathon pacing", "marathon intervals"])
        + conversation("w2", "d", cst(2026, 2, 3, 10), ["marathon taper", "marathon rest"])
    )
    with FakeOpenAI() as server:
        server.step = lambda body: ("status", 500) if "tomatoes" in json.dumps(body) else ("ok", server.default_text)
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        report = operations.materialize("day", "2026-02-02", "2026-02-03", instance=instance, defs=defs)
    assert not report.success
    line = report.runs[0].error.splitlines()[0]
    assert line.startswith(
        "2 of 2 day partition(s); no new row for the worlds that failed (a row they had is kept), "
        "the other worlds' rows are written: "
    ), line
    with store.connect() as conn:
        t = temporal_summaries.c
        written = conn.execute(select(t.world_id, t.period_start).where(t.window == "day")).all()
    assert sorted(w for w, _ in written) == ["w2", "w2"]


def test_a_dead_runs_lease_is_taken_over_and_a_live_one_is_left_to_its_run(defs, instance, store, new_year):
    from memory_pipeline.lib.store import leases

    asset = "temporal_day_summaries"
    # A worker died holding 2025-12-30 (its lease expired); another run is alive on 2025-12-31.
    past = datetime.now(UTC) - timedelta(minutes=1)
    with store.begin() as conn:
        conn.execute(
            partition_leases.insert().values(
                asset=asset, partition="2025-12-30", holder="dead-run", acquired_at=past, expires_at=past
            )
        )
    assert leases.try_acquire(store, asset, "2025-12-31", "live-run") is None
    config = operations.run_config("day")
    config["ops"]["temporal_day_summaries"]["config"]["lease_wait_seconds"] = 1
    run = operations.run_range(instance, "day", "2025-12-30", "2026-01-01", config, defs)
    assert not run.success
    assert "1 of 3 day partition(s); rows of the others are written: temporal_day_summaries 2025-12-31: " in run.error
    assert "still held by run live-run" in run.error.splitlines()[0]
    with store.connect() as conn:
        days = {r[0] for r in conn.execute(select(temporal_summaries.c.period_start))}
    assert days == {date(2025, 12, 30), date(2026, 1, 1)}  # the dead run's day was taken over and done
    # The failed run materializes the days it wrote; the one left to the live run is not its to record.
    assert _recorded(instance, assets.temporal_day_summaries, run.run_id) == ["2025-12-30", "2026-01-01"]
    assert leases.current(store, asset, "2025-12-31").holder == "live-run"  # the live lease is untouched
    waited = [e.user_message for e in instance.all_logs(run.run_id) if "is working on this partition" in e.user_message]
    assert len(waited) == 1 and "run live-run" in waited[0]


def test_llm_hard_failure_fails_only_that_partition(pg_url, redis_url, instance, store, new_year):
    with FakeOpenAI() as server:
        defs = make_defs(
            pg_url,
            redis_url,
            model="openai/fake",
            api_base=server.api_base,
            api_key="k",
            max_retries=0,
            backoff_seconds=0.01,
        )
        server.push("status", 500)
        failed = operations.materialize("day", "2025-12-30", "2025-12-30", instance=instance, defs=defs)
        assert not failed.success and "LLM hard failure" in failed.runs[0].error
        ok = operations.materialize("day", "2025-12-31", "2025-12-31", instance=instance, defs=defs)
        assert ok.success
        assert operations.materialized(instance, "day") == {"2025-12-31"}
        with store.connect() as conn:
            periods = {r[0] for r in conn.execute(select(temporal_summaries.c.period_start))}
        assert periods == {date(2025, 12, 31)}  # no placeholder for the failed day
        # In a range, the other partitions' rows are still written and the failure is named.
        server.push("status", 500)
        ranged = operations.materialize("day", "2025-12-30", "2026-01-02", force_llm=True, instance=instance, defs=defs)
        assert not ranged.success and "1 of 4 day partition(s); rows of the others are written" in ranged.runs[0].error
        with store.connect() as conn:
            periods = {r[0] for r in conn.execute(select(temporal_summaries.c.period_start))}
        assert date(2026, 1, 2) in periods


def test_a_provider_outage_stops_a_range_at_the_breaker_and_the_next_run_does_the_rest(
    pg_url, redis_url, instance, store, ingest, monkeypatch
):
    """Days 2025-11-20..2026-01-05 are two batches (31 days, then 16). The provider answers the first
    batch's 4 calls, then fails every request: the run stops after 5 failed calls (4 attempts each)
    with the breaker's one line, not after every call of the range paid its retries."""
    events = []
    for w in range(2):  # first batch: 2 worlds x 2 days
        for d in (21, 22):
            events += conversation(f"w{w}", f"n{w}-{d}", cst(2025, 11, d, 9, w), [f"seed {w} {d}", f"water {w} {d}"])
    for w in range(3):  # second batch: 3 worlds x 5 days
        for d in range(5):
            at = cst(2025, 12, 28, 9, w) + timedelta(days=d)
            events += conversation(f"w{w}", f"c{w}-{d}", at, [f"garden {w} {d}", f"reply {w} {d}"])
    ingest(events)
    monkeypatch.setenv("MEMORY_LLM_BREAKER_FAILURES", "5")
    with FakeOpenAI() as server:
        defs = make_defs(
            pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k", backoff_seconds=0.01
        )
        for _ in range(4):
            server.push("ok", "a garden day")
        for _ in range(200):
            server.push("status", 500)
        down = operations.materialize("day", "2025-11-20", "2026-01-05", instance=instance, defs=defs)
        assert not down.success
        assert len(server.requests) == 4 + 5 * 4  # without the breaker: 4 + 15 calls x 4 attempts
        line = down.runs[0].error.splitlines()[0]
        assert line.startswith(f"LLM provider openai/fake at {server.api_base} is failing: InternalServerError")
        assert line.endswith("(5 consecutive failures); stopping: the partitions not done are left for the next run")
        assert instance.all_logs(down.runs[0].run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY) == []
        with store.connect() as conn:
            written = {r[0] for r in conn.execute(select(temporal_summaries.c.period_start))}
            outcomes = dict(
                conn.execute(select(llm_ledger.c.outcome, func.count()).group_by(llm_ledger.c.outcome)).all()
            )
            assert conn.execute(select(func.count()).select_from(partition_leases)).scalar_one() == 0
        # The first batch stays written; the batch the breaker stopped was one transaction: none of it.
        assert date(2025, 11, 21) in written and date(2025, 11, 22) in written
        assert not {d for d in written if d >= date(2025, 12, 21)}
        assert outcomes == {"ok": 4, "error": 5, "breaker_open": 1}
        # The provider is back; the next run (here the same process: past the breaker's cooldown)
        # pays only the 15 calls not done, and writes the rest.
        server.script.clear()
        monkeypatch.setenv("MEMORY_LLM_BREAKER_COOLDOWN_SECONDS", "0")
        again = operations.materialize("day", "2025-11-20", "2026-01-05", instance=instance, defs=defs)
        assert again.success, again.runs[0].error
        assert len(server.requests) == 4 + 5 * 4 + 15
    with store.connect() as conn:
        rows = conn.execute(select(temporal_summaries).where(temporal_summaries.c.empty_reason.is_(None))).all()
    assert len(rows) == 4 + 15


def test_a_range_that_fails_one_partition_materializes_the_partitions_it_wrote(
    pg_url, redis_url, instance, store, new_year
):
    """The range's first call (w1's 2025-12-30) is a hard failure: the run fails with the same first
    line, and each partition it wrote is materialized by that run with its own metadata; the failed
    one is not, so backfilling the missing partitions launches it alone."""
    with FakeOpenAI() as server:
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        server.push("status", 500)
        report = operations.materialize("day", "2025-12-30", "2026-01-01", instance=instance, defs=defs)
        (run,) = report.runs
        assert not run.success
        assert run.error.splitlines()[0].startswith(
            "1 of 3 day partition(s); rows of the others are written: day 2025-12-30: "
        )
        assert _recorded(instance, assets.temporal_day_summaries, run.run_id) == ["2025-12-31", "2026-01-01"]
        meta = _materializations(instance, assets.temporal_day_summaries)
        assert meta["2025-12-31"]["rows_written"] == 2 and meta["2025-12-31"]["llm_calls"] == 2
        assert meta["2026-01-01"]["rows_written"] == 2 and meta["2026-01-01"]["placeholders"] == {"no_sessions": 2}
        with store.connect() as conn:
            periods = {r[0] for r in conn.execute(select(temporal_summaries.c.period_start))}
        assert periods == {date(2025, 12, 31), date(2026, 1, 1)}
        missing = operations.materialize(
            "day", "2025-12-30", "2026-01-01", mode="missing", instance=instance, defs=defs
        )
        assert missing.success and [(r.first, r.last) for r in missing.runs] == [("2025-12-30", "2025-12-30")]
        # A run that succeeds records its partitions once, as before.
        assert _recorded(instance, assets.temporal_day_summaries, missing.runs[0].run_id) == ["2025-12-30"]
    assert operations.materialized(instance, "day") == {"2025-12-30", "2025-12-31", "2026-01-01"}


def test_a_range_stopped_by_the_breaker_materializes_only_the_batches_written_before_it(
    pg_url, redis_url, instance, store, new_year, monkeypatch
):
    """Batches of two days. 2025-12-29..30 is written (one call). In 2025-12-31..2026-01-01 the first
    call fails and opens the breaker, the next is refused: that batch is one transaction, rolled
    back, so neither of its days is materialized (2026-01-01 needed no call, yet it was not written)."""
    monkeypatch.setitem(summaries.BATCH, "day", 2)
    monkeypatch.setenv("MEMORY_LLM_BREAKER_FAILURES", "1")
    with FakeOpenAI() as server:
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        server.push("ok", "tomatoes planted and watered")
        for _ in range(10):
            server.push("status", 500)
        report = operations.materialize("day", "2025-12-29", "2026-01-01", instance=instance, defs=defs)
    (run,) = report.runs
    assert not run.success
    assert run.error.splitlines()[0].endswith("stopping: the partitions not done are left for the next run")
    assert _recorded(instance, assets.temporal_day_summaries, run.run_id) == ["2025-12-29", "2025-12-30"]
    meta = _materializations(instance, assets.temporal_day_summaries)
    assert meta["2025-12-30"]["rows_written"] == 1 and meta["2025-12-30"]["llm_calls"] == 1
    assert meta["2025-12-29"]["rows_written"] == 0  # no world yet: done, nothing to write
    with store.connect() as conn:
        periods = {r[0] for r in conn.execute(select(temporal_summaries.c.period_start))}
    assert periods == {date(2025, 12, 30)}


def test_a_chunk_day_with_a_failed_conversation_is_not_materialized(pg_url, redis_url, instance, new_year):
    """The range's first chunk call (conversation a, 2025-12-30) is a hard failure: that day keeps
    a conversation to chunk, so it is not done; 2025-12-31 is, and the failed run materializes it."""
    with FakeOpenAI() as server:
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        server.push("status", 500)
        report = operations.materialize(
            "chunks", "2025-12-30", "2025-12-31", as_of="2026-01-02T10:00:00+08:00", instance=instance, defs=defs
        )
    (run,) = report.runs
    line = run.error.splitlines()[0]
    assert not run.success and "chunk summaries failed for 1 conversation(s)" in line
    assert re.search(r": day 2025-12-30: conversation \S+ \(world w\d\): openai/fake failed for chunk", line), line
    assert _recorded(instance, assets.temporal_day_chunks, run.run_id) == ["2025-12-31"]
    assert _materializations(instance, assets.temporal_day_chunks)["2025-12-31"]["chunks_written"] == 2


MISSING_DECEMBER = (
    "month 2025-12: 3 child row(s) missing: w1 2025-12-30, w1 2025-12-31, w2 2025-12-31; "
    "run those day partitions first (or select them in the same launch)"
)
FAILURE = "dagster._core.definitions.events.Failure: "  # how the UI prints a Failure (the CLI: its message alone)


def _first_line(result) -> str:
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    return failure.event_specific_data.error.message.strip().splitlines()[0]


def test_a_month_with_missing_days_fails_at_once_naming_them(defs, instance, new_year):
    """CLI and UI launches (no nightly tag) never wait: the first line names the missing rows."""
    report = operations.materialize("month", "2025-12", "2025-12", instance=instance, defs=defs)
    assert not report.success and report.runs[0].error.splitlines()[0] == MISSING_DECEMBER
    # What the launchpad sends: the default config (child_wait_retries 12) and no cascade tag.
    ui = defs.resolve_job_def("temporal_month_job").execute_in_process(
        instance=instance, partition_key="2025-12", raise_on_error=False
    )
    assert not ui.success and _first_line(ui) == f"{FAILURE}{MISSING_DECEMBER}"
    for run_id in (report.runs[0].run_id, ui.run_id):
        assert instance.all_logs(run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY) == []
    # A range names each month that lacks children; the complete ones are written.
    ranged = operations.materialize("month", "2025-11", "2025-12", instance=instance, defs=defs)
    error = ranged.runs[0].error.splitlines()[0]
    assert error == f"1 of 2 month partition(s); rows of the others are written: {MISSING_DECEMBER}"
    # November (no child missing: no world yet) is written, so materialized; December is not.
    assert operations.materialized(instance, "month") == {"2025-11"}


def test_only_the_nightly_cascade_waits_for_its_children(defs, instance, new_year):
    repo = defs.get_repository_def()
    ctx = build_schedule_context(instance=instance, scheduled_execution_time=cst(2026, 1, 1, 0, 5), repository_def=repo)
    (req,) = defs.get_schedule_def("temporal_month_schedule").evaluate_tick(ctx).run_requests
    assert req.tags["memory_pipeline/cascade"] == "nightly" and req.partition_key == "2025-12"
    (day_req,) = defs.get_schedule_def("temporal_day_schedule").evaluate_tick(ctx).run_requests
    assert "memory_pipeline/cascade" not in day_req.tags
    config = {"ops": {"temporal_month_summaries": {"config": {"child_wait_retries": 1, "child_wait_seconds": 0}}}}
    job = defs.resolve_job_def("temporal_month_job")
    tags = {"memory_pipeline/cascade": "nightly"}  # execute_in_process sets the partition tags itself
    waited = job.execute_in_process(
        instance=instance, partition_key=req.partition_key, tags=tags, run_config=config, raise_on_error=False
    )
    assert not waited.success and _first_line(waited) == f"{FAILURE}{MISSING_DECEMBER}"
    assert len(instance.all_logs(waited.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)) == 1
    warnings = [
        e.user_message for e in instance.all_logs(waited.run_id) if "nightly cascade: waiting" in e.user_message
    ]
    assert len(warnings) == 1 and MISSING_DECEMBER in warnings[0]
    # The day run of the same night writes the children; the next retry finds them.
    operations.materialize("day", "2025-12-01", "2025-12-31", instance=instance, defs=defs)
    done = job.execute_in_process(
        instance=instance, partition_key=req.partition_key, tags=tags, run_config=config, raise_on_error=False
    )
    assert done.success


def test_a_thousand_worlds_are_one_partition_in_one_run(defs, instance, store, ingest):
    events = []
    for i in range(1000):
        events += conversation(
            f"w{i:04d}", f"c{i:04d}", cst(2026, 3, 4, 9, i % 60), [f"topic{i} garden", f"topic{i} reply"]
        )
    ingest(events)
    report = operations.materialize("day", "2026-03-04", "2026-03-04", instance=instance, defs=defs)
    assert report.success and len(report.runs) == 1
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(temporal_summaries)).scalar_one() == 1000
    assert len(cst_day.get_partition_keys()) < 25_000  # worlds are not a partition dimension


def test_redis_unreachable_keeps_the_pipeline_green(pg_url, instance, new_year):
    defs = make_defs(pg_url, "redis://127.0.0.1:1/0")
    for window, lo, hi in (
        ("chunks", "2026-01-02", "2026-01-02"),
        ("peer_rolls", "2026-01-02", "2026-01-02"),
        ("day", "2025-12-31", "2025-12-31"),
    ):
        assert operations.materialize(window, lo, hi, instance=instance, defs=defs).success
    assert operations.run_system_rolls("2026-01-01T09:00:00+08:00", instance=instance, defs=defs).success
    peer = _materializations(instance, assets.temporal_peer_rolls)["2026-01-02"]
    assert peer["cache_backend"] == "memory"


@pytest.mark.parametrize(
    "schedule,at,expected",
    [
        ("temporal_month_schedule", cst(2026, 2, 1, 0, 5), ["2026-01"]),
        ("temporal_month_schedule", cst(2026, 1, 1, 0, 5), ["2025-12"]),
        ("temporal_year_schedule", cst(2026, 1, 1, 0, 5), ["2025"]),
        ("temporal_day_schedule", cst(2026, 2, 1, 0, 5), ["2026-01-31"]),
        ("temporal_day_schedule", cst(2026, 1, 1, 0, 5), ["2025-12-31"]),
        ("temporal_tick_schedule", cst(2026, 7, 18, 6, 30), ["2026-07-18"]),
        ("temporal_tick_schedule", cst(2026, 7, 18, 0, 0), ["2026-07-17"]),  # closes yesterday's last bucket
    ],
)
def test_schedules_at_fixed_clocks(defs, instance, schedule, at, expected):
    sched = defs.get_schedule_def(schedule)
    assert sched.execution_timezone == "Asia/Shanghai"
    ctx = build_schedule_context(
        instance=instance, scheduled_execution_time=at, repository_def=defs.get_repository_def()
    )
    assert [r.partition_key for r in sched.evaluate_tick(ctx).run_requests] == expected


def test_schedule_crons(defs):
    crons = {s.name: defs.get_schedule_def(s.name).cron_schedule for s in defs.schedules}
    assert crons["temporal_tick_schedule"] == "*/30 * * * *"
    assert crons["temporal_day_schedule"] == "5 0 * * *"
    assert crons["temporal_month_schedule"] == "5 0 1 * *"
    assert crons["temporal_year_schedule"] == "5 0 1 1 *"


def test_nightly_schedule_catches_up_the_nights_it_missed(defs, instance):
    repo = defs.get_repository_def()
    sched = defs.get_schedule_def("temporal_day_schedule")

    def tick(at):
        ctx = build_schedule_context(instance=instance, scheduled_execution_time=at, repository_def=repo)
        return [r.partition_key for r in sched.evaluate_tick(ctx).run_requests]

    instance.report_runless_asset_event(AssetMaterialization(assets.temporal_day_summaries.key, partition="2026-01-09"))
    # The daemon was down from the 10th to the 14th: its first tick back creates the four missed runs.
    assert tick(cst(2026, 1, 14, 0, 5)) == ["2026-01-10", "2026-01-11", "2026-01-12", "2026-01-13"]
    for day in ("2026-01-10", "2026-01-11", "2026-01-12", "2026-01-13"):
        instance.report_runless_asset_event(AssetMaterialization(assets.temporal_day_summaries.key, partition=day))
    assert tick(cst(2026, 1, 15, 0, 5)) == ["2026-01-14"]
    assert tick(cst(2026, 1, 14, 23, 0)) == []  # nothing new closed since the last materialization


def test_system_rolls_follow_summary_writes(defs, instance, new_year):
    sensor = defs.get_sensor_def("temporal_system_rolls_sensor")
    repo = defs.get_repository_def()

    def evaluate(cursor=None):
        ctx = build_multi_asset_sensor_context(
            monitored_assets=[
                assets.temporal_day_summaries.key,
                assets.temporal_month_summaries.key,
                assets.temporal_year_summaries.key,
            ],
            instance=instance,
            repository_def=repo,
            cursor=cursor,
        )
        return sensor.evaluate_tick(ctx)

    assert evaluate().run_requests == []
    operations.materialize("day", "2025-12-31", "2025-12-31", instance=instance, defs=defs)
    fired = evaluate()
    assert len(fired.run_requests) == 1 and fired.run_requests[0].job_name in (None, "temporal_system_rolls_job")
    assert evaluate(fired.cursor).run_requests == []


def test_read_path_warmups_are_served_in_the_background(defs, instance, store, pg_url, redis_url, new_year):
    from memory_pipeline.lib.cache import KVCache
    from memory_pipeline.temporal.config import TemporalSummaryConfig
    from memory_pipeline.temporal.read import peer_messages

    operations.materialize(
        "chunks", "2026-01-02", "2026-01-02", as_of="2026-01-02T10:00:00+08:00", instance=instance, defs=defs
    )
    msgs, requested = peer_messages(
        store, KVCache(redis_url), TemporalSummaryConfig(), "w1", "viewer", cst(2026, 1, 2, 10), CST
    )
    assert requested == 1 and msgs[0]["cache"] == "miss"
    sensor = defs.get_sensor_def("temporal_peer_roll_warmup_sensor")
    ctx = build_sensor_context(
        instance=instance,
        resources={"memory_store": MemoryStoreResource(database_url=pg_url)},
        repository_def=defs.get_repository_def(),
    )
    (req,) = sensor.evaluate_tick(ctx).run_requests
    assert req.partition_key == "2026-01-02" and req.asset_selection == [AssetKey("temporal_peer_rolls")]
    operations.materialize(
        "peer_rolls", "2026-01-02", "2026-01-02", as_of="2026-01-02T10:00:00+08:00", instance=instance, defs=defs
    )
    with store.connect() as conn:
        assert (
            conn.execute(
                select(func.count()).select_from(warmup_requests).where(warmup_requests.c.done_at.is_(None))
            ).scalar_one()
            == 0
        )
    msgs, _ = peer_messages(
        store, KVCache(redis_url), TemporalSummaryConfig(), "w1", "viewer", cst(2026, 1, 2, 10), CST
    )
    assert msgs[0]["cache"] == "hit"


def test_new_year_cascade_writes_december_and_the_year(defs, instance, store, new_year):
    """2026-01-01 00:05 CST: the day, month and year schedules fire; their runs write 2025-12-31,
    2025-12 and 2025 (the seed's example)."""
    assert operations.materialize("day", "2025-12-30", "2025-12-30", instance=instance, defs=defs).success
    repo = defs.get_repository_def()
    requested = []
    for name in ("temporal_day_schedule", "temporal_month_schedule", "temporal_year_schedule"):
        ctx = build_schedule_context(
            instance=instance, scheduled_execution_time=cst(2026, 1, 1, 0, 5), repository_def=repo
        )
        for req in defs.get_schedule_def(name).evaluate_tick(ctx).run_requests:
            requested.append((name, req.partition_key))
    assert requested == [
        ("temporal_day_schedule", "2025-12-31"),
        ("temporal_month_schedule", "2025-12"),
        ("temporal_year_schedule", "2025"),
    ]
    for (_, key), window in zip(requested, ("day", "month", "year"), strict=True):
        config = operations.run_config(window)
        assert operations.run_range(instance, window, key, key, config, defs).success
    with store.connect() as conn:
        rows = conn.execute(
            select(temporal_summaries.c.world_id, temporal_summaries.c.window, temporal_summaries.c.period_start).where(
                temporal_summaries.c.window != "day", temporal_summaries.c.empty_reason.is_(None)
            )
        ).all()
    assert sorted(rows) == [
        ("w1", "month", date(2025, 12, 1)),
        ("w1", "year", date(2025, 1, 1)),
        ("w2", "month", date(2025, 12, 1)),
        ("w2", "year", date(2025, 1, 1)),
    ]


def test_freshness_checks_flag_a_day_not_written_by_its_deadline(defs, instance):
    from dagster import AssetSelection, Definitions, define_asset_job
    from dagster._core.test_utils import freeze_time

    from memory_pipeline.defs.temporal.checks import temporal_freshness_checks

    job = define_asset_job("freshness", selection=AssetSelection.checks(*temporal_freshness_checks))
    merged = Definitions.merge(defs, Definitions(jobs=[job]))

    def evaluate(at) -> dict:
        with freeze_time(at):
            result = merged.resolve_job_def("freshness").execute_in_process(instance=instance, raise_on_error=False)
        events = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        return {e.event_specific_data.asset_key.path[-1]: e.event_specific_data.passed for e in events}

    key = assets.temporal_day_summaries.key
    assert evaluate(cst(2026, 1, 15, 3, 0))["temporal_day_summaries"] is False  # 2026-01-14 missing at 03:00
    instance.report_runless_asset_event(AssetMaterialization(key, partition="2026-01-14"))
    assert evaluate(cst(2026, 1, 15, 3, 0))["temporal_day_summaries"] is True
    assert evaluate(cst(2026, 1, 16, 3, 0))["temporal_day_summaries"] is False  # the next night was missed


def test_a_late_file_appends_chunks_and_a_busy_day_is_covered_with_true_metadata(defs, instance, store, ingest):
    from memory_pipeline.temporal.tables import temporal_day_chunks
    from memory_pipeline_tests.conftest import event
    from memory_pipeline_tests.integration.test_temporal_summaries import _busy_day

    ingest(
        conversation("w1", "a", cst(2026, 1, 2, 9, 5), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "a", cst(2026, 1, 2, 11, 0), ["after the tick", "not yet closed then"])
    )
    as_of = "2026-01-02T02:00:00Z"  # 10:00 CST

    def tick():
        report = operations.materialize("chunks", "2026-01-02", "2026-01-02", as_of=as_of, instance=instance, defs=defs)
        assert report.success and all(_check_results(instance, report.runs[0].run_id))
        return _materializations(instance, assets.temporal_day_chunks)["2026-01-02"]

    first = tick()
    assert (first["chunks_written"], first["late_messages"], first["tick_now"]) == (1, 0, "2026-01-02T10:00:00+08:00")
    # the operator's times: whole seconds in the configured zone, whatever zone they came in
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00", first["read_at"]), first["read_at"]
    # A second file brings a message for the 09:00 bucket, chunked already, and one at 09:40.
    ingest(
        [
            event("w1", "a", "user", "compost turned late", cst(2026, 1, 2, 9, 20)),
            event("w1", "a", "assistant", "compost warm", cst(2026, 1, 2, 9, 40)),
        ]
    )
    second = tick()
    assert (second["chunks_written"], second["late_messages"]) == (2, 1)
    assert tick()["chunks_written"] == 0
    with store.connect() as conn:
        seqs = sorted(conn.execute(select(temporal_day_chunks.c.seq)).scalars())
    assert seqs == [0, 0, 1]

    _busy_day(ingest)
    report = operations.materialize("day", "2026-07-18", "2026-07-18", instance=instance, defs=defs)
    assert report.success and all(_check_results(instance, report.runs[0].run_id))
    day = _materializations(instance, assets.temporal_day_summaries)["2026-07-18"]
    assert (day["worlds_over_budget"], day["partial_summaries"], day["llm_calls"]) == (1, 42, 43)
    assert day["rows_written"] == 1


@pytest.mark.parametrize(
    "job, asset, config, message",
    [
        ("temporal_tick_job", "temporal_day_chunks", {"as_of": "notadate"}, "run config: --as-of 'notadate' is not"),
        ("temporal_tick_job", "temporal_day_chunks", {"as_of": "2026-01-02T10:00"}, "has no time zone offset"),
        ("temporal_day_job", "temporal_day_summaries", {"worlds": ["w:1"]}, "run config: --world 'w:1': character"),
    ],
)
def test_a_run_launched_with_bad_config_fails_with_the_reason_first(defs, instance, job, asset, config, message):
    """What the launchpad sends: no traceback as the cause, the reason in the failure's first line."""
    result = defs.resolve_job_def(job).execute_in_process(
        instance=instance,
        partition_key="2026-01-01",
        run_config={"ops": {asset: {"config": config}}},
        asset_selection=[AssetKey(asset)],
        raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    first_line = failure.event_specific_data.error.message.strip().splitlines()[0]
    assert message in first_line


def test_a_day_row_from_an_answer_the_provider_cut_is_reported_and_asked_again(
    pg_url, redis_url, instance, store, new_year
):
    """The provider stops w1's day answer at its output limit (finish_reason length). The row is
    written with the text as cut (seed 000 has no status for it: empty_reason stays for
    placeholders), but the partition's metadata counts it and names the world, the run's log warns,
    and the row is not vouched for: the next run asks the model again for w1 (only), and a whole
    answer then replaces it."""
    day = date(2025, 12, 31)

    def row(world):
        with store.connect() as conn:
            t = temporal_summaries.c
            q = select(t.content, t.material_fp).where(t.window == "day", t.period_start == day, t.world_id == world)
            return conn.execute(q).one()

    with FakeOpenAI() as server:
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k")
        server.push("length", "Compost turned and")  # w1's call comes first (worlds in id order)
        first = operations.materialize("day", "2025-12-31", "2025-12-31", instance=instance, defs=defs)
        assert first.success and len(server.requests) == 2
        meta = _materializations(instance, assets.temporal_day_summaries)["2025-12-31"]
        assert meta["llm_truncated_answers"] == 1 and meta["worlds_truncated"] == ["w1"]
        warnings = [
            e.user_message
            for e in instance.all_logs(first.runs[0].run_id)
            if e.level == logging.WARNING and "cut at the output limit" in e.user_message
        ]
        assert warnings and any("2025-12-31" in w and "w1" in w for w in warnings), warnings
        assert row("w1") == ("Compost turned and", None)  # written as cut, never reused as whole
        assert row("w2")[1] is not None

        again = operations.materialize("day", "2025-12-31", "2025-12-31", instance=instance, defs=defs)
        assert again.success and len(server.requests) == 3  # w1 asked again, w2's row reused
        content, fp = row("w1")
        assert content == server.default_text and fp is not None
        meta = _materializations(instance, assets.temporal_day_summaries)["2025-12-31"]
        assert meta["llm_truncated_answers"] == 0 and meta["worlds_truncated"] == []
