"""The id alphabet (lib/ids.py): what reaches a colon-separated cache key is always safe there."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipeline.lib.ids import ID_ALPHABET, ID_PATTERN, ID_RE, MAX_ID_CHARS, is_id, validate_id
from memory_pipeline.lib.text import text_problem

GOOD = ["m1", "locomo-26.D1.3", "locomo-26.session-1", "a@b.c", "x+y=z", "team/agent#2", "_", "a" * 128, "a.b.c"]
BAD = {
    "": "must not be empty",
    "a" * 129: "too long: 129 characters (ids are 1-128 characters",
    "w:1": "character ':' at position 1 is not allowed",
    "a*": "character '*' at position 1",
    "a?": "character '?'",
    "[a]": "character '['",
    "a b": "character ' '",
    "a\tb": "character '\\t'",
    "a\nb": "character '\\n'",
    "a\x00": "character '\\x00'",
    "\x7f": "character '\\x7f'",
    "wé": "character 'é'",
    "\ud800": "character '\\ud800'",
    "a%b": "character '%'",
    "/abs": "must not start with '/'",
    "a..b": "must not contain '..'",
    "..": "must not contain '..'",
}


@pytest.mark.parametrize("value", GOOD)
def test_good_ids(value):
    assert validate_id(value) is None and is_id(value) and ID_RE.fullmatch(value)


@pytest.mark.parametrize("value,problem", BAD.items(), ids=[repr(k[:12]) for k in BAD])
def test_bad_ids_name_the_problem_and_the_alphabet(value, problem):
    found = validate_id(value)
    assert found is not None and problem in found and not is_id(value)
    assert ID_ALPHABET in found


@pytest.mark.parametrize("value", [None, 7, ["a"], {"a": 1}, 1.5, True])
def test_non_strings_are_not_ids(value):
    assert validate_id(value).startswith("must be a string") and not is_id(value)


def test_the_pattern_is_the_documented_alphabet():
    assert ID_ALPHABET == "A-Z a-z 0-9 . _ - @ + = / #" and MAX_ID_CHARS == 128
    assert re.fullmatch(ID_PATTERN, "a/b#c") and not re.fullmatch(ID_PATTERN, "a/b#c\n")


CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=140), st.text(alphabet="abc:.*/ _-#@+=[]?\x00\n", max_size=12)))
def test_anything_accepted_is_safe_in_a_cache_key(value):
    problem = validate_id(value)
    assert (problem is None) == is_id(value) == bool(ID_RE.fullmatch(value))
    if problem is None:
        assert 1 <= len(value) <= MAX_ID_CHARS
        assert not any(c in value for c in ":*?[] ") and not any(c.isspace() for c in value)
        assert not CONTROL.search(value) and value.isascii()
        assert not value.startswith("/") and ".." not in value
        assert text_problem(value, MAX_ID_CHARS) is None  # storable as UTF-8 text as well
    else:
        assert isinstance(problem, str) and problem


@settings(max_examples=100, deadline=None)
@given(st.from_regex(ID_RE, fullmatch=True))
def test_everything_the_pattern_generates_is_accepted(value):
    assert validate_id(value) is None


def test_an_id_as_a_path_segment_is_one_folder_of_its_own():
    """Ids may hold '/' and '.': as folder names, 'odd', 'odd/', './odd' and 'odd/.' were one
    folder (deep sleep's round logs of four worlds overwrote each other), '.' the parent itself,
    and 'aria/person' a folder inside world aria's own."""
    from pathlib import Path

    from memory_pipeline.lib.ids import path_segment, validate_id

    ids = ["odd", "odd/", "./odd", "odd/.", ".", "aria", "aria/person", "a#b", "a@b+c=d", "x.y", ".hidden", "%41"]
    assert all(validate_id(i) is None for i in ids if i != "%41")
    segments = [path_segment(i) for i in ids]
    assert len(set(segments)) == len(ids)  # one to one
    for seg in segments:
        assert "/" not in seg and not seg.startswith(".") and Path(seg).name == seg
    assert path_segment("aria") == "aria" and path_segment("x.y") == "x.y"  # plain ids are their own name
    assert path_segment("aria/person") == "aria%2Fperson" and path_segment(".") == "%2E"
