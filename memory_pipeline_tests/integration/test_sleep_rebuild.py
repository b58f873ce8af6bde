"""Seed 003 rebuild of one day from scratch: semantic memory restored to before that day's sleep
(the previous day's snapshot), nothing deleted, every change a version row saying why; the day and
the later ones re-run in order give exactly a clean run's memory; without them re-run the later
days stay stale and their audit says so."""

from datetime import date

import pytest
from dagster import AssetKey
from sqlalchemy import func, select
from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store
from memory_pipeline.sleep import memory as mem
from memory_pipeline.sleep.autobiography import run_autobiography
from memory_pipeline.sleep.config import SleepConfig
from memory_pipeline.sleep.context import SleepContext, StageFailure
from memory_pipeline.sleep.deep import run_deep_sleep
from memory_pipeline.sleep.light import run_light_sleep
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.rebuild import restore
from memory_pipeline.sleep.reports import stage_audit
from memory_pipeline.sleep.snapshots import snapshot
from memory_pipeline.sleep.tables import (
    autobiographical_memories,
    self_blocks,
    semantic_memories,
    semantic_memory_versions,
    sleep_runs,
)
from memory_pipeline_tests.conftest import CST, conversation, cst
from memory_pipeline_tests.integration.test_cli import env  # noqa: F401 - the fixture

D1, D2, D3 = date(2026, 3, 2), date(2026, 3, 3), date(2026, 3, 4)
runner = CliRunner()


def three_days():
    """Day 3's deep sleep changes memories of days 1 and 2: it deprecates day 1's 我喜欢吃辣 (a
    contradiction, older) and merges day 2's split 我喜欢喝茶 with day 3's."""
    return (
        conversation("w1", "s-1", cst(2026, 3, 2, 9), ["我喜欢吃辣", "好", "garden tomatoes tomatoes", "ok"])
        + conversation(
            "w1", "s-2", cst(2026, 3, 3, 9), ["我喜欢喝茶；住在杭州", "好", "marathon pacing marathon", "嗯"]
        )
        + conversation("w1", "s-3", cst(2026, 3, 4, 9), ["我不喜欢吃辣", "哦", "我喜欢喝茶", "嗯"])
        + conversation("w2", "s-9", cst(2026, 3, 3, 20), ["我喜欢下棋", "好", "chess openings chess", "ok"])
    )


def _three_days_slept(folder, pg_url) -> Store:
    """``three_days`` ingested and slept through (days 1-3) from the command line; the store."""
    import json

    path = folder / "e.jsonl"
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in three_days()), encoding="utf-8")
    assert runner.invoke(app, ["ingest", str(path)]).exit_code == 0
    built = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-02", "--to", "2026-03-04"])
    assert built.exit_code == 0, built.output
    return Store(pg_url)


def ctx_for(store, tmp_path, force=False):
    cfg = SleepConfig(log_dir=str(tmp_path / "logs")).validate()
    return SleepContext(store, LLMClient(store, asset="sleep_test", partition="p"), cfg, CST, force=force)


def night(store, tmp_path, day, force=False):
    ctx = ctx_for(store, tmp_path, force)
    run_light_sleep(ctx, day)
    run_deep_sleep(ctx, day)
    run_autobiography(ctx, day)


def memory_set(store):
    """The active semantic memory as content (ids differ between runs: a re-run never reuses one)."""
    with store.connect() as conn:
        rows = conn.execute(select(semantic_memories).where(semantic_memories.c.status == "active")).mappings()
        return sorted(
            (r["world_id"], r["type"], r["content"], tuple(sorted(r["source_sessions"])), r["observed_at"])
            for r in rows
        )


def snapshot_sets(store):
    """Each day's snapshot as content: what deep sleep of that day left."""
    out = {}
    for day in (D1, D2, D3):
        for world in ("w1", "w2"):
            rows = snapshot(store, world, day).values()
            out[(world, day)] = sorted((r["type"], r["content"], tuple(sorted(r["source_sessions"]))) for r in rows)
    return out


def narrative_set(store):
    with store.connect() as conn:
        rows = conn.execute(
            select(autobiographical_memories).where(autobiographical_memories.c.status == "active")
        ).mappings()
        return sorted((r["world_id"], r["narrative"], r["kind"], r["significance"], r["created_day"]) for r in rows)


def summaries_of(store):
    with store.connect() as conn:
        return dict(
            conn.execute(
                select(self_blocks.c.world_id, self_blocks.c.content).where(
                    self_blocks.c.name == "autobiography_summary"
                )
            ).all()
        )


def row_ids(store):
    with store.connect() as conn:
        return set(conn.execute(select(semantic_memories.c.memory_id)).scalars())


def test_rebuilding_day_2_restores_day_1s_snapshot_and_the_rerun_equals_a_clean_run(store, ingest, tmp_path):
    ingest(three_days())
    for day in (D1, D2, D3):
        night(store, tmp_path, day)
    clean = memory_set(store), snapshot_sets(store), narrative_set(store), summaries_of(store)
    contents = {c for _w, _t, c, _s, _o in clean[0]}
    # The data does what it is built for: day 3 deprecated day 1's fact and merged day 2's.
    assert "我不喜欢吃辣" in contents and "我喜欢吃辣" not in contents
    assert {"我喜欢喝茶", "住在杭州"} <= contents
    before_ids = row_ids(store)

    result = restore(store, D2)
    # The active set is day 1's snapshot again, id for id and fact for fact.
    assert result.snapshot_day == D1 and result.missing_from_live == {} and result.added_since == {}
    live = {m.id: m for w in ("w1", "w2") for m in _active(store, w)}
    snap = snapshot(store, "w1", D1)
    assert set(live) == set(snap) and all(live[i].content == snap[i]["content"] for i in snap)
    assert "我喜欢吃辣" in {m.content for m in live.values()}  # reactivated: day 3's deprecation undone
    assert result.reactivated == 1 and result.deprecated >= 5 and result.narratives_deprecated >= 1
    assert result.stale_days == [D2, D3]
    # Nothing deleted: every row is still there; the restore is in the versions, with why.
    assert before_ids <= row_ids(store)
    with store.connect() as conn:
        restores = (
            conn.execute(select(semantic_memory_versions).where(semantic_memory_versions.c.stage == str(Stage.REBUILD)))
            .mappings()
            .all()
        )
        stale = conn.execute(
            select(func.count()).select_from(sleep_runs).where(sleep_runs.c.status == "stale", sleep_runs.c.day < D2)
        ).scalar_one()
    assert {r["day"] for r in restores} == {D2} and stale == 0
    spicy = next(r for r in restores if r["content"] == "我喜欢吃辣")
    assert spicy["op"] == "restore" and spicy["status"] == "active"
    assert spicy["reason"].startswith("rebuild of 2026-03-03: reactivated to its state before the sleep of 2026-03-03")
    undone = [r for r in restores if r["op"] == "deprecate"]
    assert undone and all(r["reason"].startswith("rebuild of 2026-03-03: created by ") for r in undone)
    # Days 2 and 3 are stale: their audits fail; deep sleep of day 3 refuses until day 2 is run again.
    assert "stale" in stage_audit(store, Stage.DEEP, D3).problems[0]
    with pytest.raises(StageFailure, match="light sleep of 2026-03-04 is stale"):
        run_deep_sleep(ctx_for(store, tmp_path, True), D3)

    for day in (D2, D3):  # the day, then every later day, in order
        night(store, tmp_path, day, force=True)
    # Day 2's snapshot too is a clean run's: its deep sleep saw day 1's 我喜欢吃辣 again (on the live
    # set, without the restore, day 3's deprecation hid it and the snapshot of day 2 lacked it).
    assert (memory_set(store), snapshot_sets(store), narrative_set(store), summaries_of(store)) == clean
    assert all(not stage_audit(store, s, d).problems for s in _STAGES for d in (D1, D2, D3))
    assert before_ids <= row_ids(store)  # the re-run made new rows (new ids), deleted none


_STAGES = (Stage.LIGHT, Stage.DEEP, Stage.AUTOBIOGRAPHY)


def _active(store, world):
    with store.connect() as conn:
        return mem.load_active(conn, [world]).get(world, [])


def test_a_rebuild_keeps_what_remember_wrote_since_and_twice_is_the_same(store, ingest, tmp_path):
    ingest(three_days())
    for day in (D1, D2):
        night(store, tmp_path, day)
    ingest(conversation("w1", "s-live", cst(2026, 3, 9, 15), ["我养了一只猫"]))  # a later day, not rebuilt here
    kept = mem.remember(store, "w1", "s-live", "用户养了一只猫", at=cst(2026, 3, 3, 15))
    night(store, tmp_path, D3)
    clean = memory_set(store)
    first = restore(store, D2)
    assert first.added_since == {"w1": [kept]}  # not a sleep product: it stays
    after_first = memory_set(store)
    second = restore(store, D2)  # rebuilding the same day again puts back the same set
    assert memory_set(store) == after_first and second.reactivated == second.deprecated == 0
    for day in (D2, D3):
        night(store, tmp_path, day, force=True)
    assert memory_set(store) == clean


def test_a_forced_rerun_never_reuses_the_id_of_a_deprecated_memory(store, ingest, tmp_path):
    """Light sleep of day 1 asked again is a rebuild of day 1: its two facts are undone (deprecated)
    and made again in the same calls and order; the ids they would get are taken, so they get others."""
    ingest(three_days())
    for day in (D1, D2, D3):
        night(store, tmp_path, day)
    before = row_ids(store)
    again = run_light_sleep(ctx_for(store, tmp_path, True), D1)
    assert again.created == 2 and again.restored == 1
    with store.connect() as conn:
        rows = conn.execute(select(semantic_memories).where(semantic_memories.c.content == "我喜欢吃辣")).mappings()
        rows = sorted(rows, key=lambda r: r["memory_id"] in before)
    assert [(r["memory_id"] in before, r["status"]) for r in rows] == [(False, "active"), (True, "deprecated")]


def test_rebuild_command_restores_runs_through_and_says_what_stays_stale(env, pg_url):  # noqa: F811

    store = _three_days_slept(env, pg_url)
    clean = memory_set(store)
    assert runner.invoke(app, ["sleep", "rebuild", "2026-03-03", "--through", "2026-03-01"]).exit_code == 2
    bad = runner.invoke(app, ["sleep", "rebuild", "2026-3-3"])
    assert bad.exit_code == 2 and "day '2026-3-3'" in bad.output
    assert memory_set(store) == clean  # refused: nothing restored

    only = runner.invoke(app, ["sleep", "rebuild", "2026-03-03"])
    assert only.exit_code == 0, only.output
    assert "restored semantic memory to before the sleep of 2026-03-03: 1 reactivated" in only.output
    assert "sleep 2026-03-03: 1 day(s) in one run" in only.output
    assert "2026-03-03  light done, deep done, autobiography done" in only.output
    assert "still stale: 2026-03-04 .. 2026-03-04" in only.output.replace("\n", " ")
    assert stage_audit(store, Stage.DEEP, D3).problems and memory_set(store) != clean
    # The UI says so too: the rebuild's run observes each place left stale after it.
    from memory_pipeline import operations

    instance = operations.get_instance()
    observed = {
        (key, r.event_log_entry.dagster_event.event_specific_data.asset_observation.partition)
        for key in ("sleep_light_sleep", "sleep_deep_sleep", "sleep_autobiography")
        for r in instance.fetch_observations(AssetKey(key), limit=10).records
    }
    assert observed == {(k, "2026-03-04") for k in ("sleep_light_sleep", "sleep_deep_sleep", "sleep_autobiography")}

    through = runner.invoke(app, ["sleep", "rebuild", "2026-03-03", "--through", "2026-03-04"])
    assert through.exit_code == 0, through.output
    assert "still stale" not in through.output
    assert memory_set(store) == clean and not stage_audit(store, Stage.DEEP, D3).problems
    # A backfill after a plain rebuild does the same: the stale day is run again, not reused.
    assert runner.invoke(app, ["sleep", "rebuild", "2026-03-03"]).exit_code == 0
    again = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-04", "--to", "2026-03-04"])
    assert again.exit_code == 0 and memory_set(store) == clean


def test_restore_is_one_transaction(store, ingest, tmp_path, monkeypatch):
    """A failure midway (here: writing the narratives) leaves semantic memory and the records as they were."""
    ingest(three_days())
    for day in (D1, D2, D3):
        night(store, tmp_path, day)
    before = memory_set(store), row_ids(store)
    with store.connect() as conn:
        versions = conn.execute(select(func.count()).select_from(semantic_memory_versions)).scalar_one()

    def boom(conn, changes):
        raise RuntimeError("disk full")

    monkeypatch.setattr("memory_pipeline.sleep.autobiography.write_narratives", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        restore(store, D2)
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(semantic_memory_versions)).scalar_one() == versions
        assert not conn.execute(select(sleep_runs.c.day).where(sleep_runs.c.status == "stale")).all()
    assert (memory_set(store), row_ids(store)) == before


def test_a_rebuild_of_a_day_that_cannot_run_next_is_refused_before_anything_is_written(env, pg_url):  # noqa: F811
    """Days 1-3 done; light sleep of day 2 re-run for w2 alone (forced) leaves day 2's deep sleep and
    autobiography and all of day 3 stale. A rebuild of day 3 could not run day 3 (day 2 comes first):
    it is refused naming what it waits for, exit 1, nothing restored (w1's day-3 contradiction stays
    resolved) and no record changed."""

    store = _three_days_slept(env, pg_url)
    run_light_sleep(ctx_for(store, env, force=True), D2, ["w2"])

    def state():
        with store.connect() as conn:
            records = set(
                conn.execute(
                    select(sleep_runs.c.stage, sleep_runs.c.day, sleep_runs.c.world_id, sleep_runs.c.status)
                ).all()
            )
            versions = conn.execute(select(func.count()).select_from(semantic_memory_versions)).scalar_one()
        return memory_set(store), records, versions, narrative_set(store), summaries_of(store)

    before = state()
    assert ("w1", "preference", "我不喜欢吃辣") in {m[:3] for m in before[0]}
    assert ("w1", "preference", "我喜欢吃辣") not in {m[:3] for m in before[0]}
    assert ("autobiography_cron", D2, "*", "stale") in before[1]
    refused = runner.invoke(app, ["sleep", "rebuild", "2026-03-04"])
    assert refused.exit_code == 1, refused.output
    text = " ".join(refused.output.split())
    assert "rebuild of 2026-03-04 refused" in text and "autobiography of 2026-03-03 is stale" in text
    assert "nothing restored" in text and "restored semantic memory" not in text
    assert state() == before
    with pytest.raises(StageFailure, match="rebuild of 2026-03-04 refused: light sleep 2026-03-04: autobiography"):
        restore(store, D3)
    assert state() == before


def test_a_diff_after_a_failed_rebuild_says_its_snapshot_is_stale(env, pg_url, monkeypatch):  # noqa: F811
    """Days 1-3 done; a rebuild of day 2 restores semantic memory, then its deep sleep fails for w1.
    Day 2's snapshot is still the undone run's: `sleep diff` shows it marked stale, names the world,
    the failure and its time, and exits 1; once the day is run again the diff is current (exit 0)."""
    from datetime import datetime

    from memory_pipeline.sleep.snapshots import diff

    store = _three_days_slept(env, pg_url)
    good = runner.invoke(app, ["sleep", "diff", "w1", "2026-03-02", "2026-03-03"])
    assert good.exit_code == 0 and "stale" not in good.output.lower()
    created = diff(store, "w1", D1, D2).created
    assert created

    def down(*args, **kwargs):
        raise RuntimeError("provider went away")

    with monkeypatch.context() as m:
        m.setattr("memory_pipeline.sleep.deep._run_batch", down)
        failed = runner.invoke(app, ["sleep", "rebuild", "2026-03-03"])
    assert failed.exit_code == 1, failed.output
    assert f"deep_sleep of world w1, day {D2}: nothing of this attempt was written" in failed.output, failed.output
    with store.connect() as conn:
        r = sleep_runs.c
        status, detail = conn.execute(
            select(r.status, r.detail).where(r.stage == str(Stage.DEEP), r.day == D2, r.world_id == "w1")
        ).one()
    assert status == "failed"
    # The restore undid day 2's run: its snapshot's new memories are no longer active.
    assert not set(created) & {m.id for m in _active(store, "w1")}

    shown = runner.invoke(app, ["sleep", "diff", "w1", "2026-03-02", "2026-03-03"])
    assert shown.exit_code == 1, shown.output
    text = " ".join(shown.output.split())
    when = datetime.fromisoformat(detail["failed_attempt"]["at"]).astimezone(CST).isoformat(timespec="seconds")
    assert "world w1: the snapshot of 2026-03-03 is stale (deep sleep failed)" in text
    assert "the last rebuild failed: it restored semantic memory at" in text
    assert f"then deep sleep of 2026-03-03 for w1 failed at {when} (RuntimeError: provider went away)" in text
    assert "the diff shows the snapshot of the last successful run" in text.lower()
    assert all(mid in text for mid in created)  # the diff is still shown, marked
    stale = diff(store, "w1", D1, D2)
    assert stale.created == created  # still the snapshot's content ...
    ((side,),) = [stale.stale]  # ... flagged: day 2's, its deep sleep failed, when, why
    assert (side.world_id, side.day, side.status) == ("w1", D2, "failed")
    assert side.failure is not None and side.failure.stage == str(Stage.DEEP) and side.failure.day == D2
    assert side.failure.at.isoformat() == detail["failed_attempt"]["at"]
    assert side.written_at is not None and side.written_at < side.failure.at
    assert side.restored_at is not None and side.written_at < side.restored_at <= side.failure.at

    # w2 never ran again (w1 failed first): stale, not failed; the rebuild's failure is the day's.
    other = runner.invoke(app, ["sleep", "diff", "w2", "2026-03-02", "2026-03-03"])
    text = " ".join(other.output.split())
    assert other.exit_code == 1 and "world w2: the snapshot of 2026-03-03 is stale (deep sleep stale)" in text
    assert "the last rebuild failed: it restored semantic memory at" in text
    assert f"then deep sleep of 2026-03-03 for w1 failed at {when} (RuntimeError: provider went away)" in text
    assert "`memory-pipeline sleep backfill --from 2026-03-03 --to 2026-03-03`" in text

    # What the note says to run makes the diff current again.
    again = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-03", "--to", "2026-03-03"])
    assert again.exit_code == 0, again.output
    current = runner.invoke(app, ["sleep", "diff", "w1", "2026-03-02", "2026-03-03"])
    assert current.exit_code == 0 and "stale" not in current.output.lower()
    assert not diff(store, "w1", D1, D2).stale


def test_a_stale_snapshots_note_names_the_backfill_from_the_first_stale_day(env, pg_url):  # noqa: F811
    """A rebuild of day 1 leaves days 2 and 3 stale. `sleep diff` of days 1..3 marks day 3's snapshot
    stale and names the backfill from day 2, the first stale night: from day 3 (what it named) the
    run fails, as a night runs only after the nights before it. Run as named, the diff is current."""
    _three_days_slept(env, pg_url)
    assert runner.invoke(app, ["sleep", "rebuild", "2026-03-02"]).exit_code == 0
    shown = runner.invoke(app, ["sleep", "diff", "w1", "2026-03-02", "2026-03-04"])
    text = " ".join(shown.output.split())
    assert shown.exit_code == 1 and "world w1: the snapshot of 2026-03-04 is stale (deep sleep stale)" in text, text
    assert "`memory-pipeline sleep backfill --from 2026-03-03 --to 2026-03-04` runs it again" in text, text
    again = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-03", "--to", "2026-03-04"])
    assert again.exit_code == 0, again.output
    current = runner.invoke(app, ["sleep", "diff", "w1", "2026-03-02", "2026-03-04"])
    assert current.exit_code == 0 and "stale" not in current.output.lower(), current.output


def test_a_rebuild_tells_a_sessions_facts_in_a_clean_runs_order(store, ingest, tmp_path):
    """Facts of one session share their time, and a re-run gives them new ids: the offline rules
    broke that tie by id, so a rebuilt narrative told them in another order than a clean run (and a
    merged memory listed its sessions in another order). By content, the rebuild is the clean run."""
    lines = [
        "I painted a lighthouse at dawn with cobalt blue",
        "ok",
        "My sister adopted a greyhound called Juniper",
        "nice",
        "We booked a ferry to Orkney for the solstice",
        "great",
        "I started learning the cello with a retired violist",
        "cool",
        "The bakery downstairs sells cardamom buns on Fridays",
        "yum",
    ]
    ingest(conversation("w1", "s-1", cst(2026, 3, 2, 9), lines) + conversation("w1", "s-2", cst(2026, 3, 3, 9), lines))
    for day in (D1, D2):
        night(store, tmp_path, day)

    def told():
        with store.connect() as conn:
            narratives = sorted(
                conn.execute(
                    select(autobiographical_memories.c.narrative).where(autobiographical_memories.c.status == "active")
                ).scalars()
            )
            sessions = sorted(
                tuple(s)
                for s in conn.execute(
                    select(semantic_memories.c.source_sessions).where(semantic_memories.c.status == "active")
                ).scalars()
            )
        return narratives, sessions, summaries_of(store)

    clean = told()
    assert clean[0] and clean[0][0].count("; ") >= 1  # a narrative of two facts of one session (one time)
    assert ("s-1", "s-2") in clean[1]  # day 2's deep sleep merged a fact said in both sessions
    restore(store, D1)
    for day in (D1, D2):
        night(store, tmp_path, day, force=True)
    assert told() == clean
