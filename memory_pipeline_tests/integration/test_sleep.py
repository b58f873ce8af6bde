"""Seed 003 on PostgreSQL: light sleep (prompt, truncation, idempotence), deep sleep (three rounds,
byte-identical message 1, message 1.5, size bands, round logs, snapshots and diffs, order),
autobiography phases A/B, the real-model path with scripted (malformed) tool calls, bad input."""

import json
from datetime import date, timedelta

import pytest
from sqlalchemy import func, select

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.sleep import memory as mem
from memory_pipeline.sleep.autobiography import run_autobiography
from memory_pipeline.sleep.config import SleepConfig
from memory_pipeline.sleep.context import SleepContext, StageFailure
from memory_pipeline.sleep.deep import run_deep_sleep
from memory_pipeline.sleep.light import build_prompt, day_sessions, run_light_sleep, system_for
from memory_pipeline.sleep.logic import MemoryState, Stage
from memory_pipeline.sleep.reports import stale_positions
from memory_pipeline.sleep.snapshots import diff, snapshot
from memory_pipeline.sleep.tables import (
    autobiographical_memories,
    self_blocks,
    semantic_memories,
    semantic_memory_snapshots,
    semantic_memory_versions,
    sleep_runs,
)
from memory_pipeline_tests.conftest import CST, conversation, cst, event
from memory_pipeline_tests.fake_openai import FakeOpenAI

D = date(2026, 3, 2)


def ctx_for(store, tmp_path, llm=None, **cfg):
    cfg.setdefault("log_dir", str(tmp_path / "logs"))
    return SleepContext(
        store, llm or LLMClient(store, asset="sleep_test", partition="p"), SleepConfig(**cfg).validate(), CST
    )


def count(store, table, *where):
    with store.connect() as conn:
        return conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()


def active(store, world="w1"):
    with store.connect() as conn:
        return mem.load_active(conn, [world]).get(world, [])


def day_events():
    return (
        conversation(
            "w1", "s-1", cst(2026, 3, 2, 9), ["我喜欢吃辣", "好的", "tomatoes garden planting tomatoes", "nice"]
        )
        + conversation(
            "w1", "s-2", cst(2026, 3, 2, 23, 50), ["marathon training marathon", "ok", "late marathon", "sure"]
        )
        + [event("w1", "s-1", "tool", '{"ok": true}', cst(2026, 3, 2, 9, 30))]
        + conversation("w1", "dbg", cst(2026, 3, 2, 10), ["debug stuff"], debug=True)
        + conversation("w2", "s-9", cst(2026, 3, 1, 10), ["other day only"])
    )


def test_light_sleep_prompt_sessions_midnight_and_three_messages(store, ingest, tmp_path):
    ingest(day_events())
    ctx = ctx_for(store, tmp_path)
    mem.set_self_block(store, "w1", "identity", "我是 w1", ctx.cfg.block_names(), "test")
    mem.pin_fact(store, "w1", "用户叫小王", priority=5)
    with store.connect() as conn:
        sessions = day_sessions(conn, D, ctx)
        blocks, pinned = mem.load_self_layer(conn, ["w1"], 20)
    assert sorted(sessions) == ["w1"]  # w2 spoke on the 1st only; debug never counts
    assert [s.session_id for s in sessions["w1"]] == ["s-1", "s-2"]
    # s-2 starts 23:50 and runs past midnight: only D's part (23:50, 23:53, 23:56, 23:59).
    assert len(sessions["w1"][1].lines) == 4
    assert all(role in ("user", "assistant") for s in sessions["w1"] for _, role, _ in s.lines)
    state = MemoryState("w1", [], "t")
    p = build_prompt(D, sessions["w1"], state, system_for(ctx, blocks, pinned, "w1"), ctx)
    assert len(p.messages) == 3 and all(m["role"] == "user" for m in p.messages)
    assert (
        "## session s-1" in p.messages[0]["content"]
        and "[2026-03-02 09:00] user: 我喜欢吃辣" in p.messages[0]["content"]
    )
    assert '{"ok": true}' not in p.messages[0]["content"]
    assert "我是 w1" in p.system and "- 用户叫小王" in p.system and "## autobiography_summary" in p.system
    assert "create_semantic_memory" in p.messages[2]["content"] and "merge" not in p.messages[2]["content"]


def test_light_sleep_truncates_oldest_updated_sessions_with_the_marker(store, ingest, tmp_path):
    events = []
    for i in range(6):
        events += conversation("w1", f"s-{i}", cst(2026, 3, 2, 8 + i), ["word " * 300, "ok"])
    ingest(events)
    ctx = ctx_for(store, tmp_path, light_input_max_chars=6000)
    with store.connect() as conn:
        sessions = day_sessions(conn, D, ctx)["w1"]
    p = build_prompt(D, sessions, MemoryState("w1", [], "t"), "sys", ctx)
    assert p.truncated > 0 and p.messages[0]["content"].endswith(f"[已截断 {p.truncated} 个 session]")
    assert p.sessions == [f"s-{i}" for i in range(6 - len(p.sessions), 6)]  # the newest kept
    assert p.input_chars <= 6000


def test_light_sleep_keeps_every_session_that_fits_when_the_newest_alone_is_over_budget(store, ingest, tmp_path):
    """Two 99k-character messages in the newest session and a small older one, at the seed's 120k:
    the small session is kept, the big one cut to its newest message (marked); the model is asked."""
    big = [event("w1", "t-big", "user", "x " * 49_500, cst(2026, 3, 2, 20, k), mid=f"t-big-{k}") for k in (2, 3)]
    ingest(conversation("w1", "t-small", cst(2026, 3, 2, 9), ["I like green tea"]) + big)
    ctx = ctx_for(store, tmp_path)
    with store.connect() as conn:
        sessions = day_sessions(conn, D, ctx)["w1"]
    p = build_prompt(D, sessions, MemoryState("w1", [], "t"), "sys", ctx)
    m1 = p.messages[0]["content"]
    assert p.sessions == ["t-small", "t-big"] and p.truncated == 0 and p.cut == {"t-big": 1}
    assert "I like green tea" in m1 and "[本 session 超出整个预算：仅保留当日最新 1 条消息，省略更早的 1 条]" in m1
    assert "[2026-03-02 20:03] user: x x" in m1 and "[2026-03-02 20:02]" not in m1
    assert p.input_chars <= 120_000
    result = run_light_sleep(ctx, D)
    assert result.llm_calls >= 1 and any(m.content == "I like green tea" for m in active(store))
    with store.connect() as conn:
        state = conn.execute(select(sleep_runs).where(sleep_runs.c.world_id == "w1")).mappings().one()
    assert (state["sessions"], state["sessions_truncated"], state["detail"]["sessions_cut"]) == (2, 0, {"t-big": 1})


def test_light_sleep_skips_a_session_that_does_not_fit_and_keeps_older_ones_that_do(store, ingest, tmp_path):
    ingest(
        conversation("w1", "s-old", cst(2026, 3, 2, 8), ["tiny old"])
        + conversation("w1", "s-mid", cst(2026, 3, 2, 9), ["word " * 500])
        + conversation("w1", "s-new", cst(2026, 3, 2, 10), ["word " * 500])
    )
    ctx = ctx_for(store, tmp_path, light_input_max_chars=4200)
    with store.connect() as conn:
        sessions = day_sessions(conn, D, ctx)["w1"]
    p = build_prompt(D, sessions, MemoryState("w1", [], "t"), "sys", ctx)
    # s-new fits; s-mid then does not (dropped, oldest-updated first after the newest); s-old still fits.
    assert p.sessions == ["s-old", "s-new"] and p.truncated == 1 and p.cut == {}
    assert p.messages[0]["content"].endswith("[已截断 1 个 session]") and p.input_chars <= 4200


def test_light_sleep_never_asks_the_model_about_nothing(store, ingest, tmp_path):
    ingest([event("w1", "s-huge", "user", "y " * 2500, cst(2026, 3, 2, 9))])  # one message over the budget
    with FakeOpenAI() as server:
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        result = run_light_sleep(ctx_for(store, tmp_path, llm=llm, light_input_max_chars=4000), D)
        assert server.requests == []
    assert (result.llm_calls, result.sessions, result.sessions_truncated) == (0, 0, 1)
    with store.connect() as conn:
        state = conn.execute(select(sleep_runs).where(sleep_runs.c.world_id == "w1")).mappings().one()
    assert state["llm_calls"] == 0 and state["detail"]["reply"].startswith("not asked: no session fits")


def test_a_light_sleep_fact_is_observed_at_its_sessions_last_message_of_the_day(store, ingest, tmp_path):
    ingest(
        conversation("w1", "s-1", cst(2026, 3, 2, 9), ["我喜欢吃辣", "好"])
        + conversation("w1", "s-2", cst(2026, 3, 2, 15), ["我喜欢喝茶", "好", "再见", "嗯"])
    )
    run_light_sleep(ctx_for(store, tmp_path), D)  # the offline model passes no observed_at
    observed = {m.content: m.observed_at for m in active(store) if m.type == "preference"}
    assert observed == {"我喜欢吃辣": cst(2026, 3, 2, 9, 3), "我喜欢喝茶": cst(2026, 3, 2, 15, 9)}


def test_deep_sleep_never_asks_about_an_empty_set(store, tmp_path):
    _seed(store, "w1", [("world", "A；B", ["s-1"], "2026-03-03T10:00:00+08:00")], D + timedelta(days=1))
    _light_done(store, tmp_path)
    with FakeOpenAI() as server:
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        result = run_deep_sleep(ctx_for(store, tmp_path, llm=llm), D)  # w1's memories are all from D+1
        assert server.requests == []
    assert result.llm_calls == 0 and result.rounds == {} and result.worlds == 0
    with store.connect() as conn:  # nothing as of D: no snapshot and no record of w1 for D
        assert conn.execute(select(sleep_runs.c.day).where(sleep_runs.c.world_id == "w1")).all() == []
        assert conn.execute(select(semantic_memory_snapshots.c.day)).all() == []


def test_light_sleep_writes_memories_with_versions_and_is_idempotent(store, ingest, tmp_path):
    ingest(day_events())
    ctx = ctx_for(store, tmp_path)
    first = run_light_sleep(ctx, D)
    assert first.created >= 3 and first.rejected == 0
    rows = active(store)
    assert {m.type for m in rows} == {"preference", "experience"}
    pref = next(m for m in rows if m.type == "preference")
    assert pref.content == "我喜欢吃辣" and pref.source_sessions == ["s-1"]
    assert count(store, semantic_memory_versions) == len(rows)
    again = run_light_sleep(ctx, D)
    assert again.reused == 1 and again.llm_calls == 0 and len(active(store)) == len(rows)
    # A forced re-run is a rebuild of the day: its facts are undone and made again, never duplicated.
    forced = run_light_sleep(SleepContext(store, ctx.llm, ctx.cfg, CST, force=True), D)
    assert forced.created == len(rows) and forced.restored == 1
    assert sorted(m.content for m in active(store)) == sorted(m.content for m in rows)
    with store.connect() as conn:
        state = (
            conn.execute(select(sleep_runs).where(sleep_runs.c.stage == "light_sleep", sleep_runs.c.world_id == "w1"))
            .mappings()
            .one()
        )
    assert state["sessions"] == 2 and state["status"] == "done"


def _seed(store, world, items, day=D):
    """Active memories written as light sleep would (one batch)."""
    state = MemoryState(world, [], salt="seed")
    from memory_pipeline.sleep.logic import CREATE, LIGHT_TOOLS, Rules

    rules = Rules(Stage.LIGHT, LIGHT_TOOLS, cst(2026, 3, 2, 12))
    changes = []
    for i, (mtype, content, sessions, at) in enumerate(items):
        changes += state.apply(
            {
                "id": f"c{i}",
                "name": CREATE,
                "arguments": {"type": mtype, "content": content, "source_sessions": sessions, "observed_at": at},
            },
            rules,
        )
    with store.begin() as conn:
        mem.write_changes(conn, changes, mem.Provenance(Stage.LIGHT, day))
    return [c.memory.id for c in changes]


def _light_done(store, tmp_path, day=D):
    run_light_sleep(ctx_for(store, tmp_path), day)  # no sessions: records the day as done


def test_deep_sleep_three_rounds_identical_message_one_logs_and_snapshot(store, tmp_path):
    ids = _seed(
        store,
        "w1",
        [
            ("preference", "不喜欢吃辣", ["s-1"], "2026-02-01T10:00:00+08:00"),
            ("preference", "喜欢吃辣", ["s-2"], "2026-03-02T10:00:00+08:00"),
            ("world", "女儿属虎；住在杭州", ["s-1"], "2026-03-01T10:00:00+08:00"),
            ("world", "张三在上海工作", ["s-abc"], "2026-03-01T09:00:00+08:00"),
            ("world", "张三在上海工作。", ["s-def"], "2026-02-01T09:00:00+08:00"),
            ("preference", "喜欢苹果", ["s-1"], "2026-03-01T10:00:00+08:00"),
        ],
    )
    _light_done(store, tmp_path)
    ctx = ctx_for(store, tmp_path)
    result = run_deep_sleep(ctx, D)
    records = result.rounds["w1"]
    assert [r.round for r in records] == ["contradiction", "split", "merge"]
    assert len({r.message_one_sha for r in records}) == 1  # byte-identical message 1 in every round
    assert records[0].prior_changes == 0 and records[1].prior_changes > 0
    live = {m.content: m for m in active(store)}
    assert "不喜欢吃辣" not in live and "喜欢吃辣" in live  # older contradiction deprecated
    assert {"女儿属虎", "住在杭州"} <= set(live) and "女儿属虎；住在杭州" not in live  # split
    merged = [m for m in live.values() if m.content.startswith("张三在上海工作")]
    assert len(merged) == 1 and sorted(merged[0].source_sessions) == ["s-abc", "s-def"]
    assert merged[0].observed_at == cst(2026, 2, 1, 9)
    assert "喜欢苹果" in live
    # Nothing deleted: every original row is still there, deprecated or merged.
    assert count(store, semantic_memories, semantic_memories.c.memory_id.in_(ids)) == len(ids)
    with store.connect() as conn:
        src = (
            conn.execute(select(semantic_memories).where(semantic_memories.c.memory_id.in_(ids[3:5]))).mappings().all()
        )
    assert {r["merged_into"] for r in src} == {merged[0].id}
    logs = sorted((tmp_path / "logs" / "w1").glob("*.json"))
    assert [p.name for p in logs] == [
        "deep_sleep_2026-03-02_1_contradiction.json",
        "deep_sleep_2026-03-02_2_split.json",
        "deep_sleep_2026-03-02_3_merge.json",
    ]
    doc = json.loads(logs[2].read_text(encoding="utf-8"))
    assert {"day", "round", "active_count", "prior_changes", "tool_calls", "summary", "change_log"} <= set(doc)
    assert doc["change_log"].startswith("# 增量变更（以本内容为准）")
    assert count(store, semantic_memory_snapshots, semantic_memory_snapshots.c.day == D) == len(live)
    # Every change is a version row, with its round.
    with store.connect() as conn:
        rounds = conn.execute(
            select(semantic_memory_versions.c.round, func.count())
            .where(semantic_memory_versions.c.stage == "deep_sleep", semantic_memory_versions.c.day == D)
            .group_by(semantic_memory_versions.c.round)
        ).all()
    assert dict(rounds) == {r.round: r.applied for r in records} and sum(n for _r, n in rounds) == result.changes
    # Message 1.5 is cumulative: round 3 still shows round 1's deprecation and round 2's split.
    assert "已过期/废弃（新事实取代）" in records[2].change_log and "已过期/废弃（已拆分）" in records[2].change_log
    round_one = [ln for ln in records[0].change_log.splitlines() if ln.startswith("f-")]
    assert round_one and all(ln in records[2].change_log.splitlines() for ln in round_one)


def test_one_world_over_300k_is_refused_alone_before_any_call_and_every_other_world_sleeps(store, tmp_path):
    from memory_pipeline.sleep.reports import stage_audit
    from memory_pipeline.sleep.reports import status as sleep_status

    big = [("world", f"fact {i} " + "x" * 900, [f"s-{i}"], "2026-03-01T10:00:00+08:00") for i in range(340)]
    _seed(store, "w-big", big)
    _seed(store, "w1", [("world", "女儿属虎；住在杭州", ["s-1"], "2026-03-01T10:00:00+08:00")])
    _seed(store, "w1", [("experience", "第一次跑完半马", ["s-1"], "2026-03-01T10:00:00+08:00")])
    _seed(store, "w1", [("experience", "在海边看日出", ["s-2"], "2026-03-02T06:00:00+08:00")])
    _light_done(store, tmp_path)
    with FakeOpenAI() as server:
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        versions = count(store, semantic_memory_versions, semantic_memory_versions.c.world_id == "w-big")
        result = run_deep_sleep(ctx_for(store, tmp_path, llm=llm), D)
        sent = json.dumps(server.requests, ensure_ascii=False)
    assert set(result.refused) == {"w-big"} and "over the 300000 limit" in result.refused["w-big"]
    assert "fact 0 " not in sent and "女儿属虎" in sent  # no call saw the oversized world; w1's did happen
    assert result.worlds == 1 and len(result.rounds["w1"]) == 3
    # The oversized world: nothing written (no change, no snapshot row, no round log) ...
    assert count(store, semantic_memory_versions, semantic_memory_versions.c.world_id == "w-big") == versions
    assert len(active(store, "w-big")) == 340 and not (tmp_path / "logs" / "w-big").exists()
    assert count(store, semantic_memory_snapshots, semantic_memory_snapshots.c.world_id == "w-big") == 0
    assert count(store, semantic_memory_snapshots, semantic_memory_snapshots.c.world_id == "w1") == 3
    # ... and reported: its state record, the check's audit, `sleep status`.
    with store.connect() as conn:
        runs = dict(
            conn.execute(
                select(sleep_runs.c.world_id, sleep_runs.c.status).where(sleep_runs.c.stage == "deep_sleep")
            ).all()
        )
        detail = conn.execute(select(sleep_runs.c.detail).where(sleep_runs.c.world_id == "w-big")).scalar_one()
    assert runs == {"*": "done", "w1": "done", "w-big": "refused"} and detail["message_one_chars"] > 300_000
    (problem,) = stage_audit(store, Stage.DEEP, D).problems
    assert problem.startswith("deep_sleep 2026-03-02 w-big: refused") and "characters, over the 300000" in problem
    (listed,) = sleep_status(store)["refused"]
    assert (listed["world_id"], listed["day"]) == ("w-big", D) and "over the 300000 limit" in listed["reason"]
    # The autobiography of the other worlds runs, and so does the next day's deep sleep.
    auto = run_autobiography(ctx_for(store, tmp_path), D)
    assert auto.narratives_created == 1 and auto.per_world["w1"]["narratives_created"] == 1
    d2 = D + timedelta(days=1)
    _light_done(store, tmp_path, d2)
    assert set(run_deep_sleep(ctx_for(store, tmp_path), d2).refused) == {"w-big"}


def test_deep_sleep_batches_by_type_between_100k_and_300k(store, tmp_path):
    items = [
        ("world" if i % 2 else "experience", f"fact {i} " + "y" * 900, [f"s-{i}"], "2026-03-01T10:00:00+08:00")
        for i in range(150)
    ]
    _seed(store, "w1", items)
    _light_done(store, tmp_path)
    result = run_deep_sleep(ctx_for(store, tmp_path), D)
    assert result.batched == ["w1"]
    assert sorted({r.batch_type for r in result.rounds["w1"]}) == ["experience", "world"]
    # Each batch runs all three rounds on its own message 1, byte-identical across them.
    shas = {}
    for r in result.rounds["w1"]:
        shas.setdefault(r.batch_type, []).append((r.round, r.message_one_sha))
    assert {t: [rd for rd, _ in v] for t, v in shas.items()} == {
        t: ["contradiction", "split", "merge"] for t in ("experience", "world")
    }
    assert all(len({h for _, h in v}) == 1 for v in shas.values())
    assert shas["experience"][0][1] != shas["world"][0][1]
    doc = json.loads(
        (tmp_path / "logs" / "w1" / "deep_sleep_2026-03-02_1_contradiction.json").read_text(encoding="utf-8")
    )
    assert [b["batch_type"] for b in doc["batches"]] == ["experience", "world"]


def test_deep_sleep_needs_light_sleep_and_the_previous_day_and_snapshots_diff(store, tmp_path):
    _seed(store, "w1", [("world", "A；B", ["s-1"], "2026-03-01T10:00:00+08:00")])
    with pytest.raises(StageFailure, match="light sleep of 2026-03-02 has not run"):
        run_deep_sleep(ctx_for(store, tmp_path), D)
    _light_done(store, tmp_path)
    run_deep_sleep(ctx_for(store, tmp_path), D)
    d2, d3 = D + timedelta(days=1), D + timedelta(days=2)
    # Days go in order: a later day's light sleep waits for the day before it to be done.
    with pytest.raises(StageFailure, match="light sleep 2026-03-04: autobiography of 2026-03-03 has not run"):
        _light_done(store, tmp_path, d3)
    with pytest.raises(StageFailure, match="light sleep of 2026-03-04 has not run"):
        run_deep_sleep(ctx_for(store, tmp_path), d3)
    run_autobiography(ctx_for(store, tmp_path), D)
    _seed(
        store,
        "w1",
        [("world", "C", ["s-2"], "2026-03-03T10:00:00+08:00"), ("world", "C", ["s-3"], "2026-03-03T11:00:00+08:00")],
        d2,
    )
    _light_done(store, tmp_path, d2)
    run_deep_sleep(ctx_for(store, tmp_path), d2)
    change = diff(store, "w1", D, d2)
    assert len(change.created) == 1 and len(change.deprecated) == 0 and change.merged == {}
    # Deep sleep of D asked again is a rebuild of D from its deep sleep: the places after it turn stale.
    rebuilt = run_deep_sleep(SleepContext(store, LLMClient(store), ctx_for(store, tmp_path).cfg, CST, force=True), D)
    assert rebuilt.restored == 1 and rebuilt.stale_days == [D, d2]
    assert {p.stage for p in stale_positions(store, D)} == {Stage.AUTOBIOGRAPHY, Stage.LIGHT, Stage.DEEP}


def test_autobiography_phase_a_and_b(store, tmp_path):
    _seed(
        store,
        "w1",
        [
            ("experience", "第一次跑完半马", ["s-1"], "2026-03-01T10:00:00+08:00"),
            ("imprint", "在海边看日出", ["s-2"], "2026-03-02T06:00:00+08:00"),
            ("experience", "很久以前的事", ["s-3"], "2026-02-01T10:00:00+08:00"),  # outside the 7 days
        ],
    )
    ctx = ctx_for(store, tmp_path)
    first = run_autobiography(ctx, D)
    assert first.narratives_created == 1
    with store.connect() as conn:
        (row,) = conn.execute(select(autobiographical_memories)).mappings().all()
        block = conn.execute(select(self_blocks).where(self_blocks.c.name == "autobiography_summary")).mappings().one()
    assert row["kind"] == "milestone" and "很久以前的事" not in row["narrative"] and len(row["source_memory_ids"]) == 2
    assert block["updated_by"] == "autobiography_cron" and "第一次跑完半马" in block["content"]
    # The next day, nothing new worth recording: 0 created is a success, and phase B still runs.
    d2 = D + timedelta(days=1)
    _light_done(store, tmp_path, d2)
    run_deep_sleep(ctx, d2)
    second = run_autobiography(ctx, d2)
    assert second.narratives_created == 0 and second.summaries_written == 1 and second.llm_calls == 1
    assert count(store, autobiographical_memories) == 1


def test_real_model_malformed_tool_calls_are_rejected_logged_and_nothing_half_applied(store, tmp_path):
    ids = _seed(
        store,
        "w1",
        [("world", "x", ["s-1"], "2026-03-01T10:00:00+08:00"), ("world", "y", ["s-2"], "2026-03-01T10:00:00+08:00")],
    )
    _light_done(store, tmp_path)
    mem.set_self_block(store, "w1", "values", "诚实", SleepConfig().block_names(), "test")
    mem.pin_fact(store, "w1", "用户叫小王")
    with FakeOpenAI() as server:
        server.push(
            "tools",
            [
                ("search_semantic_memory", {"q": "x"}),  # unknown to this stage
                ("deprecate_semantic_memory", {"id": ids[0]}),  # missing reason
                ("update_semantic_memory", {"id": "f-nope", "content": "z"}),  # bad id
                ("merge_semantic_memories", {"source_ids": [ids[0]], "content": "x"}),  # a single source
                ("deprecate_semantic_memory", {"id": ids[1], "reason": "过期"}),  # valid
            ],
        )
        llm = LLMClient(
            store,
            model="openai/fake",
            api_base=server.api_base,
            api_key="k",
            max_retries=0,
            asset="sleep_deep_sleep",
            partition=D.isoformat(),
        )
        result = run_deep_sleep(ctx_for(store, tmp_path, llm=llm), D)
        sent = server.requests
    r1 = result.rounds["w1"][0]
    assert len(r1.rejected) == 4 and r1.applied == 1
    errors = " | ".join(r["error"] for r in r1.rejected)
    assert "not offered to this stage 'search_semantic_memory'" in errors and "field 'reason': missing" in errors
    assert "no memory 'f-nope'" in errors and "use update_semantic_memory" in errors
    assert [m.id for m in active(store)] == [ids[0]]
    # The rejected calls went back to the model as error results for those calls.
    tool_msgs = [m for m in sent[1]["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 5 and tool_msgs[0]["content"].startswith("error: ")
    # Message 1 (and the system prompt) identical across the rounds' first requests.
    firsts = [r for r in sent if not any(m["role"] == "tool" for m in r["messages"])]
    assert len(firsts) == 3 and len({json.dumps(r["messages"][:2]) for r in firsts}) == 1
    # The order: system (self blocks + pinned), message 1 (the JSON), message 1.5 (from round 2 on:
    # round 1 changed something), message 3 (the round's intent); message 2 is empty, not sent.
    system = firsts[0]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("# 自我层\n## identity")
    assert "## values\n诚实" in system["content"] and "- 用户叫小王" in system["content"]
    assert all(f"## {b}" in system["content"] for b in SleepConfig().block_names())
    shapes = [[m["content"].split("\n", 1)[0] for m in r["messages"][1:]] for r in firsts]
    assert shapes == [
        ["[", "# 第 1 轮：矛盾检测 + 过期标记"],
        ["[", "# 增量变更（以本内容为准）", "# 第 2 轮：拆分"],
        ["[", "# 增量变更（以本内容为准）", "# 第 3 轮：去重合并"],
    ]
    offered = [t["function"]["name"] for t in firsts[0]["tools"]]
    assert offered == [
        "create_semantic_memory",
        "update_semantic_memory",
        "deprecate_semantic_memory",
        "merge_semantic_memories",
    ]
    doc = json.loads(
        (tmp_path / "logs" / "w1" / "deep_sleep_2026-03-02_1_contradiction.json").read_text(encoding="utf-8")
    )
    assert len(doc["rejected"]) == 4 and doc["tool_calls"] == 5


def test_malformed_json_arguments_are_refused_by_name(store, tmp_path):
    ids = _seed(store, "w1", [("world", "x", ["s-1"], "2026-03-01T10:00:00+08:00")])
    _light_done(store, tmp_path)
    with FakeOpenAI() as server:
        server.script.append(("tools", [("update_semantic_memory", {"id": ids[0]})]))
        # A provider returning arguments that are not JSON: the call is refused, the round goes on.
        orig = server._completion

        def broken(text, tool_calls):
            body = orig(text, tool_calls)
            if tool_calls:
                body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"id": "f-'
            return body

        server._completion = broken
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        result = run_deep_sleep(ctx_for(store, tmp_path, llm=llm), D)
    assert "arguments are not a JSON object" in result.rounds["w1"][0].rejected[0]["error"]
    assert [m.content for m in active(store)] == ["x"]


def test_remember_and_the_explicit_delete(store, ingest):
    ingest(conversation("w1", "s-live", cst(2026, 3, 2, 14), ["我养了一只猫"]))
    mid = mem.remember(store, "w1", "s-live", "用户养了一只猫", at=cst(2026, 3, 2, 15))
    (m,) = active(store)
    assert m.id == mid and m.source_sessions == ["s-live"] and m.observed_at == cst(2026, 3, 2, 15)
    with pytest.raises(mem.InputError, match="field 'content': empty"):
        mem.remember(store, "w1", "s-live", "   ")
    with pytest.raises(mem.InputError, match="field 'session_id'"):
        mem.remember(store, "w1", "bad:id", "x")
    assert mem.delete_memory(store, "w1", mid) is True
    assert (
        active(store) == [] and count(store, semantic_memory_versions, semantic_memory_versions.c.op == "delete") == 1
    )
    assert count(store, semantic_memory_versions, semantic_memory_versions.c.content != "") == 0


def test_remember_refuses_a_session_that_is_missing_or_another_worlds(store, ingest):
    ingest(conversation("w1", "s-1", cst(2026, 3, 2, 9), ["我喜欢吃辣"]))
    for world, session in (("w2", "s-1"), ("w1", "s-nope")):
        with pytest.raises(mem.InputError, match=f"field 'session_id': no session '{session}' in world '{world}'"):
            mem.remember(store, world, session, "用户养了一只猫")
    assert count(store, semantic_memories) == 0 and count(store, semantic_memory_versions) == 0
    assert mem.remember(store, "w1", "s-1", "用户养了一只猫")


def test_the_explicit_delete_removes_the_memory_from_the_day_snapshots_too(store, tmp_path):
    ids = _seed(store, "w1", [("world", "用户的秘密", ["s-1"], "2026-03-01T10:00:00+08:00")])
    _seed(store, "w2", [("world", "w2 的事", ["s-9"], "2026-03-01T10:00:00+08:00")])
    _light_done(store, tmp_path)
    run_deep_sleep(ctx_for(store, tmp_path), D)
    assert ids[0] in snapshot(store, "w1", D)
    assert mem.delete_memory(store, "w2", ids[0]) is False  # another world's id: nothing happens
    assert ids[0] in snapshot(store, "w1", D)
    assert mem.delete_memory(store, "w1", ids[0]) is True
    with store.connect() as conn:
        contents = set(conn.execute(select(semantic_memory_snapshots.c.content)).scalars())
        versions = set(conn.execute(select(semantic_memory_versions.c.content)).scalars())
    assert "用户的秘密" not in contents and contents == {"w2 的事"}  # gone from every day it was kept in
    assert "用户的秘密" not in versions


def test_the_autobiographys_rejected_calls_are_recorded_with_their_errors(store, tmp_path):
    ids = _seed(store, "w1", [("experience", "第一次跑完半马", ["s-1"], "2026-03-01T10:00:00+08:00")])
    with FakeOpenAI() as server:
        server.push(
            "tools",
            [
                ("create_autobiographical_memory", {"narrative": " ", "significance": 3, "kind": "event"}),
                ("update_autobiographical_memory", {"id": "a-1", "narrative": "x"}),
                (
                    "create_autobiographical_memory",
                    {"narrative": "跑完了第一个半马", "significance": 4, "kind": "milestone", "source_memory_ids": ids},
                ),
            ],
        )
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        result = run_autobiography(ctx_for(store, tmp_path, llm=llm), D)
    assert (result.narratives_created, result.rejected) == (1, 2)
    with store.connect() as conn:
        detail = conn.execute(
            select(sleep_runs.c.detail).where(sleep_runs.c.stage == "autobiography_cron", sleep_runs.c.world_id == "w1")
        ).scalar_one()
    calls = detail["rejected_calls"]
    assert [c["call"]["name"] for c in calls] == ["create_autobiographical_memory", "update_autobiographical_memory"]
    assert "empty narrative is refused" in calls[0]["error"] and "unknown tool" in calls[1]["error"]


def test_light_sleep_rejects_tools_outside_its_whitelist_and_records_them(store, ingest, tmp_path):
    ingest(day_events())
    with FakeOpenAI() as server:
        server.push(
            "tools",
            [
                ("merge_semantic_memories", {"source_ids": ["f-1", "f-2"], "content": "x"}),
                ("search_semantic_memory", {"q": "辣"}),
                ("create_semantic_memory", {"type": "preference", "content": "喜欢吃辣", "source_sessions": ["s-1"]}),
                ("create_semantic_memory", {"type": "world", "content": "x", "source_sessions": ["s-elsewhere"]}),
            ],
        )
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        result = run_light_sleep(ctx_for(store, tmp_path, llm=llm), D)
        offered = [t["function"]["name"] for t in server.requests[0]["tools"]]
        roles = [m["role"] for m in server.requests[0]["messages"]]
    assert offered == ["create_semantic_memory", "update_semantic_memory", "deprecate_semantic_memory"]
    assert roles == ["system", "user", "user", "user"]
    assert result.created == 1 and result.rejected == 3
    with store.connect() as conn:
        detail = conn.execute(select(sleep_runs.c.detail).where(sleep_runs.c.world_id == "w1")).scalar_one()
    assert any("not offered to this stage 'merge_semantic_memories'" in e for e in detail["rejected_calls"])
    assert any("'s-elsewhere' is not a session of this day" in e for e in detail["rejected_calls"])


def test_sleep_never_writes_a_conversation_and_late_data_reaches_light_sleep(store, ingest, tmp_path):
    from memory_pipeline.lib.store.tables import messages
    from memory_pipeline.sleep.light import late_days

    ingest(day_events())
    before = count(store, messages)
    ctx = ctx_for(store, tmp_path)
    run_light_sleep(ctx, D)
    run_deep_sleep(ctx, D)
    run_autobiography(ctx, D)
    assert count(store, messages) == before  # no stage writes into a conversation or its history
    assert late_days(store, CST) == {}
    ingest(conversation("w1", "s-late", cst(2026, 3, 2, 15), ["我爱喝茶", "好"]))
    assert list(late_days(store, CST)) == [D]
    again = run_light_sleep(ctx, D)
    assert again.created >= 1 and any(m.content == "我爱喝茶" for m in active(store))
    assert late_days(store, CST) == {}


def test_recall_reads_autobiographical_memory(store, tmp_path):
    from memory_pipeline.sleep.autobiography import narratives

    _seed(
        store,
        "w1",
        [
            ("experience", "a", ["s-1"], "2026-03-01T10:00:00+08:00"),
            ("experience", "b", ["s-2"], "2026-03-02T10:00:00+08:00"),
        ],
    )
    run_autobiography(ctx_for(store, tmp_path), D)
    (n,) = narratives(store, "w1")
    assert n.kind == "event" and n.significance == 2 and narratives(store, "w2") == []


def test_autobiography_never_reads_raw_conversation_and_carries_the_self_layer(store, ingest, tmp_path):
    ingest(day_events())
    mem.pin_fact(store, "w1", "用户叫小王")
    _seed(store, "w1", [("experience", "去了海边", ["s-1"], "2026-03-01T10:00:00+08:00")])
    with FakeOpenAI() as server:
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        result = run_autobiography(ctx_for(store, tmp_path, llm=llm), D)
        sent = json.dumps(server.requests, ensure_ascii=False)
        system = server.requests[0]["messages"][0]["content"]
        offered = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert result.narratives_created == 0 and result.summaries_written == 1  # text answer: nothing worth recording
    assert offered == ["create_autobiographical_memory", "deprecate_autobiographical_memory"]  # no update
    assert "去了海边" in sent and "tomatoes garden planting" not in sent and "我喜欢吃辣" not in sent
    assert system.startswith("# 自我层") and "- 用户叫小王" in system and "## autobiography_summary" in system


def test_only_the_top_20_pinned_facts_enter_the_system_prompt(store):
    for i in range(25):
        mem.pin_fact(store, "w1", f"fact {i:02d}", priority=i)
    with store.connect() as conn:
        _blocks, pinned = mem.load_self_layer(conn, ["w1"], 20)
    assert pinned["w1"] == [f"fact {i:02d}" for i in range(24, 4, -1)]


# --- checklist lines that had no test that could fail ---------------------------------------------


def test_remember_infers_the_session_and_now(store, ingest):
    from memory_pipeline.lib.timeutil import utcnow

    ingest(conversation("w1", "s-live", cst(2026, 3, 2, 14), ["我换了新工作"]))
    before = utcnow()
    mid = mem.remember(store, "w1", "s-live", "用户换了新工作", type="world")
    after = utcnow()
    (m,) = active(store)
    assert m.id == mid and m.source_sessions == ["s-live"] and before <= m.observed_at <= after
    with store.connect() as conn:
        (v,) = conn.execute(select(semantic_memory_versions)).mappings().all()
    # create's logic, its version row, on the CST day it was written (that day's sleep and later ones see it)
    assert (v["op"], v["stage"], v["day"]) == ("create", "remember", after.astimezone(CST).date())
    with pytest.raises(mem.InputError, match="field 'type': 'mood' is not one of"):
        mem.remember(store, "w1", "s-live", "x", type="mood")  # create's validation


def test_only_light_sleep_extracts_semantic_memory_from_conversations(store, ingest, tmp_path):
    from memory_pipeline.lib.store.tables import conversations

    ingest(day_events())
    assert count(store, semantic_memories) == 0  # ingesting a conversation writes no semantic memory
    ctx = ctx_for(store, tmp_path)
    with store.connect() as conn:
        convs = conn.execute(select(conversations).order_by(conversations.c.conversation_id)).all()
    w2_day = D - timedelta(days=1)  # w2 spoke that day: light sleep is the only stage reading it
    run_autobiography(ctx, w2_day)
    assert count(store, semantic_memories) == 0  # the autobiography never reads raw conversation
    run_light_sleep(ctx, w2_day)
    run_deep_sleep(ctx, w2_day)
    run_autobiography(ctx, w2_day)
    run_light_sleep(ctx, D)
    created = active(store)
    assert created and {m.id for m in created} == {
        r[0]
        for r in _rows(
            store, select(semantic_memory_versions.c.memory_id).where(semantic_memory_versions.c.stage == "light_sleep")
        )
    }
    run_deep_sleep(ctx, D)
    with store.connect() as conn:  # no stage touched the conversations either
        assert conn.execute(select(conversations).order_by(conversations.c.conversation_id)).all() == convs


def _rows(store, q):
    with store.connect() as conn:
        return conn.execute(q).all()


def test_light_sleep_takes_recallable_lines_annotates_sessions_and_shows_intersecting_memories(store, ingest, tmp_path):
    ingest(
        day_events()
        + conversation("w1", "cronjob", cst(2026, 3, 2, 11), ["scheduled report"], platform="cron")
        + conversation("w1", "s-4", cst(2026, 3, 2, 12), ["  ", "ok then"])
    )
    near = _seed(store, "w1", [("world", "住在杭州", ["s-1", "s-old"], "2026-02-01T10:00:00+08:00")], D - timedelta(1))
    far = _seed(store, "w1", [("world", "在上海工作", ["s-old"], "2026-02-01T10:00:00+08:00")], D - timedelta(1))
    ctx = ctx_for(store, tmp_path)
    with store.connect() as conn:
        sessions = day_sessions(conn, D, ctx)["w1"]
        memories = mem.load_active(conn, ["w1"])["w1"]
    assert [s.session_id for s in sessions] == ["s-1", "s-2", "s-4"]  # no cron conversation
    assert [line[2] for line in sessions[2].lines] == ["ok then"]  # an empty turn is not recallable
    p = build_prompt(D, sessions, MemoryState("w1", memories, "t"), "sys", ctx)
    assert "## session s-1（平台 local）\n[2026-03-02 09:00] user: 我喜欢吃辣" in p.messages[0]["content"]
    assert "scheduled report" not in p.messages[0]["content"]
    # Message 2: the active memories whose source_sessions meet the day's sessions, only those.
    assert p.message_two_ids == near and far[0] not in p.messages[1]["content"]
    assert p.messages[1]["content"].startswith("# 已有记忆") and "住在杭州" in p.messages[1]["content"]


def test_light_sleep_dedupes_only_against_message_two_and_deep_sleep_merges_across_sessions(store, ingest, tmp_path):
    old = _seed(store, "w1", [("preference", "我喜欢吃辣", ["s-old"], "2026-02-01T10:00:00+08:00")], D - timedelta(1))
    ingest(day_events())
    ctx = ctx_for(store, tmp_path)
    result = run_light_sleep(ctx, D)
    assert result.duplicates_skipped == 0  # the earlier fact is another session's: not in message 2
    spicy = [m for m in active(store) if m.content == "我喜欢吃辣"]
    assert len(spicy) == 2 and {tuple(m.source_sessions) for m in spicy} == {("s-old",), ("s-1",)}
    run_deep_sleep(ctx, D)
    (merged,) = [m for m in active(store) if m.content == "我喜欢吃辣"]
    assert sorted(merged.source_sessions) == ["s-1", "s-old"] and merged.id not in old


def test_deep_sleep_warns_between_10k_and_100k(store, tmp_path, caplog):
    _seed(
        store, "w1", [("world", f"fact {i} " + "z" * 900, [f"s-{i}"], "2026-03-01T10:00:00+08:00") for i in range(30)]
    )
    _seed(store, "w2", [("world", "small", ["s-x"], "2026-03-01T10:00:00+08:00")])
    _light_done(store, tmp_path)
    with caplog.at_level("WARNING", logger="memory_pipeline.sleep.deep"):
        result = run_deep_sleep(ctx_for(store, tmp_path), D)
    assert result.warned == ["w1"] and result.batched == []
    assert len({r.batch_type for r in result.rounds["w1"]}) == 1 and len(result.rounds["w1"]) == 3  # not batched
    assert (
        "world w1: active memory JSON is" in caplog.text
        and "(warn band 10000..100000)" in caplog.text
        and "w2" not in caplog.text
    )


def test_the_eval_counts_the_warn_band_lines_instead_of_printing_each(store, tmp_path, caplog):
    from memory_pipeline.operations.recall_eval import _warn_band_counted

    _seed(
        store, "w1", [("world", f"fact {i} " + "z" * 900, [f"s-{i}"], "2026-03-01T10:00:00+08:00") for i in range(30)]
    )
    _light_done(store, tmp_path)
    with caplog.at_level("WARNING", logger="memory_pipeline.sleep.deep"), _warn_band_counted() as warned:
        result = run_deep_sleep(ctx_for(store, tmp_path), D)
    assert result.warned == ["w1"] and len(warned) == 1 and 10_000 <= warned[0] < 100_000
    assert "warn band" not in caplog.text


def test_autobiography_reads_the_seven_cst_days_ending_on_its_day(store, tmp_path):
    day = date(2026, 3, 9)  # the window: 2026-03-03 00:00 CST .. 2026-03-09 24:00 CST
    items = [
        ("experience", "in: first minute", ["s-1"], "2026-03-03T00:00:00+08:00"),
        ("imprint", "in: last minute", ["s-2"], "2026-03-09T23:59:59+08:00"),
        ("experience", "out: a second early", ["s-3"], "2026-03-02T23:59:59+08:00"),
        ("experience", "out: the next day", ["s-4"], "2026-03-10T00:00:00+08:00"),
        ("world", "out: not experience or imprint", ["s-5"], "2026-03-05T10:00:00+08:00"),
        ("experience", "out: deprecated", ["s-6"], "2026-03-05T10:00:00+08:00"),
    ]
    ids = _seed(store, "w1", items)
    state = MemoryState("w1", active(store), "t")
    from memory_pipeline.sleep.logic import DEEP_TOOLS, DEPRECATE, Rules

    changes = state.apply(
        {"id": "c", "name": DEPRECATE, "arguments": {"id": ids[5], "reason": "x"}},
        Rules(Stage.DEEP, DEEP_TOOLS, cst(2026, 3, 9, 3)),
    )
    with store.begin() as conn:
        mem.write_changes(conn, changes, mem.Provenance(Stage.DEEP, day))
    with FakeOpenAI() as server:
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        run_autobiography(ctx_for(store, tmp_path, llm=llm), day)
        shown = server.requests[0]["messages"][1]["content"]
    assert "in: first minute" in shown and "in: last minute" in shown
    assert "out:" not in shown
