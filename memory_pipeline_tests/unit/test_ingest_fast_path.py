"""The ingest fast path (orjson and a short check) never accepts a line the one validator refuses,
and stages exactly the row the validator's event makes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipeline.events import staging
from memory_pipeline.events.ingest import FUTURE_TOLERANCE, _fast_row, validate_event

NOW = datetime(2026, 7, 18, tzinfo=UTC)
SOURCE = "events.jsonl"

any_text = st.text(st.characters(exclude_categories=()), max_size=8)  # NUL, controls, surrogates
scalars = st.none() | st.booleans() | st.integers() | st.floats() | any_text
json_values = st.recursive(
    scalars, lambda kids: st.lists(kids, max_size=2) | st.dictionaries(any_text, kids, max_size=2)
)
stamps = st.sampled_from(
    [
        "2026-07-18T06:12:00+08:00",
        "2026-07-17T22:01:00Z",
        "2026-07-17T22:01:00z",
        "2026-07-18T00:00:59+00:00",  # within the minute of tolerance
        "2026-07-18T00:01:01+00:00",  # in the future
        "2026-07-18T06:12:00",  # naive
        " 2026-07-18T06:12:00+08:00",
        "1969-12-31T23:59:59Z",
        "9999-12-31T23:59:59-08:00",
        "2026-07-18 06:12:00+08:00",
        "20260718T061200+0800",
        "",
    ]
)
ids = st.sampled_from(["m1", "w.1", "c_1-@+=/#", "/x", "a..b", "a:b", "x" * 128, "x" * 129, "", "é"])
event_lines = st.fixed_dictionaries(
    {
        "message_id": ids,
        "world_id": ids,
        "conversation_id": ids,
        "role": st.sampled_from(["user", "assistant", "tool", "system", "narrator", ""]),
        "timestamp": stamps,
    },
    optional={
        "content": st.none() | any_text | st.sampled_from(["x" * 100_000, "x" * 100_001]) | json_values,
        "platform": st.none() | any_text | st.sampled_from(["discord", "p" * 64, "p" * 65]) | json_values,
        "world_name": st.none() | any_text | st.sampled_from(["n" * 256, "n" * 257]),
        "conversation_title": st.none() | any_text | st.sampled_from(["t\u2028", "\xa0"]),
        "debug": json_values,
        "tool_calls": st.none() | json_values | st.just([{"name": "search", "arguments": {"n": 10**25}}]),
        "extra": json_values,
    },
)


def _fast(raw: bytes):
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return _fast_row(obj, 7, SOURCE, NOW + FUTURE_TOLERANCE)


@settings(max_examples=600, deadline=None)
@given(line=event_lines, ascii_only=st.booleans())
def test_the_fast_path_accepts_only_what_the_validator_accepts_and_stages_the_same_row(line, ascii_only):
    raw = json.dumps(line, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    row = _fast(raw)
    if row is None:
        return
    event, errors = validate_event(json.loads(raw.decode("utf-8")), SOURCE, 7, NOW)
    assert errors == [] and event is not None
    assert row == staging.event_row(event, 7)


def test_an_ordinary_line_takes_the_fast_path():
    line = {
        "message_id": "m-1",
        "world_id": "agent-a",
        "conversation_id": "c-1",
        "platform": "discord",
        "debug": False,
        "role": "user",
        "content": "hello\tthere",
        "tool_calls": None,
        "world_name": "Agent A",
        "timestamp": "2026-07-18T06:12:00+08:00",
    }
    row = _fast(json.dumps(line).encode())
    assert row == (
        7,
        "m-1",
        "agent-a",
        "Agent A",
        "c-1",
        None,
        "discord",
        False,
        "user",
        "hello\tthere",
        "null",
        datetime(2026, 7, 17, 22, 12, tzinfo=UTC),
        f"{SOURCE}:7",
    )
    assert _fast(json.dumps(line | {"timestamp": (NOW + timedelta(minutes=2)).isoformat()}).encode()) is None
