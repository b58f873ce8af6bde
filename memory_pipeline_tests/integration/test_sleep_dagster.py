"""Sleep and conversation in Dagster on the real PostgreSQL: the three stages as range runs in day
order with one check result per partition, the nightly schedules (crons, builtin ids, catch-up as
one ordered run), the deep-sleep order guard, and the rolling-summary sensor end to end."""

import json

import pytest
from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterRunStatus,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
)
from dagster._core.test_utils import create_run_for_test
from sqlalchemy import func, select

from memory_pipeline import operations
from memory_pipeline.conversation import summaries
from memory_pipeline.conversation.tables import conversation_summaries
from memory_pipeline.sleep import memory as mem
from memory_pipeline.sleep.config import SleepConfig
from memory_pipeline.sleep.runs import day_statuses
from memory_pipeline.sleep.tables import self_blocks, semantic_memories, semantic_memory_snapshots
from memory_pipeline_tests.conftest import conversation, cst
from memory_pipeline_tests.integration.test_dagster import make_defs

DAYS = ["2026-03-02", "2026-03-03"]


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def defs(pg_url, redis_url):
    return make_defs(pg_url, redis_url)


@pytest.fixture
def two_days(ingest):
    ingest(
        conversation("w1", "s-1", cst(2026, 3, 2, 9), ["我喜欢吃辣", "好", "garden tomatoes tomatoes", "ok"])
        + conversation("w1", "s-2", cst(2026, 3, 3, 9), ["我不喜欢吃辣", "嗯", "garden tomatoes tomatoes", "ok"])
        + conversation("w2", "s-3", cst(2026, 3, 3, 20), ["marathon marathon pacing", "ok"])
    )


def _materializations(instance, key):
    out = {}
    for r in instance.fetch_materializations(AssetKey(key), limit=100).records:
        m = r.asset_materialization
        out.setdefault(m.partition, {k: v.value for k, v in m.metadata.items()})  # newest first
    return out


def _checks(instance, run_id):
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records
    return [
        (
            r.event_log_entry.dagster_event.event_specific_data.partition,
            r.event_log_entry.dagster_event.event_specific_data.passed,
        )
        for r in records
    ]


def test_the_three_stages_run_in_day_order_with_a_check_result_per_partition(defs, instance, store, two_days):
    report = operations.materialize("sleep", DAYS[0], DAYS[1], instance=instance, defs=defs)
    assert report.success, report.runs[0].error
    assert len(report.runs) == 1  # one run: each day's light, deep and autobiography before the next day's
    checks = sorted(_checks(instance, report.runs[0].run_id))
    assert checks == sorted([(d, True) for d in DAYS] * 3)
    light = _materializations(instance, "sleep_light_sleep")
    assert light[DAYS[0]]["worlds"] == 1 and light[DAYS[1]]["worlds"] == 2 and light[DAYS[0]]["memories_created"] >= 2
    deep = _materializations(instance, "sleep_deep_sleep")
    assert deep[DAYS[1]]["snapshot_rows"] > 0 and "| world | # | round |" in deep[DAYS[1]]["rounds"]
    with store.connect() as conn:
        contents = set(
            conn.execute(select(semantic_memories.c.content).where(semantic_memories.c.status == "active")).scalars()
        )
        assert (
            "我不喜欢吃辣" in contents and "我喜欢吃辣" not in contents
        )  # day 3's deep sleep: older contradiction out
        snaps = dict(
            conn.execute(
                select(semantic_memory_snapshots.c.day, func.count()).group_by(semantic_memory_snapshots.c.day)
            ).all()
        )
        assert len(snaps) == 2
        # The metadata counts the rows written: each day's snapshot, as the store holds it.
        assert {d.isoformat(): n for d, n in snaps.items()} == {d: deep[d]["snapshot_rows"] for d in DAYS}
        blocks = (
            conn.execute(select(self_blocks.c.world_id).where(self_blocks.c.name == "autobiography_summary"))
            .scalars()
            .all()
        )
        assert sorted(blocks) == ["w1", "w2"]


def test_a_stage_out_of_order_fails_naming_the_place_it_waits_for(defs, instance, two_days):
    """Light sleep of day 2 before day 1 is done would read a set day 1's deep sleep has not made."""
    report = operations.materialize("light_sleep", DAYS[0], DAYS[1], instance=instance, defs=defs)
    assert not report.success
    assert "light sleep 2026-03-03: autobiography of 2026-03-02 has not run" in report.runs[0].error
    assert operations.materialize("sleep", DAYS[0], DAYS[1], instance=instance, defs=defs).success
    # Deep sleep of day 1 asked again is a rebuild of day 1 from its deep sleep: day 1's
    # autobiography and day 2 turn stale, and the run says so; its partitions get an observation.
    rebuilt = operations.materialize("deep_sleep", DAYS[0], DAYS[0], instance=instance, defs=defs, force_llm=True)
    assert rebuilt.success
    meta = _materializations(instance, "sleep_deep_sleep")[DAYS[0]]
    assert meta["later_days_marked_stale"] == DAYS and meta["worlds_restored_first"] == 1
    assert _stale_observed(instance) == {
        ("sleep_autobiography", DAYS[0]),
        ("sleep_light_sleep", DAYS[1]),
        ("sleep_deep_sleep", DAYS[1]),
        ("sleep_autobiography", DAYS[1]),
    }


def _stale_observed(instance) -> set[tuple[str, str]]:
    return {
        (r.asset_key.to_user_string(), r.event_log_entry.dagster_event.event_specific_data.asset_observation.partition)
        for key in ("sleep_light_sleep", "sleep_deep_sleep", "sleep_autobiography")
        for r in instance.fetch_observations(AssetKey(key), limit=10).records
    }


def test_a_run_that_fails_after_making_places_stale_still_observes_them(defs, instance, two_days):
    """Deep sleep of both days asked again: day 1's rebuild makes day 1's autobiography and day 2
    stale, then day 2's deep sleep fails (its light sleep is stale now). The failed run still puts
    an observation on each place it left stale, as a successful one does, and materializes day 1."""
    assert operations.materialize("sleep", DAYS[0], DAYS[1], instance=instance, defs=defs).success
    report = operations.materialize("deep_sleep", DAYS[0], DAYS[1], instance=instance, defs=defs, force_llm=True)
    (run,) = report.runs
    assert not run.success and "deep sleep 2026-03-03" in run.error.splitlines()[0], run.error
    assert _materializations(instance, "sleep_deep_sleep")[DAYS[0]]["later_days_marked_stale"] == DAYS
    assert _stale_observed(instance) == {
        ("sleep_autobiography", DAYS[0]),
        ("sleep_light_sleep", DAYS[1]),
        ("sleep_deep_sleep", DAYS[1]),
        ("sleep_autobiography", DAYS[1]),
    }


def test_a_range_failing_on_its_second_day_materializes_the_first_days_stage(defs, instance, two_days):
    """Light sleep of both days: day 1's is written, day 2's fails (it waits for day 1's
    autobiography). The failed run materializes day 1's light sleep with its metadata, nothing else."""
    report = operations.materialize("light_sleep", DAYS[0], DAYS[1], instance=instance, defs=defs)
    (run,) = report.runs
    assert not run.success and "light sleep 2026-03-03: autobiography of 2026-03-02 has not run" in run.error
    records = instance.fetch_materializations(AssetKey("sleep_light_sleep"), limit=10).records
    assert [(r.asset_materialization.partition, r.run_id) for r in records] == [(DAYS[0], run.run_id)]
    meta = _materializations(instance, "sleep_light_sleep")[DAYS[0]]
    assert meta["worlds"] == 1 and meta["memories_created"] >= 2
    for key in ("sleep_deep_sleep", "sleep_autobiography"):
        assert instance.fetch_materializations(AssetKey(key), limit=10).records == []


def test_deep_sleep_without_its_light_sleep_fails_with_the_reason(defs, instance, two_days):
    report = operations.materialize("deep_sleep", DAYS[0], DAYS[0], instance=instance, defs=defs)
    assert not report.success and "light sleep of 2026-03-02 has not run" in report.runs[0].error


def _tick(defs, instance, name, at):
    sched = defs.get_schedule_def(name)
    with build_schedule_context(
        instance=instance,
        scheduled_execution_time=at,
        repository_def=defs.get_repository_def(),
        resources={"sleep": defs.resources["sleep"]},
    ) as ctx:
        return sched.evaluate_tick(ctx)


def _run(defs, instance, req):
    job = defs.resolve_job_def("sleep_nights_job")
    kwargs = dict(instance=instance, tags=req.tags, asset_selection=req.asset_selection, raise_on_error=False)
    if req.partition_key:
        return job.execute_in_process(partition_key=req.partition_key, **kwargs)
    return job.execute_in_process(**kwargs)


def test_sleep_schedules_crons_builtin_ids_and_catch_up_as_one_ordered_run(defs, instance, store, two_days):
    crons = {
        n: defs.get_schedule_def(n)
        for n in ("sleep_light_schedule", "sleep_deep_schedule", "sleep_autobiography_schedule")
    }
    assert [s.cron_schedule for s in crons.values()] == ["0 2 * * *", "0 3 * * *", "0 4 * * *"]
    assert all(s.execution_timezone == "Asia/Shanghai" for s in crons.values())
    assert [s.tags["memory_pipeline/builtin"] for s in crons.values()] == [
        "builtin-light-sleep",
        "builtin-deep-sleep",
        "builtin-self-autobiography",
    ]
    assert "builtin-deep-sleep" in crons["sleep_deep_schedule"].description
    # A normal night: each tick its own stage of yesterday (03:00 on D+1 processes D).
    (light,) = _tick(defs, instance, "sleep_light_schedule", cst(2026, 3, 3, 2, 0)).run_requests
    assert light.partition_key == "2026-03-02" and light.asset_selection == [AssetKey("sleep_light_sleep")]
    assert _run(defs, instance, light).success
    (deep,) = _tick(defs, instance, "sleep_deep_schedule", cst(2026, 3, 3, 3, 0)).run_requests
    assert deep.partition_key == "2026-03-02" and deep.asset_selection == [AssetKey("sleep_deep_sleep")]
    assert _run(defs, instance, deep).success
    skipped = _tick(defs, instance, "sleep_deep_schedule", cst(2026, 3, 3, 3, 0))
    assert "nothing to do: every place up to deep sleep of 2026-03-02 is done" in skipped.skip_message
    # Down from then on; back on 03-07 at the autobiography's hour: one run over the missed days,
    # day by day, each day's three stages (the done ones reused).
    (missed,) = _tick(defs, instance, "sleep_autobiography_schedule", cst(2026, 3, 7, 4, 0)).run_requests
    assert (missed.tags["dagster/asset_partition_range_start"], missed.tags["dagster/asset_partition_range_end"]) == (
        "2026-03-02",
        "2026-03-06",
    )
    assert missed.asset_selection == [
        AssetKey(k) for k in ("sleep_light_sleep", "sleep_deep_sleep", "sleep_autobiography")
    ]
    # At the light sleep's hour the newest day's deep sleep and autobiography are not due yet: the
    # run stops at the last whole day.
    (early,) = _tick(defs, instance, "sleep_light_schedule", cst(2026, 3, 7, 2, 0)).run_requests
    assert early.tags["dagster/asset_partition_range_end"] == "2026-03-05"
    # While a sleep run is running (or queued), no tick requests anything (it would overlap).
    queued = create_run_for_test(instance, job_name="sleep_nights_job", status=DagsterRunStatus.STARTED)
    busy = _tick(defs, instance, "sleep_light_schedule", cst(2026, 3, 7, 2, 0))
    assert f"run {queued.run_id} of sleep_nights_job is not finished" in busy.skip_message
    instance.report_run_failed(queued)
    assert _run(defs, instance, missed).success
    with store.connect() as conn:
        statuses = day_statuses(conn)
    assert sorted({p.day.isoformat() for p, st in statuses.items() if st == "done"}) == [
        "2026-03-02",
        "2026-03-03",
        "2026-03-04",
        "2026-03-05",
        "2026-03-06",
    ]
    assert len(statuses) == 15


def test_rolling_summary_sensor_end_to_end(defs, instance, store, pg_url, ingest):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), [f"我喜欢爬山 {i}" for i in range(30)]))
    sensor = defs.get_sensor_def("conversation_rolling_summary_sensor")

    def tick():
        resources = {"conversation": defs.resources["conversation"]}
        with build_sensor_context(
            instance=instance, repository_def=defs.get_repository_def(), resources=resources
        ) as ctx:
            return sensor.evaluate_tick(ctx)

    assert tick().run_requests == []  # initialization not done: a silent skip
    summaries.set_init_status(store, "c1", "done")
    # The world's long_arc, in the self layer: the asset reads it for the model, never writes it.
    mem.set_self_block(store, "w1", "long_arc", "角色一直惦记着故乡。", SleepConfig().block_names(), "author")
    (req,) = tick().run_requests
    job = defs.resolve_job_def("conversation_rolling_summary_job")
    result = job.execute_in_process(instance=instance, run_config=req.run_config, raise_on_error=False)
    assert result.success
    with store.connect() as conn:
        (arc,) = conn.execute(select(conversation_summaries.c.sections)).scalars().all()
        block = conn.execute(select(self_blocks.c.content, self_blocks.c.updated_by)).one()
    assert arc["arc"].endswith("让角色想起自己的长线心事。") and tuple(block) == ("角色一直惦记着故乡。", "author")
    checks = instance.get_records_for_run(result.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records
    assert [r.event_log_entry.dagster_event.event_specific_data.passed for r in checks] == [True]
    assert tick().run_requests == []  # covered now


def test_the_light_schedule_tick_runs_end_to_end(defs, instance, store, two_days):
    """From the 02:00 tick on 2026-03-03 to the day's memories: the run the schedule requests."""
    (req,) = _tick(defs, instance, "sleep_light_schedule", cst(2026, 3, 3, 2, 0)).run_requests
    result = _run(defs, instance, req)
    assert result.success and req.partition_key == "2026-03-02"
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(semantic_memories)).scalar_one() >= 2
    assert _materializations(instance, "sleep_light_sleep")["2026-03-02"]["sessions"] == 1


def test_disabled_sleep_reads_and_writes_nothing_and_says_so(pg_url, redis_url, instance, store, two_days, tmp_path):
    from memory_pipeline.definitions import build_defs
    from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource

    config = tmp_path / "memory.yaml"
    config.write_text("memory:\n  sleep:\n    enabled: false\n", encoding="utf-8")
    defs = build_defs(
        {
            "memory_store": MemoryStoreResource(database_url=pg_url),
            "kv_cache": CacheResource(redis_url=redis_url),
            "llm": LLMResource(),
            "memory_config": MemoryConfigResource(config_file=str(config)),
        }
    )
    report = operations.materialize("light_sleep", DAYS[0], DAYS[0], instance=instance, defs=defs)
    assert report.success
    assert _materializations(instance, "sleep_light_sleep")[DAYS[0]]["disabled"] is True
    assert _checks(instance, report.runs[0].run_id) == [(DAYS[0], True)]  # disabled on purpose: not a failure
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(semantic_memories)).scalar_one() == 0


def test_an_oversized_world_is_refused_alone_and_the_asset_and_its_check_say_so(
    pg_url, redis_url, instance, store, ingest, tmp_path
):
    """Limits lowered so a world of four memories is over the refusal size: deep sleep of the day
    materializes for the other world, its metadata and its check name the refused one with its size,
    and the autobiography then runs."""
    from memory_pipeline.definitions import build_defs
    from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource

    config = tmp_path / "memory.yaml"
    config.write_text(
        "memory:\n  sleep:\n    deep_warn_chars: 100\n    deep_batch_chars: 200\n    deep_refuse_chars: 300\n"
        f"    log_dir: {tmp_path / 'logs'}\n",
        encoding="utf-8",
    )
    defs = build_defs(
        {
            "memory_store": MemoryStoreResource(database_url=pg_url),
            "kv_cache": CacheResource(redis_url=redis_url),
            "llm": LLMResource(),
            "memory_config": MemoryConfigResource(config_file=str(config)),
        }
    )
    ingest(
        conversation("w-big", "s-b", cst(2026, 3, 2, 9), ["我喜欢吃辣", "好", "我喜欢喝茶", "好", "我喜欢爬山", "好"])
        + conversation("w-small", "s-s", cst(2026, 3, 2, 10), ["garden tomatoes", "ok"])
    )
    day = DAYS[0]
    assert operations.materialize("light_sleep", day, day, instance=instance, defs=defs).success
    deep = operations.materialize("deep_sleep", day, day, instance=instance, defs=defs)
    assert deep.success  # the other world slept: the day is materialized, degraded and saying so
    meta = _materializations(instance, "sleep_deep_sleep")[day]
    assert (
        list(meta["worlds_refused_300k"]) == ["w-big"] and "over the 300 limit" in meta["worlds_refused_300k"]["w-big"]
    )
    assert meta["worlds"] == 1 and meta["snapshot_rows"] >= 1
    (check,) = instance.get_records_for_run(
        deep.runs[0].run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    evaluation = check.event_log_entry.dagster_event.event_specific_data
    problems = evaluation.metadata["first_problems"].value
    assert evaluation.passed is False and "w-big: refused" in problems and "characters, over the 300 limit" in problems
    with store.connect() as conn:
        worlds = set(conn.execute(select(semantic_memory_snapshots.c.world_id)).scalars())
    assert worlds == {"w-small"}
    auto = operations.materialize("autobiography", day, day, instance=instance, defs=defs)
    assert auto.success
    with store.connect() as conn:
        blocks = set(
            conn.execute(select(self_blocks.c.world_id).where(self_blocks.c.name == "autobiography_summary")).scalars()
        )
    assert "w-small" in blocks


def test_the_rolling_summary_sensor_does_not_ask_again_during_the_backoff(defs, instance, store, ingest):
    """A refused answer: the next ticks (every 5 minutes) request no new paid call until the
    backoff is over; then one, under a new run key."""
    from datetime import timedelta

    from memory_pipeline.conversation.config import ConversationConfig
    from memory_pipeline.conversation.tables import conversation_summary_backoff
    from memory_pipeline.lib.llm import LLMClient
    from memory_pipeline_tests.conftest import CST
    from memory_pipeline_tests.fake_openai import FakeOpenAI

    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), [f"我喜欢爬山 {i}" for i in range(30)]))
    summaries.set_init_status(store, "c1", "done")
    sensor = defs.get_sensor_def("conversation_rolling_summary_sensor")

    def tick():
        resources = {"conversation": defs.resources["conversation"]}
        with build_sensor_context(
            instance=instance, repository_def=defs.get_repository_def(), resources=resources
        ) as ctx:
            return sensor.evaluate_tick(ctx)

    (first,) = tick().run_requests
    cfg = ConversationConfig()
    with FakeOpenAI() as server:
        server.push("ok", "no tool call")  # a format error
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        assert summaries.run(store, llm, cfg, CST, summaries.due_conversations(store, cfg)).failed
    assert tick().run_requests == []  # the next tick: no new paid call
    with store.begin() as conn:  # the first backoff (10 minutes) has passed
        failed_at = conn.execute(select(conversation_summary_backoff.c.last_failure_at)).scalar_one()
        conn.execute(conversation_summary_backoff.update().values(last_failure_at=failed_at - timedelta(minutes=10)))
    (again,) = tick().run_requests
    assert again.run_key != first.run_key and again.run_config == first.run_config


def _records(store, stage, day):
    """Each world's (input_fp, detail) of the stage's record of ``day``."""
    from datetime import date

    from memory_pipeline.sleep.tables import sleep_runs

    r = sleep_runs.c
    q = select(r.world_id, r.input_fp, r.detail).where(
        r.stage == stage, r.day == date.fromisoformat(day), r.world_id != "*"
    )
    with store.connect() as conn:
        return {w: (fp, detail) for w, fp, detail in conn.execute(q)}


def _two_worlds_one_day(ingest) -> str:
    """w1 (its material names "garden tomatoes") and w2 on DAYS[0], one session each: the day."""
    ingest(
        conversation("w1", "s-1", cst(2026, 3, 2, 9), ["garden tomatoes tomatoes", "ok"])
        + conversation("w2", "s-2", cst(2026, 3, 2, 10), ["marathon marathon pacing", "ok"])
    )
    return DAYS[0]


def test_a_light_sleep_record_from_an_answer_the_provider_cut_is_marked_and_asked_again(
    pg_url, redis_url, instance, store, ingest, capsys
):
    """The provider stops w1's light-sleep answer at its output limit (finish_reason length). The
    day is materialized, but w1's record says so (``answers_cut``, no input fingerprint), the
    metadata names w1 (``worlds_truncated``), `sleep status` lists it, and mode "changed" re-runs
    the day for that reason: w1 is asked again (one more call), w2's whole answer is reused. Then
    nothing is left to re-run."""
    from memory_pipeline.sleep.reports import status
    from memory_pipeline_tests.fake_openai import FakeOpenAI

    day = _two_worlds_one_day(ingest)
    with FakeOpenAI() as server:
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k")
        cut = []  # w1's first call is cut, whichever world's call comes first (worlds are asked at once)

        def step(body):
            if not cut and "garden tomatoes" in json.dumps(body["messages"], ensure_ascii=False):
                cut.append(1)
                return ("length", "我先记下今天的")
            return ("ok", server.default_text)

        server.step = step
        first = operations.materialize("light_sleep", day, day, instance=instance, defs=defs)
        assert first.success and len(server.requests) == 2
        meta = _materializations(instance, "sleep_light_sleep")[day]
        assert meta["llm_truncated_answers"] == 1 and meta["worlds_truncated"] == ["w1"]
        records = _records(store, "light_sleep", day)
        assert records["w1"][0] is None and records["w1"][1]["answers_cut"] == 1
        assert records["w2"][0] is not None and "answers_cut" not in records["w2"][1]
        (cut,) = status(store)["cut"]
        assert (cut["stage"], str(cut["day"]), cut["world_id"], cut["answers_cut"]) == ("light_sleep", day, "w1", 1)
        from memory_pipeline.cli.sleep import print_sleep_status

        capsys.readouterr()
        print_sleep_status(store)
        shown = capsys.readouterr().out
        assert "Records from answers cut at the output limit" in " ".join(shown.split())
        rows = [[c.strip() for c in line.split("│")[1:-1]] for line in shown.splitlines() if line.startswith("│")]
        assert ["light_sleep", day, "w1", "1"] in rows

        again = operations.materialize("light_sleep", day, day, mode="changed", instance=instance, defs=defs)
        assert again.success and len(again.runs) == 1
        assert again.reasons == {day: "answer cut at the output limit (light sleep of w1)"}
        assert len(server.requests) == 3  # w1 asked again, w2's record reused
        meta = _materializations(instance, "sleep_light_sleep")[day]
        assert meta["llm_truncated_answers"] == 0 and meta["worlds_truncated"] == []
        records = _records(store, "light_sleep", day)
        assert records["w1"][0] is not None and "answers_cut" not in records["w1"][1]
        assert status(store)["cut"] == []

        quiet = operations.materialize("light_sleep", day, day, mode="changed", instance=instance, defs=defs)
        assert quiet.runs == [] and quiet.reasons == {} and quiet.skipped_existing == 1
        rerun = operations.materialize("light_sleep", day, day, instance=instance, defs=defs)
        assert rerun.success and len(server.requests) == 3  # whole answers: reused, no call


def test_a_light_sleep_whose_every_tool_call_was_refused_is_warned_and_asked_again(
    pg_url, redis_url, instance, store, ingest
):
    """The model answers w1's light sleep only with calls the rules refuse (arguments that are no
    JSON object), turn after turn. That day was recorded done, the run said ok with no warning, and
    no later run asked again: the day stayed empty for w1 for good. Now the run warns, the metadata
    names w1, its record is flagged and never reused: mode "changed" re-runs the day for w1 alone."""
    import logging

    from memory_pipeline_tests.fake_openai import FakeOpenAI

    day = _two_worlds_one_day(ingest)
    with FakeOpenAI() as server:
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k")
        broken = [True]

        def step(body):
            if broken[0] and "garden tomatoes" in json.dumps(body["messages"], ensure_ascii=False):
                return ("tools", [("create_semantic_memory", '{"oops": [1, 2,')])
            return ("ok", server.default_text)

        server.step = step
        first = operations.materialize("light_sleep", day, day, instance=instance, defs=defs)
        assert first.success
        meta = _materializations(instance, "sleep_light_sleep")[day]
        assert meta["worlds_all_calls_refused"] == ["w1"] and meta["tool_calls_rejected"] == 3
        warned = [
            e.user_message
            for e in instance.all_logs(first.runs[0].run_id)
            if e.level == logging.WARNING
            and "every tool call the model made for world w1 was refused" in e.user_message
        ]
        assert warned, "no warning"
        records = _records(store, "light_sleep", day)
        assert records["w1"][1]["all_calls_refused"] is True and "all_calls_refused" not in records["w2"][1]
        asked = len(server.requests)

        broken[0] = False
        again = operations.materialize("light_sleep", day, day, mode="changed", instance=instance, defs=defs)
        assert again.success and len(again.runs) == 1
        assert again.reasons == {day: "every tool call the model made was refused (light sleep of w1)"}
        assert len(server.requests) == asked + 1  # w1 asked again, w2's record reused
        assert "all_calls_refused" not in _records(store, "light_sleep", day)["w1"][1]
        quiet = operations.materialize("light_sleep", day, day, mode="changed", instance=instance, defs=defs)
        assert quiet.runs == [] and quiet.reasons == {}


def test_deep_sleep_and_autobiography_records_from_cut_answers_are_asked_again_by_a_changed_backfill(
    pg_url, redis_url, instance, store, ingest, tmp_path, monkeypatch
):
    """w1's first deep-sleep round and its autobiography are cut at the output limit: both records
    say so (deep sleep leaves no output fingerprint, so the next day would not take the set as
    consolidated either), both runs' metadata name w1, and a "changed" backfill of the nights re-asks
    w1's deep sleep (3 rounds) and autobiography (1 call) only; w2's and the light sleep are reused."""
    from memory_pipeline.lib.store.tables import llm_ledger
    from memory_pipeline_tests.fake_openai import FakeOpenAI

    day = _two_worlds_one_day(ingest)

    def ledger_rows():
        with store.connect() as conn:
            return conn.execute(select(func.count()).select_from(llm_ledger)).scalar_one()

    # The scripted answers go to the requests in the order they come: one world at a time
    # (test_sleep_worlds_at_once.py: worlds at once).
    cfg = tmp_path / "memory.yaml"
    cfg.write_text("memory:\n  sleep:\n    worlds_at_once: 1\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(cfg))
    with FakeOpenAI() as server:
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k")
        for session, fact in (("s-1", "在菜园里种了番茄"), ("s-2", "跑了十公里")):  # w1, then w2
            create = {"type": "experience", "content": fact, "source_sessions": [session]}
            server.push("tools", [("create_semantic_memory", create)]).push("ok", "done")
        assert operations.materialize("light_sleep", day, day, instance=instance, defs=defs).success
        server.push("length", "第一轮：我先看看")  # w1's first deep-sleep round
        assert operations.materialize("deep_sleep", day, day, instance=instance, defs=defs).success
        assert len(server.requests) == 4 + 6  # two light calls per world, three rounds per world
        meta = _materializations(instance, "sleep_deep_sleep")[day]
        assert meta["llm_truncated_answers"] == 1 and meta["worlds_truncated"] == ["w1"]
        deep = _records(store, "deep_sleep", day)
        assert deep["w1"][1]["answers_cut"] == 1 and deep["w1"][1]["output_fp"] is None
        assert "answers_cut" not in deep["w2"][1] and deep["w2"][1]["output_fp"] is not None
        server.push("length", "这周最值得记下的是")  # w1's autobiography
        assert operations.materialize("autobiography", day, day, instance=instance, defs=defs).success
        assert len(server.requests) == 10 + 2
        meta = _materializations(instance, "sleep_autobiography")[day]
        assert meta["llm_truncated_answers"] == 1 and meta["worlds_truncated"] == ["w1"]
        auto = _records(store, "autobiography_cron", day)
        assert auto["w1"] == (None, auto["w1"][1]) and auto["w1"][1]["answers_cut"] == 1
        assert auto["w2"][0] is not None

        before = ledger_rows()
        again = operations.materialize("sleep", day, day, mode="changed", instance=instance, defs=defs)
        assert again.success, again.runs[0].error
        assert again.reasons == {day: "answer cut at the output limit (deep sleep of w1, autobiography of w1)"}
        assert len(server.requests) == 12 + 4 and ledger_rows() == before + 4  # w1: 3 rounds, 1 autobiography
        assert _materializations(instance, "sleep_deep_sleep")[day]["worlds_truncated"] == []
        assert _materializations(instance, "sleep_autobiography")[day]["worlds_truncated"] == []
        for stage in ("deep_sleep", "autobiography_cron"):
            assert all("answers_cut" not in d for _, d in _records(store, stage, day).values())
        quiet = operations.materialize("sleep", day, day, mode="changed", instance=instance, defs=defs)
        assert quiet.runs == [] and len(server.requests) == 16


def test_a_rolling_summary_answer_cut_at_the_output_limit_is_named_by_the_runs_metadata(
    pg_url, redis_url, instance, store, ingest
):
    """The asset's metadata names the conversation whose answer was cut (``conversations_truncated``,
    also under ``failures`` with its `truncated:` error) and counts the cut answer; nothing is written."""
    from memory_pipeline_tests.fake_openai import FakeOpenAI

    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), [f"我喜欢爬山 {i}" for i in range(30)]))
    summaries.set_init_status(store, "c1", "done")
    arc = "这段时间用户一直在为周末爬山做准备。用户在这件事上很投入。整体情绪平稳。"
    args = {"emotional_arc": arc, "preferences": [], "emotional_key_points": [], "unresolved_hooks": []}
    with FakeOpenAI() as server:
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k")
        server.push("tools_length", [("write_conversation_summary", args)])
        job = defs.resolve_job_def("conversation_rolling_summary_job")
        assert job.execute_in_process(instance=instance, raise_on_error=False).success
    meta = _materializations(instance, "conversation_rolling_summaries")[None]
    assert meta["conversations_truncated"] == ["c1"] and meta["llm_truncated_answers"] == 1
    assert meta["failures"]["c1"].startswith("truncated: answer cut at the output limit") and meta["written"] == 0
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(conversation_summaries)).scalar_one() == 0
