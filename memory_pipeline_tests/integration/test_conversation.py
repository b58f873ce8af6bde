"""Seed 002 on PostgreSQL: the Step-0 gate at 29 / 30 / 31 entries, explicit triggers, the exact
layout, rolling versions, failure handling (format error, timeout, Haiku-class), the check line and
the user's correction, the injected history with trimming off and on."""

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from memory_pipeline.conversation import logic, summaries
from memory_pipeline.conversation.config import ConversationConfig
from memory_pipeline.conversation.tables import (
    conversation_summaries,
    conversation_summary_failures,
    conversation_summary_requests,
)
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store.tables import messages
from memory_pipeline.sleep.tables import semantic_memories
from memory_pipeline_tests.conftest import CST, conversation, cst
from memory_pipeline_tests.fake_openai import FakeOpenAI

CFG = ConversationConfig()


def texts(n, offset=0):
    return [
        f"我喜欢爬山 第{i + offset}句" if i % 4 == 0 else f"line {i + offset} about hiking trails?" for i in range(n)
    ]


def rows(store, table=conversation_summaries):
    with store.connect() as conn:
        return [dict(r) for r in conn.execute(select(table).order_by(*table.primary_key.columns)).mappings()]


def due_ids(store, cfg=CFG):
    return [d.conversation_id for d in summaries.due_conversations(store, cfg)]


@pytest.mark.parametrize("n, due", [(29, False), (30, True), (31, True)])
def test_gate_at_29_30_31_entries_and_init_status(store, ingest, n, due):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(n)))
    assert due_ids(store) == []  # no initialization status: not done
    summaries.set_init_status(store, "c1", "phase2_done")
    assert due_ids(store) == []
    summaries.set_init_status(store, "c1", "done")
    assert due_ids(store) == (["c1"] if due else [])


def test_explicit_check_still_passes_the_gate(store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(29)))
    summaries.set_init_status(store, "c1", "done")
    summaries.request(store, "c1", "user_check")
    assert due_ids(store) == []  # 29 < 30: a silent skip even when the user asks


def test_rolling_versions_in_the_exact_layout_and_never_an_overwrite(store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(31)))
    summaries.set_init_status(store, "c1", "done")
    summaries.set_profile(store, "w1", "住址", "北京")
    llm = LLMClient(store)
    result = summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG), now=cst(2026, 3, 3, 8))
    assert result.written == ["c1"]
    (v1,) = rows(store)
    text = v1["content"]
    assert logic.layout_ok(text)
    assert text.startswith("# 对话历程摘要（滚动）\n\n> 由 conversation_summary skill 维护。rolling 更新，不覆盖。\n")
    assert "## 最近情感主线（至 2026-03-02）" in text and "- 住址：北京" in text
    assert "## 情绪关键点（最近 30 条里）" in text and " → 投入" in text
    assert text.endswith("<!-- last_updated: 2026-03-03T08:00:00+08:00 -->\n<!-- covered_range: L1 - L31 -->\n")
    assert 3 <= logic.sentences(v1["sections"]["arc"]) <= 5
    assert v1["verified"] is False and v1["check_line"].startswith("我对咱们最近聊的事的印象是 ")
    assert v1["check_line"].endswith("，大致对吗？")
    assert due_ids(store) == []  # covered up to L31
    ingest(conversation("w1", "c1", cst(2026, 3, 4, 9), texts(30, 100)))
    assert due_ids(store) == ["c1"]
    summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG))
    v = rows(store)
    assert [r["version"] for r in v] == [1, 2] and v[0]["content"] == text  # rolling: the old version kept
    assert (v[1]["covered_start"], v[1]["covered_end"]) == (1, 61)
    # The user denies the check line: a new verified version with their wording.
    version = summaries.correct(store, "c1", "用户这段时间其实在为搬家发愁。她对爬山只是随口一提。整体有些焦虑。", CST)
    last = rows(store)[-1]
    assert (
        version == 3 and last["verified"] is True and "搬家发愁" in last["content"] and logic.layout_ok(last["content"])
    )
    # Never writes semantic memory or messages.
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(semantic_memories)).scalar_one() == 0
        assert conn.execute(select(func.count()).select_from(messages)).scalar_one() == 61


@pytest.mark.parametrize(
    "script, error",
    [
        ([("ok", "just text, no tool")], "without write_conversation_summary: no tool call (format error)"),
        (  # the tool it did call is named (it read as if no tool had been called)
            [("tools", [("frobnicate_memory", {"x": 1})])],
            "without write_conversation_summary: it called 'frobnicate_memory' instead (format error)",
        ),
        (
            [
                (
                    "tools",
                    [
                        (
                            "write_conversation_summary",
                            {
                                "emotional_arc": "一。" * 11,
                                "preferences": [],
                                "emotional_key_points": [],
                                "unresolved_hooks": [],
                            },
                        )
                    ],
                )
            ],
            "11 sentences",
        ),
        (
            [
                (
                    "tools",
                    [
                        (
                            "write_conversation_summary",
                            {
                                "emotional_arc": "2026-04-18 聊剧本。",
                                "preferences": [],
                                "emotional_key_points": [],
                                "unresolved_hooks": [],
                            },
                        )
                    ],
                )
            ],
            "contains a date",
        ),
        ([("sleep", 3)], "failed for conversation_summary"),
    ],
    ids=["no-tool", "another-tool", "eleven-sentences", "dated", "timeout"],
)
def test_a_failure_writes_nothing_logs_an_event_and_retries_next_trigger(store, ingest, script, error):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(30)))
    summaries.set_init_status(store, "c1", "done")
    with FakeOpenAI() as server:
        for step in script:
            server.push(*step)
        llm = LLMClient(
            store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0, timeout_seconds=1
        )
        result = summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG))
    assert error in result.failed["c1"]
    assert rows(store) == []
    (failure,) = rows(store, conversation_summary_failures)
    assert failure["conversation_id"] == "c1" and error in failure["error"]
    # Retried on a later trigger, once the first backoff (10 minutes) is over.
    assert due_ids_at(store, failure["at"] + timedelta(minutes=9)) == []
    assert due_ids_at(store, failure["at"] + timedelta(minutes=10)) == ["c1"]
    # What the operator reads says the same: backing off until then, then due at the next trigger.
    states = [summaries.failing(store, CFG, now=failure["at"] + timedelta(minutes=m))[0]["state"] for m in (9, 10)]
    assert states == ["backing off", "retry due"]
    counts = [summaries.status(store, CFG, now=failure["at"] + timedelta(minutes=m)) for m in (9, 10)]
    assert [(c["backing_off"], c["retry_due"], c["held"]) for c in counts] == [(1, 0, 0), (0, 1, 0)]


def test_an_answer_cut_at_the_output_limit_is_a_failure_and_asked_again(store, ingest):
    """The provider stops the summary's answer at its output limit (finish_reason length) with a tool
    call that would pass every check: a cut answer is a failed generation (seed 002: 不更新, 下次触发
    重试), so no version is written from it, the failure log says `truncated:`, the run names the
    conversation, `conversation status` lists it, and once the backoff is over the next trigger asks
    again (one more ledger row) and writes the whole answer."""
    from memory_pipeline.lib.store.tables import llm_ledger

    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(30)))
    summaries.set_init_status(store, "c1", "done")
    kind, calls = summary_call()
    with FakeOpenAI() as server:
        server.push("tools_length", calls).push(kind, calls)
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        first = summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG))
        assert first.written == [] and first.truncated == ["c1"]
        assert first.failed["c1"].startswith("truncated: answer cut at the output limit")
        assert rows(store) == []  # nothing written from the cut answer
        (failure,) = rows(store, conversation_summary_failures)
        assert failure["error"].startswith("truncated: answer cut at the output limit (finish_reason length")
        (state,) = summaries.failing(store, CFG)
        assert state["conversation_id"] == "c1" and state["last_error"] == failure["error"]
        later = failure["at"] + timedelta(minutes=10)
        second = summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG, later), now=later)
        assert second.written == ["c1"] and second.truncated == [] and len(server.requests) == 2
    with store.connect() as conn:
        ledger = conn.execute(select(llm_ledger.c.finish_reason).order_by(llm_ledger.c.call_id)).scalars().all()
    assert ledger == ["length", "tool_calls"]
    (v1,) = rows(store)
    assert v1["sections"]["arc"] == GOOD_ARC and summaries.failing(store, CFG) == []


def test_a_haiku_class_model_is_refused_before_any_call(store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(30)))
    summaries.set_init_status(store, "c1", "done")
    with FakeOpenAI() as server:
        llm = LLMClient(store, model="anthropic/claude-3-haiku", api_base=server.api_base, api_key="k")
        result = summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG))
        assert server.requests == []
    assert "Haiku-class" in result.failed["c1"] and rows(store) == []


def test_injected_history_trimming_off_and_on(store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(60), step=timedelta(minutes=1)))
    summaries.set_init_status(store, "c1", "done")
    off = summaries.injected_history(store, "c1", CFG)
    assert off["summary"] is None and [e["n"] for e in off["entries"]] == list(range(12, 61))
    summaries.run(store, LLMClient(store), CFG, CST, summaries.due_conversations(store, CFG))
    on = summaries.injected_history(store, "c1", ConversationConfig(trim_history=True))
    assert on["summary"].startswith("# 对话历程摘要") and [e["n"] for e in on["entries"]] == list(range(41, 61))
    with store.connect() as conn:  # trimming never deletes raw events
        assert conn.execute(select(func.count()).select_from(messages)).scalar_one() == 60


def test_entry_points_refuse_bad_input_by_field(store):
    with pytest.raises(summaries.InputError, match="field 'status'"):
        summaries.set_init_status(store, "c1", "finished")
    with pytest.raises(summaries.InputError, match="field 'conversation_id'"):
        summaries.set_init_status(store, "bad id", "done")
    with pytest.raises(summaries.InputError, match="field 'trigger'"):
        summaries.request(store, "c1", "entries")
    with pytest.raises(summaries.InputError, match="no summary to correct"):
        summaries.correct(store, "c1", "x。", CST)


def test_requests_gate_statuses_and_profile_facts_name_only_stored_conversations_and_worlds(store, ingest):
    """A request or a gate status for a conversation never ingested would wait for ever (and show in
    the status as open); a profile fact of a world never ingested gave it one; a preference override
    of another world's conversation queued it there. Each is refused, and nothing is written."""
    from memory_pipeline.conversation.tables import conversation_init_status, user_profile_facts

    ingest(
        conversation("w1", "c1", cst(2026, 3, 2, 9), texts(2)) + conversation("w2", "c2", cst(2026, 3, 2, 9), texts(2))
    )
    for call in (
        lambda: summaries.request(store, "nope", "user_check"),
        lambda: summaries.set_init_status(store, "nope", "done"),
    ):
        with pytest.raises(summaries.InputError, match="field 'conversation_id': no conversation 'nope'"):
            call()
    with pytest.raises(summaries.InputError, match="field 'world_id': no such world 'w9'"):
        summaries.set_profile(store, "w9", "城市", "杭州")
    with pytest.raises(summaries.InputError, match="no conversation 'c2' in world 'w1'"):
        summaries.set_profile(store, "w1", "城市", "杭州", conversation_id="c2")
    assert rows(store, conversation_summary_requests) == []
    assert rows(store, conversation_init_status) == [] and rows(store, user_profile_facts) == []


def test_the_model_gets_the_full_history_and_the_previous_summary(store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(31)))
    summaries.set_init_status(store, "c1", "done")
    summaries.run(store, LLMClient(store), CFG, CST, summaries.due_conversations(store, CFG))
    ingest(conversation("w1", "c1", cst(2026, 3, 4, 9), texts(30, 100)))
    with FakeOpenAI() as server:
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG))
        msgs = server.requests[0]["messages"]
    assert msgs[1]["content"].startswith("# 已有 summary（上次覆盖至 L31）\n# 对话历程摘要（滚动）")
    assert "L1 **user**" in msgs[2]["content"] and "L61 **assistant**" in msgs[2]["content"]
    # L32 is the first new entry: the heading says the new part starts there (not "after L32").
    assert "本次总结 L32 起的新增部分" in msgs[2]["content"] and "之后" not in msgs[2]["content"].split("\n")[0]
    assert server.requests[0]["tools"][0]["function"]["name"] == "write_conversation_summary"


# --- the author's view, enforced in code after the model answers -----------------------------------

GOOD_ARC = "用户这段时间把爬山当作放松的方式。她聊起路线时很投入。对天气的担心让她有些犹豫。"


def summary_call(**over):
    args = {
        "emotional_arc": GOOD_ARC,
        "preferences": ["喜欢周末爬山"],
        "emotional_key_points": [{"topic": "爬山", "state": "投入"}],
        "unresolved_hooks": ["想去的那条新路线还没定"],
    }
    return ("tools", [("write_conversation_summary", {**args, **over})])


def test_the_offline_model_keeps_the_users_newest_stance_and_reads_a_negated_like(store, ingest):
    """Seed 002's preferences: 以最近为准. The user liked tomatoes, later said they do not: the summary
    says 用户不喜欢 (it said 用户喜欢, the opposite of the newest line, since "don't like" holds
    "like"); a thing liked once and never taken back stays liked; the newest stance comes first."""
    lines = [f"line {i} about the garden beds" for i in range(31)]
    lines[2] = "I like tomatoes straight from the greenhouse"
    lines[4] = "我喜欢爬山"
    lines[20] = "Honestly I don't like tomatoes straight from the greenhouse anymore"
    lines[24] = "我不喜欢跑步"
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), lines))
    summaries.set_init_status(store, "c1", "done")
    result = summaries.run(store, LLMClient(store), CFG, CST, summaries.due_conversations(store, CFG))
    assert result.written == ["c1"], result.failed
    (v1,) = rows(store)
    assert v1["sections"]["preferences"] == ["用户不喜欢跑步", "用户不喜欢tomatoes straight", "用户喜欢爬山"]


def test_the_offline_model_writes_in_the_authors_view_and_refers_to_long_arc(store, ingest):
    from memory_pipeline.sleep import memory as mem
    from memory_pipeline.sleep.config import SleepConfig
    from memory_pipeline.sleep.tables import self_blocks

    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(31)))
    summaries.set_init_status(store, "c1", "done")
    arc_text = "角色一直放不下离开故乡这件事，心里总惦记着老房子。"
    mem.set_self_block(store, "w1", "long_arc", arc_text, SleepConfig().block_names(), "author")
    with store.connect() as conn:
        before = conn.execute(select(self_blocks).where(self_blocks.c.name == "long_arc")).mappings().one()
    arcs = mem.self_block_of(store, "long_arc")
    result = summaries.run(store, LLMClient(store), CFG, CST, summaries.due_conversations(store, CFG), long_arcs=arcs)
    assert result.written == ["c1"], result.failed
    (v1,) = rows(store)
    s = v1["sections"]
    # No line copied: preferences and the hook are the offline model's own words, not user lines.
    assert s["preferences"] == ["用户喜欢爬山"] and s["hooks"] == ["用户关于hiking、trails的问题还没有结论"]
    history = [(i + 1, t) for i, t in enumerate(texts(31))]
    logic.check_author_view(
        logic.Sections(s["arc"], tuple(s["preferences"]), tuple(map(tuple, s["key_points"])), tuple(s["hooks"])),
        history,
        arc_text,
    )
    assert not any(t in v1["content"] for _n, t in history)
    # long_arc: referred to, never written (the block is as the author left it); it comes first.
    assert s["arc"].endswith("让角色想起自己的长线心事。") and arc_text not in v1["content"]
    with store.connect() as conn:
        after = conn.execute(select(self_blocks).where(self_blocks.c.name == "long_arc")).mappings().one()
    assert after == before
    view = summaries.injected_history(store, "c1", ConversationConfig(trim_history=True), arcs)
    assert list(view) == ["long_arc", "summary", "entries"] and view["long_arc"] == arc_text
    assert summaries.injected_history(store, "c1", CFG, arcs)["long_arc"] == arc_text  # trimming off: still first


def test_the_offline_model_leaves_out_a_preference_the_check_would_refuse(store, ingest):
    """A liked thing that is a date (我喜欢4月18日…) would be a date in a fact: the offline model
    leaves that preference out instead of writing a summary the check refuses every time."""
    lines = [f"我喜欢4月18日的樱花 第{i}句" if i % 4 == 0 else f"line {i} about hiking trails?" for i in range(31)]
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), lines))
    summaries.set_init_status(store, "c1", "done")
    result = summaries.run(store, LLMClient(store), CFG, CST, summaries.due_conversations(store, CFG))
    assert result.written == ["c1"], result.failed
    (v1,) = rows(store)
    assert v1["sections"]["preferences"] == [] and rows(store, conversation_summary_failures) == []


@pytest.mark.parametrize(
    "bad, error",
    [
        (summary_call(preferences=["我喜欢爬山 第0句"]), "field 'preferences[0]': copies history line L1 verbatim"),
        (
            summary_call(unresolved_hooks=["她说到：我喜欢爬山，第8句"]),
            "field 'unresolved_hooks[0]': copies history line L9 verbatim",
        ),
        (summary_call(emotional_arc="用户说'我爸走了'，角色说'嗯'。她很难过。"), "quotes what was said"),
        (summary_call(emotional_arc="用户讲了剧本、工作、墓地、搬家。整体平稳。"), "a running log of topics"),
        (summary_call(unresolved_hooks=["04-19 聊工作的事还没说完"]), "field 'unresolved_hooks[0]': contains a date"),
        (
            summary_call(long_arc="角色决定放下故乡。"),
            "field 'long_arc': the summary may refer to long_arc, never write it",
        ),
        (
            summary_call(emotional_arc="角色一直放不下离开故乡这件事，心里总惦记着老房子。她聊到爬山。"),
            "copies long_arc (the summary may refer to the arc, never write it) verbatim",
        ),
    ],
    ids=[
        "copied-preference",
        "copied-hook",
        "reported-speech",
        "running-log",
        "dated-hook",
        "writes-arc",
        "copies-arc",
    ],
)
def test_an_answer_outside_the_authors_view_is_refused_logged_as_such_and_retried(store, ingest, bad, error):
    from memory_pipeline.sleep import memory as mem
    from memory_pipeline.sleep.config import SleepConfig

    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(30)))
    summaries.set_init_status(store, "c1", "done")
    summaries.request(store, "c1", "user_check")
    arc_text = "角色一直放不下离开故乡这件事，心里总惦记着老房子。"
    mem.set_self_block(store, "w1", "long_arc", arc_text, SleepConfig().block_names(), "author")
    with FakeOpenAI() as server:
        server.push(*bad)
        server.push(*summary_call())
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        arcs = mem.self_block_of(store, "long_arc")
        first = summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG), long_arcs=arcs)
        assert first.written == [] and error in first.failed["c1"]
        assert rows(store) == []  # nothing written
        (failure,) = rows(store, conversation_summary_failures)
        assert failure["error"].startswith("author_view: ") and error in failure["error"]
        # The user's check stays open and the conversation due after the backoff: that trigger asks
        # again (never reusing the refused answer) and writes the good one.
        later = failure["at"] + timedelta(minutes=10)
        assert due_ids_at(store, later) == ["c1"] and rows(store, conversation_summary_requests)[0]["done_at"] is None
        second = summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG, later), long_arcs=arcs)
        assert second.written == ["c1"] and len(server.requests) == 2
        assert arc_text in server.requests[1]["messages"][2]["content"]  # the model is shown long_arc
        (request,) = rows(store, conversation_summary_requests)
        assert request["outcome"] == "version 1"  # the user's check is served by the retry
    (v1,) = rows(store)
    assert v1["sections"]["arc"] == GOOD_ARC


def test_other_failures_are_logged_with_their_kind(store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(30)))
    summaries.set_init_status(store, "c1", "done")
    with FakeOpenAI() as server:
        server.push("ok", "no tool")
        server.push("sleep", 3)
        llm = LLMClient(
            store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0, timeout_seconds=1
        )
        t = cst(2026, 3, 3, 9)
        for wait in (10, 20):  # each attempt once the backoff of the previous failure is over
            summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG, t), now=t)
            t += timedelta(minutes=wait)
        haiku = LLMClient(store, model="anthropic/claude-3-haiku", api_base=server.api_base, api_key="k")
        summaries.run(store, haiku, CFG, CST, summaries.due_conversations(store, CFG, t), now=t)
    kinds = [f["error"].split(":", 1)[0] for f in rows(store, conversation_summary_failures)]
    assert kinds == ["format", "model", "haiku_class"]


def test_a_user_check_and_a_preference_override_trigger_through_the_gate(store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(31)))
    summaries.set_init_status(store, "c1", "done")
    llm = LLMClient(store)
    summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG))
    assert due_ids(store) == []  # everything covered, no new entry
    summaries.request(store, "c1", "user_check")
    (due,) = summaries.due_conversations(store, CFG)
    assert (due.trigger, due.covered_end) == ("user_check", 31)
    summaries.run(store, llm, CFG, CST, [due])
    summaries.set_init_status(store, "c1", "phase2_done")  # the gate is shut ...
    summaries.set_profile(store, "w1", "城市", "杭州", conversation_id="c1")
    assert due_ids(store) == []  # ... a preference override is a silent skip too
    summaries.set_init_status(store, "c1", "done")
    (due,) = summaries.due_conversations(store, CFG)
    assert due.trigger == "preference_override"
    summaries.run(store, llm, CFG, CST, [due])
    v = rows(store)
    assert [r["trigger"] for r in v] == ["entries", "user_check", "preference_override"]
    assert "- 城市：杭州" in v[2]["content"] and "- 城市：杭州" not in v[1]["content"]
    assert [r["outcome"] for r in rows(store, conversation_summary_requests)] == ["version 2", "version 3"]


def test_the_profile_section_takes_the_most_recent_value(store, ingest):
    from datetime import datetime

    from memory_pipeline.conversation.tables import user_profile_facts

    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(30)))
    summaries.set_init_status(store, "c1", "done")
    summaries.set_profile(store, "w1", "住址", "北京")
    summaries.set_profile(store, "w1", "职业", "编剧")
    summaries.set_profile(store, "w1", "住址", "上海")  # moved: the newest value wins
    with store.begin() as conn:  # the order of the updates, made unambiguous
        for key, minute in (("职业", 1), ("住址", 2)):
            conn.execute(
                user_profile_facts.update()
                .where(user_profile_facts.c.key == key)
                .values(updated_at=datetime(2026, 3, 2, 9, minute, tzinfo=CST))
            )
    summaries.run(store, LLMClient(store), CFG, CST, summaries.due_conversations(store, CFG))
    (v1,) = rows(store)
    prefs = v1["sections"]["preferences"]
    assert prefs[:2] == ["住址：上海", "职业：编剧"] and not any("北京" in p for p in prefs)


# --- a failing conversation backs off and is held; the user's confirmation ---------------------------


def bad_answer():
    return summary_call(emotional_arc="用户讲了剧本、工作、墓地、搬家。整体平稳。")  # a running log: refused


def test_a_failing_conversation_backs_off_then_is_held_until_an_operator_retries(store, ingest):
    from memory_pipeline.conversation.tables import conversation_summary_backoff

    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(30)))
    summaries.set_init_status(store, "c1", "done")
    t = cst(2026, 3, 3, 9)
    with FakeOpenAI() as server:
        for _ in range(5):
            server.push(*bad_answer())
        llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        for wait in (10, 20, 40, 80):
            (due,) = summaries.due_conversations(store, CFG, now=t)
            result = summaries.run(store, llm, CFG, CST, [due], now=t)
            assert "running log" in result.failed["c1"] and result.held == []
            # Not due again until the backoff is over: every tick before it would be a new paid call.
            assert due_ids_at(store, t + timedelta(minutes=wait - 1)) == []
            t += timedelta(minutes=wait)
            assert due_ids_at(store, t) == ["c1"]
        result = summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG, now=t), now=t)
        assert result.held == ["c1"] and len(server.requests) == 5
        # Held after five in a row: no clock brings it back, and status says why.
        assert due_ids_at(store, t + timedelta(days=30)) == []
        state = summaries.status(store, CFG)
        assert (state["held"], state["backing_off"], state["failures_logged"]) == (1, 0, 5)
        (held,) = summaries.failing(store, CFG)
        assert held["state"] == "held" and held["consecutive_failures"] == 5
        assert held["last_error"].startswith("author_view: ") and "running log" in held["last_error"]
        # The operator retries it explicitly: due at once, and a success ends the failures in a row.
        assert summaries.retry(store, "c1").consecutive == 5
        assert due_ids_at(store, t) == ["c1"]
        server.push(*summary_call())
        assert summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG, now=t), now=t).written
    assert rows(store, conversation_summary_backoff) == [] and summaries.failing(store, CFG) == []
    with pytest.raises(summaries.InputError, match="no failures to retry"):
        summaries.retry(store, "c1")


def due_ids_at(store, now):
    return [d.conversation_id for d in summaries.due_conversations(store, CFG, now=now)]


def test_the_user_confirms_the_check_line_and_the_version_is_verified(store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 3, 2, 9), texts(31)))
    summaries.set_init_status(store, "c1", "done")
    summaries.run(store, LLMClient(store), CFG, CST, summaries.due_conversations(store, CFG))
    ingest(conversation("w1", "c1", cst(2026, 3, 4, 9), texts(30, 100)))
    summaries.run(store, LLMClient(store), CFG, CST, summaries.due_conversations(store, CFG))
    v1, v2 = rows(store)
    assert (v1["verified"], v2["verified"]) == (False, False) and v2["check_line"].endswith("，大致对吗？")
    # Only the check line the user was shown (the newest) can be confirmed.
    with pytest.raises(summaries.InputError, match="field 'version': 1 is not the newest version"):
        summaries.confirm(store, "c1", version=1)
    at = cst(2026, 3, 5, 10)
    assert summaries.confirm(store, "c1", version=2, now=at) is True
    v1, v2 = rows(store)
    assert (v1["verified"], v2["verified"], v2["verified_at"]) == (False, True, at)
    assert v2["content"] == summaries.latest(store, "c1")["content"] and len(rows(store)) == 2  # nothing rewritten
    assert summaries.confirm(store, "c1") is False  # already verified: nothing changes
    assert summaries.status(store)["unverified"] == 0
    with pytest.raises(summaries.InputError, match="has no summary to confirm"):
        summaries.confirm(store, "c2")


# --- the provider's breaker ------------------------------------------------------------------------
SEVEN = [f"c{i}" for i in range(1, 8)]


def seven_due(store, ingest):
    """c1..c7, 30 entries each, initialized: seven due conversations."""
    for i, conv in enumerate(SEVEN):
        ingest(conversation("w1", conv, cst(2026, 3, 2, 9, i), texts(30)))
        summaries.set_init_status(store, conv, "done")
    assert due_ids(store) == SEVEN


def provider_outcomes(store) -> dict[str, int]:
    from memory_pipeline.lib.store.tables import llm_ledger

    with store.connect() as conn:
        return dict(conn.execute(select(llm_ledger.c.outcome, func.count()).group_by(llm_ledger.c.outcome)).all())


def test_a_provider_outage_stops_the_summary_run_at_the_breaker_and_leaves_the_rest_due(
    pg_url, redis_url, store, ingest, monkeypatch
):
    """Seven due conversations, the provider failing every request: with the breaker's threshold
    (5) c1..c5 fail (one request each; a failure each, backing off), c6's call is refused without a
    request and the run fails with the breaker's one line, listing c6 and c7 as not done (no failure
    recorded: still due). The next run, the provider back, asks for exactly those two."""
    from dagster import instance_for_test

    from memory_pipeline_tests.integration.test_dagster import make_defs

    seven_due(store, ingest)
    monkeypatch.setenv("MEMORY_LLM_BREAKER_FAILURES", "5")
    with FakeOpenAI() as server, instance_for_test() as instance:
        for _ in range(50):
            server.push("status", 500)
        defs = make_defs(pg_url, redis_url, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
        job = defs.resolve_job_def("conversation_rolling_summary_job")
        down = job.execute_in_process(instance=instance, raise_on_error=False)
        assert not down.success and len(server.requests) == 5
        (failure,) = [e for e in down.all_events if e.is_step_failure]
        data = failure.step_failure_data
        assert data.error.message.strip().splitlines()[0] == (
            f"dagster._core.definitions.events.Failure: LLM provider openai/fake at {server.api_base} is failing: "
            "InternalServerError: litellm.InternalServerError: InternalServerError: OpenAIException - scripted 500 "
            "(5 consecutive failures); stopping: the conversations not done stay due for the next run"
        )
        meta = {k: v.value for k, v in data.user_failure_data.metadata.items()}
        assert meta["not_done"] == ["c6", "c7"] and (meta["due"], meta["written"], meta["failed"]) == (7, 0, 5)
        assert provider_outcomes(store) == {"error": 5, "breaker_open": 1}
        failed = {r["conversation_id"] for r in rows(store, conversation_summary_failures)}
        assert failed == {"c1", "c2", "c3", "c4", "c5"}  # none for c6 (refused) nor c7 (not reached)
        assert due_ids(store) == ["c6", "c7"]  # c1..c5 wait out their backoff

        server.script.clear()
        server.tool_answer = lambda body: summary_call()[1]
        monkeypatch.setenv("MEMORY_LLM_BREAKER_COOLDOWN_SECONDS", "0")
        again = job.execute_in_process(instance=instance, raise_on_error=False)
        assert again.success and len(server.requests) == 5 + 2
    assert provider_outcomes(store) == {"error": 5, "breaker_open": 1, "ok": 2}
    assert [r["conversation_id"] for r in rows(store)] == ["c6", "c7"]


def test_each_summary_call_is_in_the_ledger_under_its_conversation(store, ingest):
    """Two conversations due in one run: each one's call names its conversation as the ledger
    row's partition (the unit of work), not an empty one; the client's own partition is kept."""
    from memory_pipeline.lib.store.tables import llm_ledger

    ingest(
        conversation("w1", "c1", cst(2026, 3, 2, 9), texts(31))
        + conversation("w2", "c2", cst(2026, 3, 2, 9), texts(31))
    )
    for c in ("c1", "c2"):
        summaries.set_init_status(store, c, "done")
    llm = LLMClient(store, asset="conversation_rolling_summaries")
    result = summaries.run(store, llm, CFG, CST, summaries.due_conversations(store, CFG), now=cst(2026, 3, 3, 8))
    assert sorted(result.written) == ["c1", "c2"]
    with store.connect() as conn:
        named = conn.execute(select(llm_ledger.c.world_id, llm_ledger.c.partition)).all()
    assert sorted(named) == [("w1", "c1"), ("w2", "c2")]
    assert llm.partition is None
