"""Property tests on the real store: whatever bytes, JSON lines or LoCoMo-shaped documents come in,
the only exception is IngestError, every refusal names its file and location, no refusal echoes a
message body, and the store changes by exactly the accepted events or not at all."""

import itertools
import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from memory_pipeline.events.ingest import ROLES, IngestError, ingest_file
from memory_pipeline.events.locomo import import_locomo
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline_tests.conftest import CST, locomo_doc, write_locomo

NOW = datetime(2026, 7, 18, tzinfo=UTC)
MARK = "SECRETBODY"  # put in bodies only: no refusal may contain it
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
_files = itertools.count()

any_text = st.text(st.characters(exclude_categories=()), max_size=12)  # surrogates and NULs included
scalars = st.none() | st.booleans() | st.integers() | st.floats() | any_text
json_values = st.recursive(
    scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(any_text, kids, max_size=3), max_leaves=8
)
times = st.datetimes(
    min_value=datetime(1969, 12, 30),
    max_value=datetime(2026, 7, 19),
    timezones=st.sampled_from([UTC, CST, ZoneInfo("America/New_York")]),
)
good_event = st.fixed_dictionaries(
    {
        "message_id": st.sampled_from(["m1", "m2", "m3", "m.4"]),
        "world_id": st.sampled_from(["w1", "w2"]),
        "conversation_id": st.sampled_from(["c1", "c2", "c3"]),
        "role": st.sampled_from(sorted(ROLES)),
        "content": st.text(max_size=20).map(lambda t: MARK + t),
        "timestamp": times.map(lambda t: t.isoformat()),
    },
    optional={
        "platform": st.sampled_from(["local", "discord", "remote:x"]),
        "debug": st.booleans(),
        "tool_calls": st.none()
        | st.lists(
            st.fixed_dictionaries({"name": st.sampled_from(["search", "fetch"])}, optional={"arguments": json_values}),
            max_size=2,
        ),
        "world_name": st.text(max_size=10),
        "conversation_title": st.text(max_size=10),
    },
)
FIELDS = ["message_id", "world_id", "conversation_id", "role", "content", "timestamp", "platform", "debug"]
FIELDS += ["tool_calls", "world_name", "conversation_title"]


@st.composite
def mutated_event(draw):
    """A good event with some fields replaced by anything (bodies keep the mark) or dropped."""
    event = draw(good_event)
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=3)):
        value = draw(json_values | any_text)
        if name == "content" and isinstance(value, str):
            value = MARK + value
        event[name] = value
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=1)):
        event.pop(name, None)
    return event


@st.composite
def jsonl_line(draw) -> bytes:
    kind = draw(st.sampled_from(["good", "mutated", "json", "bytes", "deep"]))
    if kind == "bytes":
        return draw(st.binary(max_size=40)).replace(b"\n", b" ")
    if kind == "deep":
        return b"[" * draw(st.integers(500, 5000))
    value = draw({"good": good_event, "mutated": mutated_event(), "json": json_values}[kind])
    if draw(st.booleans()):
        return json.dumps(value).encode()  # surrogates and NULs as \u escapes
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")  # raw: not UTF-8


def _counts(store) -> tuple[int, int, int]:
    with store.connect() as conn:
        return tuple(
            conn.execute(select(func.count()).select_from(t)).scalar_one() for t in (messages, conversations, worlds)
        )


def _check_located(errors, source: str, lines: int | None) -> None:
    assert errors
    for e in errors:
        assert e.source == source and e.field and e.problem
        if isinstance(e.where, int):
            assert lines is None or 1 <= e.where <= lines
        else:
            assert e.where.startswith("$")
        assert str(e).startswith(f"{source}:{e.where}: field '{e.field}': ")
        assert MARK not in str(e)


def _check_outcome(store, before, run, source: str, lines: int | None) -> None:
    try:
        report = run()
    except IngestError as exc:
        _check_located(exc.errors, source, lines)
        assert "nothing was written" in str(exc) and MARK not in str(exc)
        assert _counts(store) == before
        event("refused")
        return
    after = _counts(store)
    assert after == (
        before[0] + report.inserted,
        before[1] + report.new_conversations,
        before[2] + report.new_worlds,
    )
    if report.rejected:
        _check_located(report.rejected, source, lines)
    if lines is not None:  # a line with several faults is one rejected line: the counts add up to the lines
        assert report.inserted + report.duplicates + report.rejected_lines <= report.lines == lines
    event("written, some skipped" if report.rejected else "written" if report.inserted else "nothing new")


def _read_back(store) -> None:
    """What was accepted is readable the way the read path reads it."""
    with store.connect() as conn:
        for content, calls, at in conn.execute(select(messages.c.content, messages.c.tool_calls, messages.c.at)):
            assert isinstance(content, str) and at.tzinfo is not None
            assert calls is None or all(isinstance(c, dict) and isinstance(c["name"], str) for c in calls)


@SETTINGS
@given(lines=st.lists(jsonl_line(), min_size=1, max_size=6), skip_bad=st.booleans())
def test_any_jsonl_is_written_whole_or_refused_cleanly(store, tmp_path, lines, skip_bad):
    path = tmp_path / f"events-{next(_files)}.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    before = _counts(store)
    _check_outcome(store, before, lambda: ingest_file(store, path, skip_bad=skip_bad, now=NOW), str(path), len(lines))
    _read_back(store)


TURN_KEYS = ["speaker", "text", "dia_id", "blip_caption"]


@st.composite
def locomo_document(draw):
    """locomo_doc() with a few values anywhere replaced by anything, sessions added or dropped."""
    doc = locomo_doc(sessions=draw(st.integers(0, 3)), turns=draw(st.integers(0, 3)))
    sessions = [k for k in doc if k.startswith("session_") and k[8:].isdigit()]
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["header", "date", "session", "turn", "new"]))
        value = draw(json_values | any_text)
        if where == "header":
            doc[draw(st.sampled_from(["speaker_a", "speaker_b"]))] = value
        elif where == "date" and sessions:
            doc[f"{draw(st.sampled_from(sessions))}_date_time"] = value
        elif where == "session" and sessions:
            doc[draw(st.sampled_from(sessions))] = value
        elif where == "turn" and sessions:
            turns = doc[draw(st.sampled_from(sessions))]
            if isinstance(turns, list) and turns:
                turn = turns[draw(st.integers(0, len(turns) - 1))]
                if isinstance(turn, dict):
                    key = draw(st.sampled_from(TURN_KEYS))
                    turn[key] = MARK + value if key == "text" and isinstance(value, str) else value
        elif where == "new":
            doc[f"session_{draw(st.integers(0, 12))}"] = draw(st.lists(json_values, max_size=2))
    return {"conversation": doc} if draw(st.booleans()) else doc


@st.composite
def locomo_file(draw) -> bytes:
    kind = draw(st.sampled_from(["doc", "doc", "doc", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=60))
    value = draw(locomo_document() if kind == "doc" else json_values)
    text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    return text.encode("utf-8", "surrogatepass")


@SETTINGS
@given(content=locomo_file(), skip_bad=st.booleans())
def test_any_locomo_file_is_imported_whole_or_refused_cleanly(store, tmp_path, content, skip_bad):
    path = write_locomo(tmp_path, content, name=f"{next(_files)}.json")
    before = _counts(store)
    _check_outcome(store, before, lambda: import_locomo(store, path, CST, skip_bad=skip_bad, now=NOW), str(path), None)
    _read_back(store)
