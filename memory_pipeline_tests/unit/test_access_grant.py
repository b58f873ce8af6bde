"""A token's grant refuses a world it does not hold by name, shown whole up to an id's longest."""

import pytest

from memory_pipeline.access.logic import AccessError, Grant
from memory_pipeline.lib.ids import MAX_ID_CHARS


def test_a_world_not_held_is_named_and_a_huge_argument_is_not_repeated():
    grant = Grant("a", frozenset({"wa"}), read_only=False)
    grant.require_world("wa")
    with pytest.raises(AccessError, match=r"^world 'wb': not one of this token's worlds$"):
        grant.require_world("wb")
    longest = "w" * MAX_ID_CHARS
    with pytest.raises(AccessError) as whole:
        grant.require_world(longest)
    assert repr(longest) in str(whole.value)
    with pytest.raises(AccessError) as cut:
        grant.require_world("x" * 100_000)  # the refusal repeated all 100,000 characters
    assert len(str(cut.value)) < 200 and "…: not one of this token's worlds" in str(cut.value)
