"""Seed 004's window arguments: WindowQuery (the one value the CLI, the Python API and the MCP tools
pass) refuses a bad shape or value naming the field; recall.resolve adds what a type's chain and the
zone decide."""

import dataclasses
from datetime import UTC, date, datetime

import pytest

from memory_pipeline.tower.logic import RANGE, Granularity, TowerInputError, WindowQuery
from memory_pipeline.tower.recall import Spec, resolve
from memory_pipeline.tower.types import MemoryType
from memory_pipeline_tests.conftest import CST

AT = "2026-01-05T10:00:00+08:00"
LATER = "2026-01-05T12:00:00+08:00"


def _field(**raw: object) -> str:
    with pytest.raises(TowerInputError) as caught:
        WindowQuery.parse(**raw)
    return caught.value.field


def test_parse_keeps_dates_and_instants_apart_and_types_the_level():
    q = WindowQuery.parse("day", "2026-01-05", group="alpha")
    assert q == WindowQuery(Granularity.DAY, date(2026, 1, 5), group="alpha")
    assert type(q.anchor) is date  # its midnight is the tower's zone's, found when resolved
    ranged = WindowQuery.parse(from_=AT, to=" 2026-01-05T04:00:00Z ")
    assert ranged.from_ == datetime(2026, 1, 5, 2, tzinfo=UTC) and ranged.to == datetime(2026, 1, 5, 4, tzinfo=UTC)
    assert WindowQuery.parse() == WindowQuery()  # `windows` over the chain's coarsest level
    assert WindowQuery.parse(group="").group == ""  # the empty group is a group
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.group = "beta"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        # The shape: one kind of window, wholly.
        ({"granularity": "day", "anchor": "2026-01-05", "from_": AT, "to": LATER}, "from"),
        ({"anchor": "2026-01-05", "from_": AT, "to": LATER}, "from"),
        ({"granularity": "day", "to": LATER}, "from"),
        ({"from_": AT}, "to"),
        ({"to": LATER}, "from"),
        # ... before the values: a call naming both kinds is refused as such.
        ({"granularity": "day", "anchor": "garbage", "from_": AT}, "from"),
        # Each value.
        ({"granularity": "year", "anchor": "2026-01-05"}, "granularity"),
        ({"granularity": 3, "anchor": "2026-01-05"}, "granularity"),
        ({"granularity": "day", "anchor": "2026-13-01"}, "anchor"),
        ({"granularity": "day", "anchor": "2026-01-05T10:00:00"}, "anchor"),  # no offset
        ({"granularity": "day", "anchor": "0001-01-01T00:00:00+00:00"}, "anchor"),  # out of range
        ({"granularity": "day", "anchor": 20260105}, "anchor"),
        ({"from_": "yesterday", "to": LATER}, "from"),
        ({"from_": AT, "to": "2026-01-05T12:00:00+08:00:30"}, "to"),  # an offset with seconds
        ({"granularity": "day", "anchor": "2026-01-05T10:00:00+08:00:30"}, "anchor"),
        ({"from_": AT, "to": ["2026-01-06"]}, "to"),
        ({"granularity": "day", "anchor": "2026-01-05", "group": "../x"}, "group"),
        ({"granularity": "day", "anchor": "2026-01-05", "group": 7}, "group"),
    ],
)
def test_each_bad_shape_or_value_is_refused_naming_its_field(raw, field):
    assert _field(**raw) == field


def test_an_offset_with_seconds_is_refused_as_any_bad_time_naming_the_argument():
    """Python's fromisoformat reads +08:00:30; ISO 8601 offsets, the ones to send, are ±HH:MM."""
    with pytest.raises(TowerInputError) as caught:
        WindowQuery.parse(from_="2026-01-05T10:00:00+08:00:30", to=LATER)
    with pytest.raises(TowerInputError) as garbage:
        WindowQuery.parse(from_="yesterday", to=LATER)
    assert str(caught.value) == str(garbage.value)
    assert str(caught.value) == "field 'from': is not an ISO 8601 datetime (want e.g. 2026-01-15T10:00:00+08:00)"
    assert WindowQuery.parse(from_="2026-01-05T10:00+0800", to="2026-01-05T12:00+08").from_ == datetime(
        2026, 1, 5, 2, tzinfo=UTC
    )  # ±HHMM and ±HH are ISO 8601 too


def test_building_one_directly_checks_the_same_rules():
    with pytest.raises(TowerInputError) as caught:
        WindowQuery(Granularity.DAY, from_=date(2026, 1, 5), to=date(2026, 1, 6))
    assert caught.value.field == "from"
    with pytest.raises(TowerInputError) as caught:
        WindowQuery(from_=date(2026, 1, 5))
    assert caught.value.field == "to"
    with pytest.raises(TowerInputError) as caught:
        WindowQuery(Granularity.DAY, datetime(2026, 1, 5, 10))  # naive
    assert caught.value.field == "anchor"
    with pytest.raises(TowerInputError) as caught:
        WindowQuery(Granularity.DAY, date(2026, 1, 5), group="a b")
    assert caught.value.field == "group"


WORKLOG = MemoryType(
    name="worklog",
    description="",
    chain=(Granularity.DAY, Granularity.WEEK),
    summary_cap=Granularity.WEEK,
    summaries_enabled=True,
    summaries_enabled_at=None,
    group_field="project",
    retention=None,
    builtin=True,
    archived_at=None,
    created_at=datetime(2026, 1, 1, tzinfo=UTC),
    updated_at=datetime(2026, 1, 1, tzinfo=UTC),
)


def test_resolve_finds_the_window_in_the_types_chain_and_the_zone():
    week = resolve(WORKLOG, CST, WindowQuery.parse("week", "2026-01-07"))
    assert week == Spec("week", datetime(2026, 1, 5, tzinfo=CST), datetime(2026, 1, 12, tzinfo=CST))
    ranged = resolve(WORKLOG, CST, WindowQuery.parse(from_="2026-01-05", to=LATER))
    assert ranged == Spec(RANGE, datetime(2026, 1, 5, tzinfo=CST), datetime(2026, 1, 5, 12, tzinfo=CST))


@pytest.mark.parametrize(
    ("raw", "field", "problem"),
    [
        ({}, "granularity", "required (one of day, week), or from + to"),
        ({"anchor": "2026-01-05"}, "granularity", "required (one of day, week), or from + to"),
        ({"granularity": "1h", "anchor": "2026-01-05"}, "granularity", "not in worklog's chain (day → week)"),
        ({"granularity": "day"}, "anchor", "required with granularity"),
        ({"granularity": "day", "anchor": "9999-12-31"}, "anchor", "is out of range"),  # midnight in CST
        ({"from_": LATER, "to": AT}, "to", "must be after from"),
        ({"from_": "2026-01-05", "to": "2026-01-05"}, "to", "must be after from"),
    ],
)
def test_resolve_refuses_what_the_type_or_the_zone_rules_out(raw, field, problem):
    q = WindowQuery.parse(**raw)
    with pytest.raises(TowerInputError) as caught:
        resolve(WORKLOG, CST, q)
    assert caught.value.field == field and caught.value.problem.startswith(problem)
