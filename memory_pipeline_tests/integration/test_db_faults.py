"""A dropped PostgreSQL connection mid-range: the partition's unit of work is redone whole (same
rows as a run without the fault, no duplicate); a database that stays unreachable fails the run
with the partition and the cause in the first line, and a re-run reuses the finished partitions'
rows without model calls.

The connections are dropped for real: ``pg_terminate_backend`` on this test's own backends (found
by the application_name its URL sets), from an engine event hook just before a chosen statement."""

from __future__ import annotations

import re
import uuid
from datetime import date

import pytest
from dagster import instance_for_test
from sqlalchemy import create_engine, event, func, select, text

from memory_pipeline import operations
from memory_pipeline.defs.temporal import assets
from memory_pipeline.lib.store import Store, make_engine, retry
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.temporal import summaries
from memory_pipeline.temporal.tables import temporal_day_chunks, temporal_period_runs, temporal_summaries
from memory_pipeline_tests.conftest import CST, PG_URL, conversation, cst
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_dagster import make_defs

DAYS = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05"]


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(retry, "BACKOFF_SECONDS", 0.05)


@pytest.fixture
def app_url(pg_url):
    """The test schema's URL with an application_name of its own: its backends, and only they,
    are the ones terminated."""
    name = f"faults_{uuid.uuid4().hex[:10]}"
    url = f"{pg_url}&application_name={name}"
    yield url, name
    make_engine(url).dispose()


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def five_days(ingest):
    events = []
    for i, day in enumerate(DAYS):
        d = date.fromisoformat(day)
        events += conversation("w1", f"a{i}", cst(d.year, d.month, d.day, 9), [f"garden {day} seedlings", "watered"])
        events += conversation("w2", f"b{i}", cst(d.year, d.month, d.day, 21), [f"marathon {day} intervals", "done"])
    ingest(events)


class Dropper:
    """Terminates every backend of ``app`` just before the matching statement runs on one of them:
    the ``nth`` match only, or (``every_from``) that match and every later one."""

    def __init__(self, url: str, app: str, needle: str, nth: int = 1, every_from: bool = False):
        self.engine, self.app, self.needle = make_engine(url), app, needle
        self.nth, self.every_from = nth, every_from
        self.seen = self.dropped = 0
        self.admin = create_engine(PG_URL, poolclass=None)
        event.listen(self.engine, "before_cursor_execute", self._hook)

    def _hook(self, conn, cursor, statement, parameters, context, executemany):
        if self.needle not in statement:
            return
        self.seen += 1
        if self.seen == self.nth or (self.every_from and self.seen > self.nth):
            with self.admin.begin() as admin:
                n = admin.execute(
                    text(
                        "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
                        "WHERE application_name = :app AND pid <> pg_backend_pid()"
                    ),
                    {"app": self.app},
                ).scalar_one()
            assert n >= 1  # at least the connection about to run the statement
            self.dropped += 1

    def remove(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._hook)
        self.admin.dispose()


ROW_FIELDS = ("world_id", "window", "period_start", "content", "empty_reason", "source_count", "source_ids")


def _rows(store) -> list[tuple]:
    t = temporal_summaries.c
    with store.connect() as conn:
        rows = conn.execute(select(*(t[f] for f in ROW_FIELDS)).order_by(t.world_id, t.window, t.period_start))
        return [tuple(r) for r in rows]


def _ledger_partitions(store, since: int) -> dict[str, int]:
    c = llm_ledger.c
    with store.connect() as conn:
        q = select(c.partition, func.count()).where(c.call_id > since).group_by(c.partition)
        return dict(conn.execute(q).all())


def _metadata(instance, asset) -> dict:
    records = instance.fetch_materializations(asset.key, limit=100).records
    return {r.asset_materialization.partition: r.asset_materialization.metadata for r in records}


def _last_call(store) -> int:
    with store.connect() as conn:
        return conn.execute(select(func.coalesce(func.max(llm_ledger.c.call_id), 0))).scalar_one()


@pytest.fixture
def batches_of_two(monkeypatch):
    """Set-based batches of two day partitions (01-01..02, 01-03..04, 01-05): each one read and one
    write transaction."""
    monkeypatch.setitem(summaries.BATCH, "day", 2)


def test_a_dropped_connection_mid_range_is_retried_with_identical_rows(
    app_url, redis_url, instance, five_days, batches_of_two
):
    url, app = app_url
    store = Store(url)
    defs = make_defs(url, redis_url)
    # Inside the second batch's write transaction (2026-01-03 and 01-04), after its rows were
    # upserted: that transaction is rolled back whole and the batch redone.
    dropper = Dropper(url, app, "INSERT INTO temporal_period_runs", nth=2)
    try:
        report = operations.materialize("day", DAYS[0], DAYS[-1], instance=instance, defs=defs)
    finally:
        dropper.remove()
    assert dropper.dropped == 1
    assert report.success, report.runs[0].error
    faulted = _rows(store)
    assert len(faulted) == 10 and len(set((r[0], r[2]) for r in faulted)) == 10  # no duplicate
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(temporal_period_runs)).scalar_one() == 5
    for day in DAYS:
        assert summaries.audit_period(store, "day", date.fromisoformat(day), CST) == []
    meta = _metadata(instance, assets.temporal_day_summaries)
    assert meta["2026-01-03"]["db_retries"].value == 1 and meta["2026-01-02"]["db_retries"].value == 0
    assert meta["2026-01-04"]["db_retries"].value == 1 and meta["2026-01-05"]["db_retries"].value == 0
    assert meta["2026-01-03"]["rows_written"].value == 2  # the rolled-back attempt wrote nothing
    # Every call has its ledger row once: the rolled-back attempt's model calls are written with
    # the retry's transaction (which got their answers from the client, as cache hits).
    c = llm_ledger.c
    with store.connect() as conn:
        ok = conn.execute(select(c.partition, func.count()).where(c.outcome == "ok").group_by(c.partition)).all()
        hits = conn.execute(select(c.partition, func.count()).where(c.outcome == "cache_hit").group_by(c.partition))
        hits = dict(hits.all())
    assert dict(ok) == {day: 2 for day in DAYS}
    assert hits == {"2026-01-03": 2, "2026-01-04": 2}

    # The same range without the fault, from scratch: the same rows.
    with store.begin() as conn:
        conn.execute(temporal_summaries.delete())
        conn.execute(temporal_period_runs.delete())
    assert operations.materialize("day", DAYS[0], DAYS[-1], instance=instance, defs=defs).success
    assert _rows(store) == faulted


def test_a_dropped_connection_during_the_chunk_tick_is_retried(app_url, redis_url, instance, five_days):
    url, app = app_url
    store = Store(url)
    defs = make_defs(url, redis_url)
    dropper = Dropper(url, app, "INSERT INTO temporal_day_chunks", nth=4)
    try:
        report = operations.materialize(
            "chunks", DAYS[0], DAYS[-1], as_of="2026-01-06T08:00:00+08:00", instance=instance, defs=defs
        )
    finally:
        dropper.remove()
    assert dropper.dropped == 1 and report.success, report.runs[0].error
    with store.connect() as conn:
        rows = conn.execute(
            select(temporal_day_chunks.c.conversation_id, temporal_day_chunks.c.bucket, temporal_day_chunks.c.seq)
        ).all()
    assert len(rows) == 10 and len(set(rows)) == 10  # one chunk per conversation, none twice
    written = _metadata(instance, assets.temporal_day_chunks)
    assert sum(m["chunks_written"].value for m in written.values()) == 10  # true counts across the retry
    assert sum(m["db_retries"].value for m in written.values()) == 1


def test_a_database_that_stays_down_names_the_partition_first_and_a_rerun_does_the_rest(
    app_url, redis_url, instance, five_days, batches_of_two
):
    url, app = app_url
    store = Store(url)
    defs = make_defs(url, redis_url)
    # From the second batch's write on (2026-01-03 and 01-04 in one transaction), every write
    # loses its connection.
    dropper = Dropper(url, app, "INSERT INTO temporal_summaries", nth=2, every_from=True)
    try:
        report = operations.materialize("day", DAYS[0], DAYS[-1], instance=instance, defs=defs)
    finally:
        dropper.remove()
    assert not report.success
    first_line = report.runs[0].error.splitlines()[0]
    assert re.search(
        r"day 2026-01-03: database error after 3 attempts: (OperationalError|AdminShutdown): \S", first_line
    ), first_line
    assert "2 of 5 day partition(s) finished before it" in report.runs[0].error
    assert "batch 2026-01-03..2026-01-04 (2 partitions) is one transaction" in report.runs[0].error
    assert dropper.dropped == 3  # three attempts, then the run stopped: 01-04 and 01-05 never started
    with store.connect() as conn:
        periods = sorted({r[0] for r in conn.execute(select(temporal_summaries.c.period_start))})
    assert periods == [date(2026, 1, 1), date(2026, 1, 2)]
    # The first batch's days are materialized by the failed run, with their metadata; the others not.
    (run,) = report.runs
    records = instance.fetch_materializations(assets.temporal_day_summaries.key, limit=100).records
    assert sorted(r.asset_materialization.partition for r in records) == DAYS[:2]
    assert {r.run_id for r in records} == {run.run_id}
    meta = _metadata(instance, assets.temporal_day_summaries)
    assert meta[DAYS[0]]["rows_written"].value == 2 and meta[DAYS[1]]["rows_written"].value == 2
    assert operations.materialized(instance, "day") == set(DAYS[:2])

    # The re-run of the same range: the finished partitions cost no model call (not even a
    # cache lookup: their rows are reused), the others are done.
    before = _last_call(store)
    rerun = operations.materialize("day", DAYS[0], DAYS[-1], instance=instance, defs=defs)
    assert rerun.success, rerun.runs[0].error
    calls = _ledger_partitions(store, before)
    assert "2026-01-01" not in calls and "2026-01-02" not in calls
    assert calls == {"2026-01-03": 2, "2026-01-04": 2, "2026-01-05": 2}
    assert len(_rows(store)) == 10


def test_a_store_that_cannot_record_a_paid_answer_stops_the_provider_calls_and_nothing_is_paid_twice(
    app_url, redis_url, instance, five_days
):
    """From the 4th paid answer on, every ledger write loses its connection (the store is down for
    the run): the client retries that write, then makes no further provider request (the run stops
    in one line) instead of paying answers that would be lost with the batch's transaction. The
    re-run pays only what was never answered: provider requests in all == calls needed."""
    url, app = app_url
    store = Store(url)
    with FakeOpenAI() as server:
        defs = make_defs(url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k")
        dropper = Dropper(url, app, "INSERT INTO llm_ledger", nth=4, every_from=True)
        try:
            down = operations.materialize("day", DAYS[0], DAYS[-1], instance=instance, defs=defs)
        finally:
            dropper.remove()
        assert not down.success
        first_line = down.runs[0].error.splitlines()[0]
        assert "LLM ledger" in first_line and "database error after" in first_line, first_line
        assert len(server.requests) == 4  # no request after the store could not record an answer
        rerun = operations.materialize("day", DAYS[0], DAYS[-1], instance=instance, defs=defs)
        assert rerun.success, rerun.runs[0].error
        assert len(_rows(store)) == 10
        assert len(server.requests) == 10  # every (day, world) once: the 4th answer was kept (its cache row)
    with store.connect() as conn:
        outcomes = dict(conn.execute(select(llm_ledger.c.outcome, func.count()).group_by(llm_ledger.c.outcome)).all())
    assert outcomes["ok"] >= 9 and outcomes["ok"] + outcomes.get("cache_hit", 0) >= 10, outcomes
