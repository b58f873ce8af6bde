"""Seed 002 on PostgreSQL: the Step-0 gate at 29 / 30 / 31 entries, explicit triggers, the exact
layout, rolling versions, failure handling (format error, timeout, Haiku-class), the check line and
the user's correction, the injected history with trimming off and on."""

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from memory_pipeline.conversation import logic, summaries
from memory_pipeline.conversation.config import ConversationConfig
from memory_pipeline.conversation.tables import conversation_summaries, conversation_summary_failures
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
        ([("ok", "just text, no tool")], "without write_conversation_summary"),
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
    ids=["no-tool", "eleven-sentences", "dated", "timeout"],
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
    assert due_ids(store) == ["c1"]  # retried on the next trigger


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
    assert "本次总结 L32 之后的新增部分" in msgs[2]["content"]
    assert server.requests[0]["tools"][0]["function"]["name"] == "write_conversation_summary"
