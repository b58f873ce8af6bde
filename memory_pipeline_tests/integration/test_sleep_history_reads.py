"""Sleep's per-place reads of its own history (on the real PostgreSQL): the day order's check and deep
sleep's previous fingerprint read only what they need, with the same answers as reading the whole
history, and a range run of the nights job writes the same rows as one run per day."""

from datetime import date, timedelta

import pytest
from dagster import instance_for_test
from sqlalchemy import delete, select

from memory_pipeline import operations
from memory_pipeline.sleep.deep import _last_outputs
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.order import DAY_ROW, STAGES, Position, RunStatus, order_problem
from memory_pipeline.sleep.runs import day_statuses, place_statuses
from memory_pipeline.sleep.tables import (
    autobiographical_memories,
    self_blocks,
    semantic_memories,
    semantic_memory_snapshots,
    semantic_memory_versions,
    sleep_runs,
)
from memory_pipeline_tests.conftest import conversation, cst
from memory_pipeline_tests.integration.test_dagster import make_defs

D0 = date(2026, 3, 2)


def _row(stage: Stage, day: date, world: str, status: RunStatus, output_fp: str | None = None) -> dict:
    return {
        "stage": str(stage),
        "day": day,
        "world_id": world,
        "status": str(status),
        "model": "m",
        "prompt_version": "p",
        "detail": {"output_fp": output_fp} if output_fp else {},
    }


def _history() -> list[dict]:
    """Day records with a gap, a stale, a partial and a failed place, and world records of a world
    filter's run (world a settled where the day record is partial)."""
    rows = []
    for offset in (2, 3, 4, 7, 8):
        for stage in STAGES:
            rows.append(_row(stage, D0 + timedelta(days=offset), DAY_ROW, RunStatus.DONE))
    rows += [
        _row(Stage.LIGHT, D0 + timedelta(days=9), DAY_ROW, RunStatus.STALE),
        _row(Stage.LIGHT, D0 + timedelta(days=10), DAY_ROW, RunStatus.PARTIAL),
        _row(Stage.LIGHT, D0 + timedelta(days=10), "a", RunStatus.DONE),
        _row(Stage.DEEP, D0 + timedelta(days=10), "a", RunStatus.REFUSED),
        _row(Stage.AUTOBIOGRAPHY, D0 + timedelta(days=11), DAY_ROW, RunStatus.FAILED),
    ]
    return rows


@pytest.mark.parametrize("worlds", [None, ["a"], ["a", "b"]])
def test_the_day_order_check_reads_the_place_before_and_gives_the_whole_historys_answer(store, worlds):
    with store.begin() as conn:
        conn.execute(sleep_runs.insert(), _history())
    places = [Position.of(D0 + timedelta(days=d), s) for d in range(14) for s in STAGES]
    with store.connect() as conn:
        whole = day_statuses(conn, worlds=worlds)
        answers = {p: order_problem(p, place_statuses(conn, p, worlds)) for p in places}
    assert answers == {p: order_problem(p, whole) for p in places}
    assert answers[Position.of(D0, Stage.LIGHT)] is None  # nothing recorded before it: a first place
    assert "has not run" in answers[Position.of(D0 + timedelta(days=6), Stage.LIGHT)]  # after the gap
    assert (answers[Position.of(D0 + timedelta(days=10), Stage.DEEP)] is None) == (worlds == ["a"])


def test_a_world_filters_earlier_places_count_when_no_day_record_is_before(store):
    """Only world records before the place: a place was recorded before it for that filter."""
    with store.begin() as conn:
        conn.execute(sleep_runs.insert(), [_row(Stage.LIGHT, D0, "a", RunStatus.DONE)])
    later = Position.of(D0 + timedelta(days=5), Stage.LIGHT)
    with store.connect() as conn:
        for worlds in (None, ["a"], ["a", "b"]):
            got = order_problem(later, place_statuses(conn, later, worlds))
            assert got == order_problem(later, day_statuses(conn, worlds=worlds))
        assert order_problem(later, place_statuses(conn, later, ["a"])) is not None  # D0's autobiography is missing


def test_deep_sleeps_previous_fingerprint_is_each_worlds_newest_earlier_record(store):
    rows = [
        _row(Stage.DEEP, D0, "a", RunStatus.DONE, "a0"),
        _row(Stage.DEEP, D0 + timedelta(days=3), "a", RunStatus.STALE, "a3"),
        _row(Stage.DEEP, D0 + timedelta(days=5), "a", RunStatus.DONE, "a5"),
        _row(Stage.DEEP, D0 + timedelta(days=1), "b", RunStatus.DONE),  # no fingerprint: None
        _row(Stage.DEEP, D0 + timedelta(days=2), "c", RunStatus.DONE, "c2"),
        _row(Stage.DEEP, D0 + timedelta(days=4), DAY_ROW, RunStatus.DONE, "day"),
        _row(Stage.LIGHT, D0 + timedelta(days=4), "c", RunStatus.DONE, "light"),
    ]
    with store.begin() as conn:
        conn.execute(sleep_runs.insert(), rows)
    with store.connect() as conn:
        assert _last_outputs(conn, D0) == {}
        assert _last_outputs(conn, D0 + timedelta(days=4)) == {"a": "a3", "b": None, "c": "c2"}
        assert _last_outputs(conn, D0 + timedelta(days=9)) == {"a": "a5", "b": None, "c": "c2"}


SLEEP_TABLES = (
    semantic_memories,
    semantic_memory_versions,
    semantic_memory_snapshots,
    autobiographical_memories,
    self_blocks,
    sleep_runs,
)
VOLATILE = {"created_at", "updated_at", "finished_at", "at", "version_id"}  # times and serial ids


def _rows(store) -> dict[str, list[tuple]]:
    out = {}
    with store.connect() as conn:
        for table in SLEEP_TABLES:
            cols = [c for c in table.c if c.name not in VOLATILE]
            out[table.name] = sorted(tuple(repr(v) for v in row) for row in conn.execute(select(*cols)).all())
    return out


def test_a_range_run_of_sleep_nights_writes_the_same_rows_as_one_run_per_day(pg_url, redis_url, store, ingest):
    ingest(
        conversation("w1", "s-1", cst(2026, 3, 2, 9), ["我喜欢吃辣", "好", "garden tomatoes tomatoes", "ok"])
        + conversation("w1", "s-2", cst(2026, 3, 4, 9), ["我不喜欢吃辣", "嗯", "garden tomatoes tomatoes", "ok"])
        + conversation("w2", "s-3", cst(2026, 3, 4, 20), ["marathon marathon pacing", "ok"])
    )
    defs = make_defs(pg_url, redis_url)
    first, last = "2026-03-02", "2026-03-05"  # an empty day between, and one after
    runs = {}
    for per_day in (False, True):
        with store.begin() as conn:
            for table in SLEEP_TABLES:
                conn.execute(delete(table))
        with instance_for_test() as instance:
            rep = operations.materialize("sleep", first, last, instance=instance, defs=defs, per_partition=per_day)
        assert rep.success, [r.error for r in rep.runs]
        assert len(rep.runs) == (4 if per_day else 1)
        runs[per_day] = _rows(store)
    assert runs[False]["semantic_memory_snapshots"] and runs[False]["autobiographical_memories"] is not None
    assert runs[False] == runs[True]
