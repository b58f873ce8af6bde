"""A range run's carried active sets (sleep/carry.py) on the real PostgreSQL: a world's set, kept
after its commit, is handed to the next place only when the store's active memories of that place
are exactly it (ids and versions); any write the run did not make (a memory of those days written
elsewhere, an update, the memory tool's delete, a change a stage made in memory and never wrote)
sends the world back to the store, so a stage sees what it would have read. Rows equal to one run
per day: test_sleep_history_reads.py."""

import copy
import re
from datetime import date

import pytest
from dagster import instance_for_test

from memory_pipeline import operations
from memory_pipeline.sleep import memory as mem
from memory_pipeline.sleep.carry import ActiveCarry
from memory_pipeline.sleep.logic import Change, Memory, Op, Stage
from memory_pipeline.sleep.memory import Provenance
from memory_pipeline_tests.conftest import conversation, cst
from memory_pipeline_tests.integration.test_dagster import make_defs
from memory_pipeline_tests.integration.test_sleep_day_order import D1, D2, night, two_days


def _state(memories):
    return [(m.id, m.version, m.content, list(m.source_sessions), m.observed_at, str(m.status)) for m in memories]


def _stored(store, day, world="r"):
    with store.connect() as conn:
        return mem.load_active(conn, [world], upto_day=day).get(world, []), mem.taken_ids(conn, [world]).get(world)


@pytest.fixture
def slept(store, ingest, tmp_path):
    """Day 1 slept (light, deep, autobiography), and an empty carry for the place after it."""
    two_days(ingest)
    night(store, tmp_path, D1)
    return ActiveCarry()


def _keep_stored(store, carry, day=D1):
    """The carry as a range run leaves it after ``day``: the store's set, and its ids."""
    memories, taken = _stored(store, day)
    carry.keep("r", memories, taken)
    return memories


def test_a_kept_set_is_handed_to_the_next_place_when_the_store_agrees(store, slept):
    kept = _keep_stored(store, slept)
    assert kept, "day 1's sleep left no memory: nothing to carry"
    with store.connect() as conn:
        got = slept.active(conn, ["r"], D2)
        taken = slept.taken_ids(conn, ["r"])
    assert all(a is b for a, b in zip(got["r"], kept, strict=True))  # no read
    assert (slept.hits, slept.misses) == (1, 0)
    assert _state(got["r"]) == _state(_stored(store, D2)[0])
    assert taken["r"] == _stored(store, D2)[1]
    # Handed out once: the stage changes it in place, only its commit keeps it again.
    with store.connect() as conn:
        again = slept.active(conn, ["r"], D2)
    assert (slept.hits, slept.misses) == (1, 1) and _state(again["r"]) == _state(kept)


def test_remember_today_is_not_of_the_runs_days_and_the_carry_stands(store, slept):
    kept = _keep_stored(store, slept)
    new_id = mem.remember(store, "r", "r-a", "刚刚想起来：明天要交报告")  # today's: its day comes after D2
    with store.connect() as conn:
        got = slept.active(conn, ["r"], D2)
        taken = slept.taken_ids(conn, ["r"])
    assert (slept.hits, slept.misses) == (1, 0)
    assert _state(got["r"]) == _state(kept) == _state(_stored(store, D2)[0])
    # Its id is new to the carry (the store has one row more): the ids come from the store.
    assert new_id in taken["r"] and taken["r"] == _stored(store, D2)[1]


def _written_elsewhere(store, carry, kept):
    m = Memory("f-elsewhere01", "r", "world", "我在杭州工作", ["r-a"], cst(2026, 3, 1, 10), version=1)
    with store.begin() as conn:
        mem.write_changes(conn, [Change(Op.CREATE, m)], Provenance(Stage.REMEMBER, D1))


def _updated(store, carry, kept):
    m = copy.deepcopy(kept[0])
    m.content, m.version = m.content + "（更正）", m.version + 1
    with store.begin() as conn:
        mem.write_changes(conn, [Change(Op.UPDATE, m, fields={"content": m.content})], Provenance(Stage.REMEMBER, D1))


def _deleted(store, carry, kept):
    assert mem.delete_memory(store, "r", kept[-1].id)


def _changed_in_memory_only(store, carry, kept):
    # What a stage's in-place change leaves when its world's commit never happens.
    kept[0].content, kept[0].version = "never written", kept[0].version + 1


@pytest.mark.parametrize("change", [_written_elsewhere, _updated, _deleted, _changed_in_memory_only])
def test_a_write_the_run_did_not_make_sends_the_world_back_to_the_store(store, slept, change):
    kept = _keep_stored(store, slept)
    change(store, slept, kept)
    with store.connect() as conn:
        got = slept.active(conn, ["r"], D2)
        taken = slept.taken_ids(conn, ["r"])
    assert (slept.hits, slept.misses) == (0, 1)
    memories, ids = _stored(store, D2)
    assert _state(got.get("r", [])) == _state(memories) != _state(kept)
    assert taken["r"] == ids


def test_a_range_run_takes_each_worlds_set_from_the_place_before(pg_url, redis_url, store, ingest):
    ingest(
        conversation("w1", "s-1", cst(2026, 3, 2, 9), ["我喜欢吃辣", "好", "garden tomatoes tomatoes", "ok"])
        + conversation("w1", "s-2", cst(2026, 3, 4, 9), ["我不喜欢吃辣", "嗯", "garden tomatoes tomatoes", "ok"])
    )
    with instance_for_test() as instance:
        rep = operations.materialize(
            "sleep", "2026-03-02", "2026-03-05", instance=instance, defs=make_defs(pg_url, redis_url)
        )
        assert rep.success, [r.error for r in rep.runs]
        logs = [e.message or "" for e in instance.all_logs(rep.runs[0].run_id)]
    said = [m for m in logs if "active sets taken from the previous place" in m]
    assert len(said) == 1, logs
    hits, misses = map(int, re.search(r"place (\d+) times .* store (\d+) times", said[0]).groups())
    # w1 has memories from its first light sleep on: every later place of it is carried.
    assert hits > misses >= 1, said[0]
    with store.connect() as conn:
        assert mem.load_active(conn, ["w1"], upto_day=date(2026, 3, 5))["w1"]
