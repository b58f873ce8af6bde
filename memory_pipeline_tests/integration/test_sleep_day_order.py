"""Seed 003 day order on PostgreSQL: day D's sleep outputs (its deep-sleep input set, its snapshot,
its autobiography) are a function of what existed at the end of D, whatever order or number of
times runs are launched. A re-run of a day's light sleep (late data, force_llm, another model) is a
rebuild of the day: what its deep sleep resolved never comes back beside it, the later days turn
stale and are redone in order (the late-data sensor requests that run); `remember` belongs to the
day it was written on; a stage's changes commit with its state record, so a model failure mid
tool loop leaves nothing half-written and its round log says what happened."""

import json
from datetime import date

import pytest
from dagster import AssetKey, DagsterEventType, build_sensor_context, instance_for_test
from sqlalchemy import func, select

from memory_pipeline import operations
from memory_pipeline.lib.llm import LLMClient, LLMHardFailure, LLMProviderDown, LLMRequest
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.sleep import memory as mem
from memory_pipeline.sleep.autobiography import run_autobiography
from memory_pipeline.sleep.config import SleepConfig
from memory_pipeline.sleep.context import SleepContext, StageFailure
from memory_pipeline.sleep.deep import run_deep_sleep
from memory_pipeline.sleep.light import run_light_sleep
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.rebuild import restore
from memory_pipeline.sleep.reports import stage_audit
from memory_pipeline.sleep.reports import status as sleep_status
from memory_pipeline.sleep.snapshots import diff, snapshot
from memory_pipeline.sleep.tables import self_blocks, semantic_memories, semantic_memory_versions, sleep_runs
from memory_pipeline_tests.conftest import CST, conversation, cst, event
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_dagster import make_defs

D1, D2 = date(2026, 3, 1), date(2026, 3, 2)
SPICY, NOT_SPICY = "我喜欢吃辣", "我不喜欢吃辣"
SPLIT = "我爱喝咖啡；我住在上海"


def ctx_for(store, tmp_path, llm=None, force=False):
    cfg = SleepConfig(log_dir=str(tmp_path / "logs")).validate()
    return SleepContext(store, llm or LLMClient(store, asset="sleep_test", partition="p"), cfg, CST, force=force)


def night(store, tmp_path, day, llm=None, force=False):
    ctx = ctx_for(store, tmp_path, llm, force)
    run_light_sleep(ctx, day)
    run_deep_sleep(ctx, day)
    run_autobiography(ctx, day)


def active(store, world="r"):
    with store.connect() as conn:
        return {m.content for m in mem.load_active(conn, [world]).get(world, [])}


def snap(store, day, world="r"):
    return {r["content"] for r in snapshot(store, world, day).values()}


def statuses(store, world="*"):
    with store.connect() as conn:
        rows = conn.execute(
            select(sleep_runs.c.stage, sleep_runs.c.day, sleep_runs.c.status).where(sleep_runs.c.world_id == world)
        ).all()
    return {(stage, day): status for stage, day, status in rows}


def two_days(ingest):
    """Day 1: a preference and a two-fact line (deep sleep of day 1 splits it), and something that
    happened; day 2: the preference's negation (deep sleep of day 2 deprecates the older one), and
    something else that happened."""
    ingest(
        conversation("r", "r-a", cst(2026, 3, 1, 9), [SPICY, "好", SPLIT, "我们明天去西湖划船吧"])
        + conversation("r", "r-b", cst(2026, 3, 2, 9), [NOT_SPICY, "周末我去杭州看了钢琴演出"])
    )


def test_a_late_message_rebuilds_its_day_and_never_brings_back_what_deep_sleep_resolved(store, ingest, tmp_path):
    two_days(ingest)
    for day in (D1, D2):
        night(store, tmp_path, day)
    assert NOT_SPICY in active(store) and SPICY not in active(store)  # day 2's deep sleep resolved it
    assert {"我爱喝咖啡", "我住在上海"} <= active(store) and SPLIT not in active(store)  # day 1's split it
    clean = snap(store, D1), snap(store, D2)

    ingest([event("r", "r-a", "user", "ok", cst(2026, 3, 1, 10), mid="r-late")])
    again = run_light_sleep(ctx_for(store, tmp_path), D1)  # what the late-data run does first
    live = active(store)
    assert not {SPICY, NOT_SPICY} <= live  # never both active
    assert not (SPLIT in live and {"我爱喝咖啡", "我住在上海"} & live)  # never the line beside its parts
    assert again.restored == 1 and again.stale_days == [D1, D2]
    # Day 1's deep sleep and autobiography and all of day 2 are stale, and their audits say so.
    assert statuses(store) == {
        ("light_sleep", D1): "done",
        ("deep_sleep", D1): "stale",
        ("autobiography_cron", D1): "stale",
        ("light_sleep", D2): "stale",
        ("deep_sleep", D2): "stale",
        ("autobiography_cron", D2): "stale",
    }
    assert "stale" in stage_audit(store, Stage.DEEP, D2).problems[0]
    # Redone in order, the days give what a clean run gave (the late "ok" adds no fact).
    ctx = ctx_for(store, tmp_path)
    run_deep_sleep(ctx, D1)
    run_autobiography(ctx, D1)
    night(store, tmp_path, D2)
    assert (snap(store, D1), snap(store, D2)) == clean and set(statuses(store).values()) == {"done"}
    assert NOT_SPICY in active(store) and SPICY not in active(store)


def test_a_rebuild_after_a_late_message_redo_restores_the_days_own_set_not_the_replaced_run(store, ingest, tmp_path):
    """Day 1 rebuilt for a late message, both days redone: the first run's 我喜欢吃辣, deprecated by
    the first deep sleep of day 2, was already deprecated when the rebuild of day 1 undid it. A later
    rebuild of day 2 must restore day 1's own set (the redone run's), never that first run's memory."""
    two_days(ingest)
    for day in (D1, D2):
        night(store, tmp_path, day)
    ingest([event("r", "r-a", "user", "ok", cst(2026, 3, 1, 10), mid="r-late")])
    for day in (D1, D2):
        night(store, tmp_path, day)
    clean = snap(store, D1), snap(store, D2)
    assert NOT_SPICY in clean[1] and SPICY not in clean[1]
    restore(store, D2)
    with store.connect() as conn:  # before the sleep of day 2: day 1's snapshot, memory for memory
        live = {m.id for m in mem.load_active(conn, ["r"]).get("r", [])}
    assert live == set(snapshot(store, "r", D1))
    night(store, tmp_path, D2)
    assert (snap(store, D1), snap(store, D2)) == clean
    assert NOT_SPICY in active(store) and SPICY not in active(store)


def test_a_forced_light_sleep_rerun_is_a_rebuild_of_its_day(store, ingest, tmp_path):
    two_days(ingest)
    for day in (D1, D2):
        night(store, tmp_path, day)
    forced = run_light_sleep(ctx_for(store, tmp_path, force=True), D1)
    live = active(store)
    assert not {SPICY, NOT_SPICY} <= live and not (SPLIT in live and "我住在上海" in live)
    assert statuses(store)[("deep_sleep", D2)] == "stale"
    assert forced.restored == 1 and forced.created == 3  # day 1's three facts, undone and made again


def test_the_late_data_sensor_requests_the_rebuild_of_the_day_through_the_last_done_one(
    pg_url, redis_url, store, ingest, tmp_path
):
    two_days(ingest)
    defs = make_defs(pg_url, redis_url)
    sensor = defs.get_sensor_def("sleep_late_data_sensor")
    for day in (D1, D2):
        night(store, tmp_path, day)
    with instance_for_test() as instance:

        def evaluate():
            with build_sensor_context(
                instance=instance,
                repository_def=defs.get_repository_def(),
                resources={"sleep": defs.resources["sleep"]},
            ) as ctx:
                return sensor.evaluate_tick(ctx)

        assert evaluate().run_requests == []
        ingest([event("r", "r-a", "user", "ok", cst(2026, 3, 1, 10), mid="r-late")])
        (req,) = evaluate().run_requests
        # One run: day 1 (its light sleep, then what depends on it) through day 2, in order.
        range_tags = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")
        assert req.partition_key is None and tuple(req.tags.get(t) for t in range_tags) == ("2026-03-01", "2026-03-02")
        assert req.asset_selection == [
            AssetKey(k) for k in ("sleep_light_sleep", "sleep_deep_sleep", "sleep_autobiography")
        ]
        job = defs.resolve_job_def("sleep_nights_job")
        result = job.execute_in_process(
            instance=instance, tags=req.tags, asset_selection=req.asset_selection, raise_on_error=False
        )
        assert result.success
        # What the operator sees: day 1's light sleep rebuilt the day; every place is done again.
        light = instance.fetch_materializations(AssetKey("sleep_light_sleep"), limit=10).records
        meta = {
            r.asset_materialization.partition: {k: v.value for k, v in r.asset_materialization.metadata.items()}
            for r in reversed(light)
        }
        assert meta["2026-03-01"]["worlds_restored_first"] == 1
        assert meta["2026-03-01"]["later_days_marked_stale"] == ["2026-03-01", "2026-03-02"]
        checks = instance.get_records_for_run(result.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records
        assert len(checks) == 6 and all(r.event_log_entry.dagster_event.event_specific_data.passed for r in checks)
        assert set(statuses(store).values()) == {"done"} and evaluate().run_requests == []
    assert NOT_SPICY in active(store) and SPICY not in active(store)


def test_remember_belongs_to_the_day_it_is_written_on(store, ingest, tmp_path):
    """A fact `remember`ed today is in no earlier day's set: a rebuild of an earlier day leaves it
    out of that day's snapshot (and keeps it, it is not a sleep product)."""
    two_days(ingest)
    for day in (D1, D2):
        night(store, tmp_path, day)
    mid = mem.remember(store, "r", "r-a", "user's cat is called Mimi")
    with store.connect() as conn:
        created = conn.execute(
            select(semantic_memories.c.created_day).where(semantic_memories.c.memory_id == mid)
        ).scalar_one()
    assert created == utcnow().astimezone(CST).date()
    restore(store, D2)
    night(store, tmp_path, D2, force=True)
    assert "user's cat is called Mimi" not in snap(store, D2)
    assert "user's cat is called Mimi" in active(store)


def _midnight_session(ingest):
    """One session over midnight: light sleep of day 2 adds to what day 1 made of it."""
    ingest(
        conversation("r", "r-s", cst(2026, 3, 1, 23, 50), ["garden tomatoes tomatoes", "ok"])
        + conversation("r", "r-s", cst(2026, 3, 2, 0, 10), ["marathon pacing marathon", "ok"])
    )


def test_deep_sleep_rematerialized_later_keeps_its_days_snapshot(pg_url, redis_url, store, ingest):
    _midnight_session(ingest)
    defs = make_defs(pg_url, redis_url)
    with instance_for_test() as instance:
        for day in ("2026-03-01", "2026-03-02"):
            for window in ("light_sleep", "deep_sleep", "autobiography"):
                assert operations.materialize(window, day, day, instance=instance, defs=defs).success
        day_one, day_two = snap(store, D1), snap(store, D2)
        assert day_one != day_two  # day 2's light sleep changed the session's memory
        again = operations.materialize("deep_sleep", "2026-03-01", "2026-03-01", instance=instance, defs=defs)
        assert again.success and snap(store, D1) == day_one  # reused: the day's snapshot stands
        forced = operations.materialize(
            "deep_sleep", "2026-03-01", "2026-03-01", instance=instance, defs=defs, force_llm=True
        )
        # Asked again: it works on the set as of day 1 (not the live one day 2 changed) and day 2
        # turns stale, to be redone.
        assert forced.success and snap(store, D1) == day_one
        assert statuses(store)[("autobiography_cron", D1)] == statuses(store)[("light_sleep", D2)] == "stale"
        # Redone in order (day 1's done places reused, the stale ones run): day 2 as before.
        assert operations.materialize("sleep", "2026-03-01", "2026-03-02", instance=instance, defs=defs).success
        assert snap(store, D2) == day_two and set(statuses(store).values()) == {"done"}


def test_a_later_days_light_sleep_never_leaks_into_an_earlier_days_snapshot(store, ingest, tmp_path):
    """The demo once ran 14 days of light sleep before any deep sleep: day 1's snapshot held day 2's
    update and `sleep diff` showed nothing changed between them."""
    _midnight_session(ingest)
    ctx = ctx_for(store, tmp_path)
    run_light_sleep(ctx, D1)
    with pytest.raises(StageFailure, match="light sleep 2026-03-02: autobiography of 2026-03-01 has not run"):
        run_light_sleep(ctx, D2)
    run_deep_sleep(ctx, D1)
    run_autobiography(ctx, D1)
    night(store, tmp_path, D2)
    assert snap(store, D1) == {"user: garden tomatoes tomatoes"}  # day 2's fact is not in day 1's snapshot
    (made,) = diff(store, "r", D1, D2).created  # day 2's fact is day 2's
    assert snapshot(store, "r", D2)[made]["content"] == "user: marathon pacing marathon"


def test_a_model_failure_mid_tool_loop_writes_nothing_and_leaves_its_round_log(store, ingest, tmp_path):
    two_days(ingest)
    for day in (D1, D2):
        night(store, tmp_path, day)
    with store.connect() as conn:
        versions = conn.execute(select(func.count()).select_from(semantic_memory_versions)).scalar_one()
        (target,) = [m.id for m in mem.load_active(conn, ["r"])["r"] if m.content == NOT_SPICY]
    before = statuses(store, "r")
    with FakeOpenAI() as server:
        server.push("tools", [("deprecate_semantic_memory", {"id": target, "reason": "x"})]).push("ok", "done")
        server.push("status", 500)  # round 2's first call: the provider fails
        llm = LLMClient(store, model="openai/stub", api_base=server.api_base, api_key="k", max_retries=0)
        with pytest.raises(LLMHardFailure) as raised:
            run_deep_sleep(ctx_for(store, tmp_path, llm, force=True), D2)
    # Where it failed goes with the error to the run's failure line (str(exc) stays the provider's).
    assert raised.value.__notes__ == ["deep_sleep of world r, day 2026-03-02: nothing of this attempt was written"]
    # Nothing of the attempt: round 1's deprecation, the restore it started from, the stale marks.
    assert NOT_SPICY in active(store) and NOT_SPICY in snap(store, D2)
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(semantic_memory_versions)).scalar_one() == versions
        detail = conn.execute(
            select(sleep_runs.c.detail).where(
                sleep_runs.c.stage == "deep_sleep", sleep_runs.c.day == D2, sleep_runs.c.world_id == "r"
            )
        ).scalar_one()
    assert statuses(store, "r") == before  # the day keeps the outputs of its done run, and says so
    assert "LLMHardFailure" in detail["failed_attempt"]["error"] and detail["failed_attempt"]["model"] == "openai/stub"
    logs = tmp_path / "logs" / "r"
    first = json.loads((logs / "deep_sleep_2026-03-02_1_contradiction.json").read_text(encoding="utf-8"))
    second = json.loads((logs / "deep_sleep_2026-03-02_2_split.json").read_text(encoding="utf-8"))
    assert first["committed"] is False and first["applied"] == 1 and first["error"] is None
    assert second["committed"] is False and "LLMHardFailure" in second["error"] and "500" in second["failure"]
    assert sleep_status(store)["failed_attempts"] == {"deep_sleep": [D2]}  # `sleep status` says so
    run_deep_sleep(ctx_for(store, tmp_path, force=True), D2)  # asked again, it runs and the note goes
    assert sleep_status(store)["failed_attempts"] == {} and NOT_SPICY in snap(store, D2)


def test_a_first_run_that_fails_is_recorded_failed_and_the_next_one_runs(store, ingest, tmp_path):
    two_days(ingest)
    with FakeOpenAI() as server:
        server.push(
            "tools", [("create_semantic_memory", {"type": "world", "content": "x", "source_sessions": ["r-a"]})]
        )
        server.push("status", 500)
        llm = LLMClient(store, model="openai/stub", api_base=server.api_base, api_key="k", max_retries=0)
        with pytest.raises(LLMHardFailure) as raised:
            run_light_sleep(ctx_for(store, tmp_path, llm), D1)
    assert raised.value.__notes__ == [f"light_sleep of world r, day {D1}: nothing of this attempt was written"]
    assert active(store) == set()
    assert statuses(store) == {("light_sleep", D1): "failed"} and statuses(store, "r") == {
        ("light_sleep", D1): "failed"
    }
    run_light_sleep(ctx_for(store, tmp_path), D1)
    assert SPICY in active(store) and statuses(store) == {("light_sleep", D1): "done"}


def test_a_call_the_providers_breaker_refused_is_no_failure_of_the_world(store, ingest, tmp_path):
    """The breaker is open (another caller's call failed; threshold 1): light sleep's call is refused
    without a request. Nothing is recorded for the world or the day (it was never asked: not
    failed), so the next run, the provider back, simply does the day."""
    two_days(ingest)
    with FakeOpenAI() as server:
        server.push("status", 500)
        llm = LLMClient(
            store,
            model="openai/stub",
            api_base=server.api_base,
            api_key="k",
            max_retries=0,
            breaker_failures=1,
            breaker_cooldown_seconds=3600,
        )
        with pytest.raises(LLMHardFailure):
            llm.complete(LLMRequest(task="other", system="s", user="u", prompt_version="v"))
        with pytest.raises(LLMProviderDown):
            run_light_sleep(ctx_for(store, tmp_path, llm), D1)
        assert len(server.requests) == 1  # the refused call sent none
    assert statuses(store) == {} and statuses(store, "r") == {}
    assert sleep_status(store)["failed_attempts"] == {}
    run_light_sleep(ctx_for(store, tmp_path), D1)
    assert SPICY in active(store) and statuses(store) == {("light_sleep", D1): "done"}


def test_another_model_redoes_finished_days_when_asked_and_the_same_model_reuses_them(store, ingest, tmp_path):
    two_days(ingest)
    for day in (D1, D2):
        night(store, tmp_path, day)
    same = run_light_sleep(ctx_for(store, tmp_path), D1)
    assert same.reused == 1 and same.llm_calls == 0
    with FakeOpenAI(default_text="nothing to extract") as server:
        llm = LLMClient(store, model="openai/other", api_base=server.api_base, api_key="k", max_retries=0)
        other = run_light_sleep(ctx_for(store, tmp_path, llm), D1)
        assert other.reused == 0 and other.llm_calls == 1 and len(server.requests) == 1
        # Redone with the other model, the day is a rebuild: the days after it turn stale, to be
        # redone (backfill, the nightly ticks) in order, with the model they then run with.
        assert other.restored == 1 and statuses(store)[("light_sleep", D2)] == "stale"
        for stage in (run_deep_sleep, run_autobiography):
            stage(ctx_for(store, tmp_path, llm), D1)
        night(store, tmp_path, D2, llm)
    with store.connect() as conn:
        models = set(conn.execute(select(sleep_runs.c.model).where(sleep_runs.c.world_id == "r")).scalars())
    assert models == {"openai/other"}


def test_the_schedules_and_backfills_redo_stale_days_in_order(store, ingest, tmp_path):
    """After a rebuild of day 1 only, day 2 is stale: deep sleep of day 2 refuses until light sleep
    of day 2 is redone, which needs day 1 done first."""
    two_days(ingest)
    for day in (D1, D2):
        night(store, tmp_path, day)
    restore(store, D1)
    with pytest.raises(StageFailure, match="light sleep 2026-03-02: autobiography of 2026-03-01 is stale"):
        run_light_sleep(ctx_for(store, tmp_path), D2)
    for day in (D1, D2):
        night(store, tmp_path, day)
    assert set(statuses(store).values()) == {"done"} and NOT_SPICY in active(store)


def test_a_rebuild_puts_back_the_autobiography_summary_the_day_before_left(store, ingest, tmp_path):
    """Every stage's system prompt carries autobiography_summary: a rebuilt day must see the one the
    day before it left, not a later day's."""
    two_days(ingest)
    night(store, tmp_path, D1)
    with store.connect() as conn:
        q = select(self_blocks.c.content, self_blocks.c.updated_by).where(
            self_blocks.c.world_id == "r", self_blocks.c.name == "autobiography_summary"
        )
        after_day_one = tuple(conn.execute(q).one())
        night(store, tmp_path, D2)
        assert tuple(conn.execute(q).one()) != after_day_one
        restore(store, D2)
        assert tuple(conn.execute(q).one()) == after_day_one
        restore(store, D1)  # before the first autobiography there was none
        assert conn.execute(q).first() is None


def test_a_deep_sleep_rerun_keeps_a_true_version_history(store, ingest, tmp_path):
    """Asked again, deep sleep of day 2 first puts 我喜欢吃辣 back (restore) and then deprecates it
    again: each step is its own version row, in order, with the state it left."""
    two_days(ingest)
    for day in (D1, D2):
        night(store, tmp_path, day)
    run_deep_sleep(ctx_for(store, tmp_path, force=True), D2)
    v = semantic_memory_versions.c
    with store.connect() as conn:
        (mid,) = conn.execute(
            select(semantic_memories.c.memory_id).where(semantic_memories.c.content == SPICY)
        ).scalars()
        rows = conn.execute(
            select(v.version, v.op, v.status, v.stage, v.day, v.round).where(v.memory_id == mid).order_by(v.version_id)
        ).all()
    assert [tuple(r) for r in rows] == [
        (1, "create", "active", "light_sleep", D1, None),
        (2, "deprecate", "deprecated", "deep_sleep", D2, "contradiction"),
        (3, "restore", "active", "sleep_rebuild", D2, "deep_sleep"),
        (4, "deprecate", "deprecated", "deep_sleep", D2, "contradiction"),
    ]


def test_a_world_refused_where_its_deep_sleep_was_done_is_put_back_and_its_later_days_turn_stale(
    store, ingest, tmp_path
):
    """Deep sleep of day 1 done for the world (it split SPLIT), day 2 done too; asked again for day 1
    over a lowered limit the world is refused: the done run is undone as by a rebuild (the split line
    is back, its parts deprecated), the world has no snapshot of day 1, and every later place of the
    world turns stale, so nothing reads as done from the run that no longer stands."""
    two_days(ingest)
    ctx = ctx_for(store, tmp_path)
    run_light_sleep(ctx, D1)
    after_light = active(store)
    run_deep_sleep(ctx, D1)
    run_autobiography(ctx, D1)
    night(store, tmp_path, D2)
    assert {"我爱喝咖啡", "我住在上海"} <= active(store) and snap(store, D1)

    small = SleepConfig(
        log_dir=str(tmp_path / "logs"), deep_warn_chars=10, deep_batch_chars=20, deep_refuse_chars=30
    ).validate()
    llm = LLMClient(store, asset="sleep_test", partition="p")
    result = run_deep_sleep(SleepContext(store, llm, small, CST, force=True), D1)
    assert list(result.refused) == ["r"] and "over the 30 limit" in result.refused["r"]
    assert result.stale_days == [D1, D2]
    assert active(store) == after_light and SPLIT in active(store)  # the day's set before its deep sleep
    assert snapshot(store, "r", D1) == {}
    with pytest.raises(LookupError, match="deep sleep refused it that day"):
        diff(store, "r", D1, D2)
    assert statuses(store, "r") == {
        ("light_sleep", D1): "done",
        ("deep_sleep", D1): "refused",
        ("autobiography_cron", D1): "stale",
        ("light_sleep", D2): "stale",
        ("deep_sleep", D2): "stale",
        ("autobiography_cron", D2): "stale",
    }
    assert {k: v for k, v in statuses(store).items() if k != ("deep_sleep", D1)} == {
        ("light_sleep", D1): "done",
        ("autobiography_cron", D1): "stale",
        ("light_sleep", D2): "stale",
        ("deep_sleep", D2): "stale",
        ("autobiography_cron", D2): "stale",
    }


def test_a_run_over_some_worlds_never_marks_the_place_done_for_the_others(store, ingest, tmp_path):
    """Two worlds talk on day 1; light sleep runs for one (a run config's or the CLI's world filter):
    the other world's place stays due, for the day order, the nightly tick and `sleep status` alike.
    The filtered world may go on through its own day; the day is done once every world ran."""
    from memory_pipeline.sleep.order import Position, catch_up
    from memory_pipeline.sleep.runs import day_statuses

    two_days(ingest)
    ingest(conversation("q", "q-a", cst(2026, 3, 1, 10), ["我喜欢下棋", "好", "chess openings chess", "嗯"]))

    def due_at_light_tick():
        with store.connect() as conn:
            return catch_up(day_statuses(conn), [D1], Position.of(D1, Stage.LIGHT))

    ctx = ctx_for(store, tmp_path)
    only_r = run_light_sleep(ctx, D1, ["r"])
    assert only_r.worlds == 1 and SPICY in active(store) and active(store, "q") == set()
    assert statuses(store, "q") == {} and statuses(store) == {("light_sleep", D1): "partial"}
    req = due_at_light_tick()
    assert req is not None and (req.first, req.last, req.stages) == (D1, D1, (Stage.LIGHT,))
    assert "partial" in stage_audit(store, Stage.LIGHT, D1).problems[0]
    # The next place waits for the other world; the filtered world's own day goes on.
    with pytest.raises(StageFailure, match="deep sleep 2026-03-01: light sleep of 2026-03-01 is partial"):
        run_deep_sleep(ctx, D1)
    assert run_deep_sleep(ctx, D1, ["r"]).worlds == 1 and statuses(store)[("deep_sleep", D1)] == "partial"
    # The other world's run completes the place: the day record is done, r's record is reused.
    rest = run_light_sleep(ctx, D1, ["q"])
    assert rest.worlds == 1 and "我喜欢下棋" in active(store, "q")
    assert statuses(store)[("light_sleep", D1)] == "done" and due_at_light_tick() is None
    whole = run_deep_sleep(ctx, D1)
    assert whole.reused == 1 and statuses(store)[("deep_sleep", D1)] == "done"
