"""Seed 004's window arguments: WindowQuery refuses a bad shape or value naming the field."""

import dataclasses
from datetime import UTC, date, datetime

import pytest

from memory_pipeline.tower.logic import Granularity, TowerInputError, WindowQuery

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
        ({"from_": AT, "to": ["2026-01-06"]}, "to"),
        ({"granularity": "day", "anchor": "2026-01-05", "group": "../x"}, "group"),
        ({"granularity": "day", "anchor": "2026-01-05", "group": 7}, "group"),
    ],
)
def test_each_bad_shape_or_value_is_refused_naming_its_field(raw, field):
    assert _field(**raw) == field


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
