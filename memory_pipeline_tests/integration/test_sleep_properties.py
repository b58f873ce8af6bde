"""Property: whatever tool calls a model returns (arbitrary names and JSON arguments), a sleep
stage never raises, and the store holds exactly the accepted calls: every rejected call left no
row and no version behind (PostgreSQL, through the real LLM client and its ledger)."""

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from memory_pipeline.lib.llm import LLMClient, offline_tools
from memory_pipeline.sleep import memory as mem
from memory_pipeline.sleep.config import SleepConfig
from memory_pipeline.sleep.context import SleepContext, memory_loop
from memory_pipeline.sleep.logic import DEEP_TOOLS, Change, Memory, MemoryState, Op, Rules, Stage
from memory_pipeline.sleep.prompts import tools
from memory_pipeline.sleep.tables import semantic_memories, semantic_memory_versions

CST = ZoneInfo("Asia/Shanghai")
T0 = datetime(2026, 3, 2, tzinfo=UTC)
SCRIPT: list = []

offline_tools.register("property_test", lambda messages, offered: ("scripted", list(SCRIPT)))

_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=12)
    | st.sampled_from(["f-seed", "world", "s-1", "2026-03-02T10:00:00+08:00"]),
    lambda i: st.lists(i, max_size=3) | st.dictionaries(st.text(max_size=8), i, max_size=3),
    max_leaves=10,
)
_args = st.one_of(
    _value,
    st.fixed_dictionaries(
        {},
        optional={
            "id": st.sampled_from(["f-seed", "f-nope", ""]) | _value,
            "type": st.sampled_from(["world", "preference", "mood"]),
            "content": st.text(max_size=20),
            "source_sessions": st.lists(st.sampled_from(["s-1", "s-2"]), max_size=3) | _value,
            "source_ids": st.lists(st.sampled_from(["f-seed", "f-nope"]), max_size=3) | _value,
            "reason": st.text(max_size=10),
            "observed_at": st.sampled_from(["2026-03-02T10:00:00+08:00", "yesterday"]) | _value,
        },
    ),
)
_text = st.text(alphabet="abc 我喜欢", min_size=1, max_size=12).filter(str.strip)
_valid = st.one_of(
    st.fixed_dictionaries(
        {
            "name": st.just("create_semantic_memory"),
            "arguments": st.fixed_dictionaries(
                {
                    "type": st.sampled_from(["world", "preference"]),
                    "content": _text,
                    "source_sessions": st.lists(st.sampled_from(["s-1", "s-2"]), max_size=2),
                }
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("update_semantic_memory"),
            "arguments": st.fixed_dictionaries(
                {"id": st.just("f-seed")}, optional={"content": _text, "source_sessions": st.just([])}
            ),
        }
    ),
)
_calls = st.lists(
    st.one_of(
        _valid,
        st.fixed_dictionaries(
            {"name": st.sampled_from([*DEEP_TOOLS, "search_semantic_memory", "x"]), "arguments": _args}
        ),
    ),
    max_size=6,
)


# Offered to the model (so the offline module passes the calls through); the stage's whitelist is
# DEEP_TOOLS, so the last two are refused by the validation under test.
OFFERED = [
    *tools(DEEP_TOOLS),
    {"type": "function", "function": {"name": "search_semantic_memory"}},
    {"type": "function", "function": {"name": "x"}},
]


def _seed(store):
    """One memory with the id the strategies use, once per database."""
    with store.connect() as conn:
        if conn.execute(select(semantic_memories.c.memory_id).where(semantic_memories.c.memory_id == "f-seed")).first():
            return
    seed = Memory("f-seed", "w1", "world", "seed fact", ["s-1"], T0, version=1)
    with store.begin() as conn:
        mem.write_changes(conn, [Change(Op.CREATE, seed)], mem.Provenance(Stage.LIGHT, None))


def _counts(store):
    with store.connect() as conn:
        return (
            conn.execute(select(func.count()).select_from(semantic_memories)).scalar_one(),
            conn.execute(select(func.count()).select_from(semantic_memory_versions)).scalar_one(),
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=_calls)
def test_arbitrary_tool_calls_never_raise_and_write_exactly_the_accepted(store, tmp_path, calls):
    SCRIPT[:] = calls
    _seed(store)
    before_rows, before_versions = _counts(store)
    with store.connect() as conn:
        active = mem.load_active(conn, ["w1"]).get("w1", [])
    state = MemoryState("w1", active, salt=f"prop{before_versions}")
    ctx = SleepContext(store, LLMClient(store), SleepConfig(log_dir=str(tmp_path), max_tool_turns=1), CST)
    result = memory_loop(
        ctx,
        state,
        Rules(Stage.DEEP, DEEP_TOOLS, T0),
        task="property_test",
        system="s",
        messages=[{"role": "user", "content": "m1"}],
        tools=OFFERED,
    )
    with store.begin() as conn:  # what a stage commits: the loop's accepted changes
        mem.write_changes(conn, result.changes, mem.Provenance(Stage.DEEP, None))
    rows, versions = _counts(store)
    event(f"accepted calls: {min(len(result.changes), 2)}+, rejected: {min(len(result.rejected), 2)}+")
    assert versions - before_versions == len(result.changes)
    assert rows - before_rows == sum(1 for c in result.changes if c.op in ("create", "merge"))
    assert result.tool_calls == len(calls)
    assert all(r["error"].startswith("tool call ") for r in result.rejected)
