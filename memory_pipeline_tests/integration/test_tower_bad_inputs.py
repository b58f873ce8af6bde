"""Seed 004 entry points fed arbitrary input (property-based) on the real PostgreSQL: every call either
succeeds or is refused with a TowerInputError naming the field; never another exception, and a refused
call writes nothing."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.logic import TowerInputError, WindowQuery
from memory_pipeline.tower.tables import tower_entries, tower_jobs, tower_summaries, tower_types
from memory_pipeline_tests.conftest import CST

scalars = st.none() | st.booleans() | st.integers(-5, 2000) | st.floats(allow_nan=True) | st.text(max_size=12)
values = st.recursive(
    scalars
    | st.sampled_from(["day", "week", "10min", "2026-01-05", "2026-01-05T10:00:00+08:00", "../x", "a//b", "worklog"]),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=10,
)
entry = st.fixed_dictionaries(
    {},
    optional={
        "content": values,
        "at": values,
        "id": values,
        "group": values,
        "project": values,
    },
)
CALLS = st.one_of(
    st.tuples(
        st.just("append"), st.sampled_from(["worklog", "proj/x", "../x", 3]), st.lists(entry, max_size=3) | values
    ),
    st.tuples(
        st.just("create_type"),
        values,
        st.fixed_dictionaries(
            {}, optional={k: values for k in ("chain", "summaries", "group_field", "retention", "summary_cap")}
        ),
    ),
    st.tuples(st.just("update_type"), st.sampled_from(["worklog", "proj/x", "nope"]), values),
    st.tuples(
        st.just("recall"),
        st.sampled_from(["worklog", "proj/x"]),
        st.tuples(values, values, values, values, values, values),
    ),
    st.tuples(
        st.just("get_summary"),
        st.sampled_from(["worklog", "proj/x"]),
        st.tuples(values, values, values, values, values, values),
    ),
    st.tuples(
        st.just("summarize"), st.sampled_from(["worklog", "proj/x"]), st.tuples(values, values, values, values, values)
    ),
    st.tuples(
        st.just("windows"), st.sampled_from(["worklog", "proj/x"]), st.tuples(values, values, values, values, values)
    ),
    st.tuples(st.just("job_status"), values, st.just(None)),
    st.tuples(st.just("delete_type"), values, st.just(None)),
)


def _counts(store):
    with store.connect() as conn:
        return tuple(
            conn.execute(select(func.count()).select_from(t)).scalar_one()
            for t in (tower_entries, tower_types, tower_summaries, tower_jobs)
        )


def _window_call(tower, name, type_name, args):
    """As the CLI and the MCP tools call: the window arguments parsed into a WindowQuery, then the method."""
    if name == "windows":
        granularity, anchor, group, limit, cursor = args
        return tower.windows(type_name, WindowQuery.parse(granularity, anchor, group=group), limit=limit, cursor=cursor)
    granularity, anchor, from_, to, group, *more = args
    window = WindowQuery.parse(granularity, anchor, from_, to, group)
    if name == "recall":
        return tower.recall(type_name, window, limit=more[0])
    if name == "get_summary":
        return tower.get_summary(type_name, window, summarize_on_miss=more[0])
    return tower.summarize(type_name, window)


def test_arbitrary_calls_are_done_or_refused_by_field_and_write_nothing_when_refused(store):
    tower = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="t", partition=p), run_jobs="inline")
    tower.create_type("proj/x", chain=["1h", "day", "week"], summaries=True, group_field="project")

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(CALLS)
    def check(call):
        name, first, rest = call
        before = _counts(store)
        try:
            if name == "append":
                tower.append(first, rest)
            elif name == "create_type":
                tower.create_type(first, **rest)
            elif name == "update_type":
                tower.update_type(first, rest)
            elif name in ("recall", "get_summary", "summarize", "windows"):
                _window_call(tower, name, first, rest)
            else:
                tower.__getattribute__(name)(first)
        except TowerInputError as exc:
            assert "field '" in str(exc)
            assert _counts(store) == before  # nothing half-written

    check()


def test_dates_out_of_range_are_refused_naming_the_field(store):
    tower = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="t", partition=p), run_jobs="inline")
    for g in ("day", "week"):
        for anchor in ("9999-12-31", "0001-01-01", "1969-06-01"):
            for call in (tower.recall, tower.get_summary, tower.summarize, tower.windows):
                try:
                    call("worklog", WindowQuery.parse(g, anchor))
                except TowerInputError as exc:
                    assert str(exc).startswith("field 'anchor': is out of range (supported: 1970-01-01"), str(exc)
                else:
                    raise AssertionError(f"{call.__name__} {g} {anchor} was not refused")
    for lo, hi, field in (("0001-01-01", "2026-01-01", "from"), ("2026-01-01", "9999-12-31", "to")):
        for call in (tower.recall, tower.get_summary, tower.summarize):
            try:
                call("worklog", WindowQuery.parse(from_=lo, to=hi))
            except TowerInputError as exc:
                assert str(exc).startswith(f"field '{field}': is out of range"), str(exc)
            else:
                raise AssertionError(f"{call.__name__} {lo}..{hi} was not refused")
