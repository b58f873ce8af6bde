"""Set-based range runs and incremental operations (issue 7), on the real PostgreSQL and Redis:
a range run in batches writes exactly the rows and ledger rows that one run per partition writes;
an unchanged range is skipped from its record (asset metadata) or not launched at all (mode
"changed"); one message appended to a past day re-runs that day, its month, its year and the
system rolls, and nothing else."""

from __future__ import annotations

from collections import Counter
from datetime import date, timedelta

import pytest
from dagster import instance_for_test
from sqlalchemy import func, select

from memory_pipeline import operations
from memory_pipeline.definitions import build_defs
from memory_pipeline.defs.temporal import assets
from memory_pipeline.lib.store import leases
from memory_pipeline.lib.store.tables import llm_cache, llm_ledger
from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource
from memory_pipeline.temporal import summaries
from memory_pipeline.temporal.reconcile import stale_periods
from memory_pipeline.temporal.tables import temporal_period_runs, temporal_summaries
from memory_pipeline_tests.conftest import CST, conversation, cst, event

FIRST, LAST = "2025-11-27", "2025-12-31"  # 35 days: two set-based batches (31 + 4)
RANGES = (("day", FIRST, LAST), ("month", "2025-11", "2025-12"), ("year", "2025", "2025"))
LONG = "the greenhouse vents need a new motor and the seed trays must move before the frost " * 3


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


def _defs(pg_url, redis_url, config_file: str = ""):
    return build_defs(
        {
            "memory_store": MemoryStoreResource(database_url=pg_url),
            "kv_cache": CacheResource(redis_url=redis_url),
            "llm": LLMResource(),
            "memory_config": MemoryConfigResource(config_file=config_file),
        }
    )


@pytest.fixture
def season(ingest):
    """w1 talks most days (a busy day on 12-05: its material exceeds a small budget), w2 every third
    day, w3 appears on 11-29 and only runs tools on 12-02; debug talk never counts."""
    events = []
    day = date(2025, 11, 27)
    while day <= date(2025, 12, 31):
        y, m, d = day.year, day.month, day.day
        if day.day % 7 != 3:
            events += conversation("w1", f"g{day:%m%d}", cst(y, m, d, 9), [f"garden {day} seedlings", "watered beds"])
        if day.toordinal() % 3 == 0:
            events += conversation("w2", f"r{day:%m%d}", cst(y, m, d, 20), [f"marathon {day} pacing", "intervals done"])
        day += timedelta(days=1)
    for i in range(4):  # the busy day
        events += conversation("w1", f"busy{i}", cst(2025, 12, 5, 10 + i), [f"{LONG} part {i}", f"{LONG} reply {i}"])
    events += conversation("w3", "v1", cst(2025, 11, 29, 18), ["violin scales", "violin etudes"])
    events += [event("w3", "t1", "tool", "tuner: 442 Hz", cst(2025, 12, 2, 8))]
    events += conversation("w3", "dbg", cst(2025, 12, 3, 8), ["debug dump", "ok"], debug=True)
    ingest(events)


def _snapshot(store) -> list[tuple]:
    """Every summary row, child sources named by (world, window, period) (ids differ between stores)."""
    t = temporal_summaries.c
    with store.connect() as conn:
        rows = conn.execute(select(temporal_summaries).order_by(t.window, t.period_start, t.world_id)).mappings().all()
    name = {r["summary_id"]: (r["world_id"], r["window"], str(r["period_start"])) for r in rows}
    out = []
    for r in rows:
        sources = r["source_ids"] if r["source_kind"] == "message" else [name[i] for i in r["source_ids"]]
        out.append(
            (
                r["world_id"],
                r["window"],
                r["period_start"],
                r["content"],
                r["empty_reason"],
                r["source_count"],
                r["source_kind"],
                sources,
                # A month's / year's fingerprint covers its children's ids, which differ between stores.
                r["material_fp"] if r["source_kind"] == "message" else None,
                r["model"],
            )
        )
    return out


def _ledger(store) -> Counter:
    c = llm_ledger.c
    with store.connect() as conn:
        rows = conn.execute(select(c.asset, c.partition, c.task, c.world_id, c.outcome, c.model)).all()
    return Counter(tuple(r) for r in rows)


def _run_all(instance, defs, **kw) -> None:
    for window, lo, hi in RANGES:
        report = operations.materialize(window, lo, hi, instance=instance, defs=defs, **kw)
        assert report.success, report.runs[0].error


def test_a_range_run_writes_the_rows_and_ledger_rows_of_one_run_per_partition(
    pg_url, redis_url, store, instance, season, tmp_path
):
    config = tmp_path / "memory.yaml"
    config.write_text("memory:\n  temporal_summary:\n    day_material_max_chars: 600\n")
    defs = _defs(pg_url, redis_url, str(config))
    _run_all(instance, defs, per_partition=True)
    per_partition, per_partition_ledger = _snapshot(store), _ledger(store)
    assert any(task == "day_reduce" for _a, _p, task, *_ in per_partition_ledger)  # the busy day took partials

    with store.begin() as conn:  # the same work from scratch, as range runs (set-based batches)
        for table in (temporal_summaries, temporal_period_runs, llm_cache, llm_ledger):
            conn.execute(table.delete())
    with instance_for_test() as fresh:
        _run_all(fresh, defs)
        runs = fresh.get_runs()
        meta = {
            r.asset_materialization.partition: r.asset_materialization.metadata
            for r in fresh.fetch_materializations(assets.temporal_day_summaries.key, limit=100).records
        }
    assert len(runs) == 3  # one run per window
    assert _snapshot(store) == per_partition
    assert _ledger(store) == per_partition_ledger  # one ledger row per call, each naming its partition
    assert len(meta) == 35
    with store.connect() as conn:
        c = llm_ledger.c
        day_calls = dict(
            conn.execute(
                select(c.partition, func.count())
                .where(c.asset == "temporal_day_summaries", c.outcome == "ok")
                .group_by(c.partition)
            ).all()
        )
        written = Counter(
            str(p)
            for (p,) in conn.execute(
                select(temporal_summaries.c.period_start).where(temporal_summaries.c.window == "day")
            )
        )
    for key, m in meta.items():
        assert m["llm_calls"].value == day_calls.get(key, 0)
        assert m["rows_written"].value == written[key]  # rows actually written, per partition
        assert m["skipped_unchanged"].value is False
    assert meta["2025-12-05"]["worlds_over_budget"].value == 1


def test_a_range_run_emits_per_partition_only_its_planned_event_materialization_and_check_result(
    pg_url, redis_url, store, instance, season
):
    """What a range run costs Dagster per partition, as the benchmark's no-op emits it: one planned
    event, one materialization and one check result, each naming its partition; everything else
    (one log line of totals included) once per run, never per partition."""
    report = operations.materialize("day", FIRST, LAST, instance=instance, defs=_defs(pg_url, redis_url))
    assert report.success
    (run,) = report.runs
    logs = instance.all_logs(run.run_id)
    counts = Counter(e.dagster_event.event_type_value if e.dagster_event else "LOG_MESSAGE" for e in logs)
    keys = operations.partition_keys("day", FIRST, LAST)[0]
    assert len(keys) == 35
    for kind in ("ASSET_MATERIALIZATION_PLANNED", "ASSET_MATERIALIZATION", "ASSET_CHECK_EVALUATION"):
        assert counts.pop(kind) == 35, kind
    assert counts == {
        "ASSET_CHECK_EVALUATION_PLANNED": 1,
        "ENGINE_EVENT": 2,
        "LOGS_CAPTURED": 1,
        "LOG_MESSAGE": 1,
        "PIPELINE_START": 1,
        "PIPELINE_SUCCESS": 1,
        "RESOURCE_INIT_STARTED": 1,
        "RESOURCE_INIT_SUCCESS": 1,
        "STEP_OUTPUT": 2,
        "STEP_START": 2,
        "STEP_SUCCESS": 2,
    }
    events = [e.dagster_event for e in logs if e.dagster_event]
    materialized = sorted(e.event_specific_data.materialization.partition for e in events if e.is_step_materialization)
    checked = sorted(e.event_specific_data.partition for e in events if e.event_type_value == "ASSET_CHECK_EVALUATION")
    assert materialized == checked == keys
    (line,) = [e.user_message for e in logs if not e.dagster_event]
    assert line.startswith("day: {") and "'rows_written': " in line


def test_an_unchanged_range_is_skipped_from_its_record_and_changed_mode_launches_nothing(
    pg_url, redis_url, store, instance, season
):
    defs = _defs(pg_url, redis_url)
    _run_all(instance, defs)
    rows, ledger = _snapshot(store), _ledger(store)

    for window, lo, hi in RANGES:
        report = operations.materialize(window, lo, hi, mode="changed", instance=instance, defs=defs)
        assert (report.requested, report.runs, report.reasons) == (0, [], {})
        assert report.skipped_existing > 0

    # A forced-free rebuild re-runs every partition, but reads nothing: the records say unchanged.
    report = operations.materialize("day", FIRST, LAST, instance=instance, defs=defs)
    assert report.success and report.partitions == 35
    latest = instance.fetch_materializations(assets.temporal_day_summaries.key, limit=35).records
    assert len(latest) == 35
    for r in latest:
        m = r.asset_materialization.metadata
        assert m["skipped_unchanged"].value is True
        assert m["skip_reason"].value.startswith("unchanged since ")
        assert (m["rows_written"].value, m["llm_calls"].value, m["llm_cache_hits"].value) == (0, 0, 0)
    assert _snapshot(store) == rows and _ledger(store) == ledger  # no row written, no ledger row

    # force_llm reads and asks afresh.
    forced = operations.materialize("day", "2025-12-01", "2025-12-01", force_llm=True, instance=instance, defs=defs)
    assert forced.success
    m = instance.fetch_materializations(assets.temporal_day_summaries.key, limit=1).records[0].asset_materialization
    assert m.metadata["skipped_unchanged"].value is False and m.metadata["llm_calls"].value == 1  # w1 alone talked


def test_one_appended_message_repairs_its_day_month_year_and_the_rolls_only(
    pg_url, redis_url, store, instance, season, ingest
):
    defs = _defs(pg_url, redis_url)
    _run_all(instance, defs)
    before = _ledger(store)
    ingest([event("w2", "late", "user", "zucchini zucchini harvest", cst(2025, 12, 10, 7), mid="late-1")])
    assert stale_periods(store, CST).days == [date(2025, 12, 10)]

    changed = operations.materialize("day", FIRST, LAST, mode="changed", instance=instance, defs=defs)
    assert changed.requested == 1 and "ingested after the day was materialized" in changed.reasons["2025-12-10"]
    # (the day run above already repaired the day; the repair does the month, year and rolls)

    report = operations.repair(instance=instance, defs=defs)
    assert report.success
    assert [(r.window, r.first, r.last) for r in report.runs] == [
        ("month", "2025-12", "2025-12"),
        ("year", "2025", "2025"),
    ]
    assert report.partitions == 2 and report.system_rolls is not None and report.system_rolls.success
    assert report.left == 0 and not stale_periods(store, CST)
    new = _ledger(store) - before
    summary_calls = {k: n for k, n in new.items() if k[0] != "temporal_system_rolls"}
    assert summary_calls == {
        ("temporal_day_summaries", "2025-12-10", "day", "w2", "ok", "offline/deterministic-extractive-v8"): 1,
        ("temporal_month_summaries", "2025-12", "month", "w2", "ok", "offline/deterministic-extractive-v8"): 1,
        ("temporal_year_summaries", "2025", "year", "w2", "ok", "offline/deterministic-extractive-v8"): 1,
    }
    for window, lo, hi in RANGES:  # and now nothing is left to do
        assert operations.materialize(window, lo, hi, mode="changed", instance=instance, defs=defs).requested == 0


def test_repair_reruns_exactly_day_month_and_year(pg_url, redis_url, store, instance, season, ingest):
    defs = _defs(pg_url, redis_url)
    _run_all(instance, defs)
    ingest([event("w1", "late2", "assistant", "violin tuning", cst(2025, 11, 28, 23, 59), mid="late-2")])
    report = operations.repair(instance=instance, defs=defs)
    assert report.success
    assert [(r.window, r.first, r.last) for r in report.runs] == [
        ("day", "2025-11-28", "2025-11-28"),
        ("month", "2025-11", "2025-11"),
        ("year", "2025", "2025"),
    ]
    assert report.partitions == 3 and report.system_rolls is not None
    w1_day = [r for r in _snapshot(store) if r[:3] == ("w1", "day", date(2025, 11, 28))][0]
    assert "late-2" in w1_day[7]
    assert summaries.audit_period(store, "day", date(2025, 11, 28), CST) == []


def test_leases_of_a_batch_are_taken_renewed_and_released_at_once(store):
    asset, keys = "temporal_day_summaries", ["2025-12-01", "2025-12-02", "2025-12-03"]
    assert leases.try_acquire(store, asset, keys[1], "other-run") is None
    with leases.held_free(store, asset, keys, "this-run", renew_every=0.05) as got:
        assert got.taken == {keys[0], keys[2]}  # the one another run holds is left to wait for
        assert leases.current(store, asset, keys[0]).holder == "this-run"
        assert leases.renew_many(store, asset, keys, "this-run") == {keys[0], keys[2]}
    assert leases.current(store, asset, keys[0]) is None and leases.current(store, asset, keys[2]) is None
    assert leases.current(store, asset, keys[1]).holder == "other-run"
