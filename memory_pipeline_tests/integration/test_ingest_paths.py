"""The streamed, set-based ingest: the PostgreSQL path (COPY into a staging table) and the SQLite
path (batched executemany) store identical rows, and the set-based check of repeats inside a file
decides every line exactly as the sequential rules (``EventBatch``, what LoCoMo files go through)."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Text, cast, select, text

from memory_pipeline import domains
from memory_pipeline.events.ingest import EventBatch, IngestError, ingest_file
from memory_pipeline.events.tables import ingest_batches
from memory_pipeline.lib.store import Store, make_engine
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline_tests.conftest import cst, event

NOW = datetime(2026, 7, 18, tzinfo=UTC)


def _lines() -> list[dict]:
    """Bodies with what COPY's text format escapes (tab, newline, CR, backslash), non-ASCII text,
    tool calls, names and titles, debug and platforms; a repeated line; a world named late."""
    at = cst(2026, 7, 17, 6, 1)
    calls = [{"name": "search", "arguments": {"q": "tab\there", "n": 12345678901234567890123, "f": 1.5}}]
    out = [
        event("w1", "c1", "user", "tab\there, newline\nthere, cr\rhere, back\\slash \\N \\. end", at, mid="m1"),
        event("w1", "c1", "assistant", "", at.replace(minute=2), tool_calls=calls, mid="m2"),
        event("w1", "c2", "user", "汉字 and emoji 🍅 and \u2028", at.replace(minute=3), platform="discord", mid="m3"),
        event("w2", "c3", "tool", '{"ok": true}', at.replace(minute=4), debug=True, mid="m4"),
        event("w2", "c4", "system", "cron", at.replace(minute=5), platform="cron", mid="m5"),
    ]
    out[2] |= {"conversation_title": "a title\\with a backslash", "world_name": None}
    out[3] |= {"world_name": "Second World", "conversation_title": ""}
    out.append(dict(out[0]))  # the same line again: dropped
    out.append(event("w2", "c3", "user", "later", at.replace(hour=23), debug=True, mid="m6") | {"world_name": "W2b"})
    out.append(event("w3", "c5", "user", "zulu", at, mid="m7") | {"timestamp": "2026-07-16T22:01:00Z"})
    return out


def _rows(store: Store) -> dict:
    with store.connect() as conn:
        return {
            "messages": sorted(
                tuple(r)
                for r in conn.execute(
                    select(
                        messages.c.message_id,
                        messages.c.conversation_id,
                        messages.c.role,
                        messages.c.content,
                        cast(messages.c.tool_calls, Text),  # the stored JSON text
                        messages.c.at,
                        messages.c.source,
                    )
                )
            ),
            "conversations": sorted(
                tuple(r)
                for r in conn.execute(
                    select(
                        conversations.c.conversation_id,
                        conversations.c.world_id,
                        conversations.c.platform,
                        conversations.c.debug,
                        conversations.c.title,
                    )
                )
            ),
            "worlds": sorted(
                tuple(r) for r in conn.execute(select(worlds.c.world_id, worlds.c.name, worlds.c.first_event_at))
            ),
            "batches": sorted(
                tuple(r)
                for r in conn.execute(
                    select(
                        ingest_batches.c.lines,
                        ingest_batches.c.inserted,
                        ingest_batches.c.duplicates,
                        ingest_batches.c.rejected,
                    )
                )
            ),
        }


def test_postgresql_and_sqlite_paths_store_identical_rows(store, tmp_path):
    lite = Store(f"sqlite:///{tmp_path}/memory.sqlite")
    ensure_schema(lite, domains.version_locations())
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in _lines()), encoding="utf-8")
    try:
        reports = [ingest_file(s, path, now=NOW) for s in (store, lite)]
        again = [ingest_file(s, path, now=NOW) for s in (store, lite)]
        pg, sq = _rows(store), _rows(lite)
    finally:
        make_engine(lite.url).dispose()
    for r in reports:
        assert (r.lines, r.inserted, r.duplicates, r.new_conversations, r.new_worlds) == (8, 7, 0, 5, 3)
    assert [(r.inserted, r.duplicates) for r in again] == [(0, 7), (0, 7)]
    assert pg == sq
    by_id = {m[0]: m for m in pg["messages"]}
    assert by_id["m1"][3] == _lines()[0]["content"]  # every escaped character came back as it was
    assert json.loads(by_id["m2"][4]) == json.loads(json.dumps(_lines()[1]["tool_calls"]))
    assert by_id["m2"][4] == json.dumps(_lines()[1]["tool_calls"])  # the JSON text as the store writes it
    assert by_id["m1"][4] == "null" and by_id["m1"][6].endswith("events.jsonl:1")
    assert pg["worlds"] == [
        ("w1", "w1", cst(2026, 7, 17, 6, 1)),
        ("w2", "Second World", cst(2026, 7, 17, 6, 4)),
        ("w3", "w3", cst(2026, 7, 17, 6, 1)),
    ]
    assert ("c2", "w1", "discord", False, "a title\\with a backslash") in pg["conversations"]
    assert ("c3", "w2", "local", True, None) in pg["conversations"]


def test_bad_lines_are_located_the_same_on_both_paths(store, tmp_path):
    lite = Store(f"sqlite:///{tmp_path}/memory.sqlite")
    ensure_schema(lite, domains.version_locations())
    lines = _lines()[:3] + [
        {**_lines()[0], "content": "other body"},
        {**_lines()[2], "world_id": "w9", "message_id": "m9"},
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines) + "{broken\n", encoding="utf-8")
    try:
        refused = []
        for s in (store, lite):
            with pytest.raises(IngestError) as info:
                ingest_file(s, path, now=NOW)
            refused.append([str(e) for e in info.value.errors])
        skipped = [[str(e) for e in ingest_file(s, path, now=NOW, skip_bad=True).rejected] for s in (store, lite)]
        pg, sq = _rows(store), _rows(lite)
    finally:
        make_engine(lite.url).dispose()
    assert (
        refused[0]
        == refused[1]
        == skipped[0]
        == skipped[1]
        == [
            f"{path}:4: field 'message_id': 'm1' repeats {path}:1 with different content",
            f"{path}:5: field 'conversation_id': 'c2' has (world, platform, debug) ('w9', 'discord', False), "
            "earlier lines say ('w1', 'discord', False)",
            f"{path}:6: field '<line>': malformed JSON: Expecting property name enclosed in double quotes at column 2",
        ]
    )
    assert pg == sq and [m[0] for m in pg["messages"]] == ["m1", "m2", "m3"]


# --- repeats inside a file: set-based against the sequential rules --------------------------------

_files = itertools.count()
line_strategy = st.fixed_dictionaries(
    {
        "message_id": st.sampled_from(["m1", "m2", "m3", "m4"]),
        "world_id": st.sampled_from(["w1", "w2"]),
        "conversation_id": st.sampled_from(["c1", "c2", "c3"]),
        "role": st.sampled_from(["user", "assistant"]),
        "content": st.sampled_from(["a", "b"]),
        "timestamp": st.sampled_from(["2026-07-17T06:00:00+08:00", "2026-07-16T22:00:00Z", None]),
        "platform": st.sampled_from(["local", "discord"]),
        "debug": st.booleans(),
        # the last two: one value, its keys in two orders
        "tool_calls": st.sampled_from([None, [{"name": "x"}], [{"name": "x", "a": 1}], [{"a": 1, "name": "x"}]]),
    }
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(line_strategy, min_size=1, max_size=8), stored=st.lists(line_strategy, max_size=2))
def test_repeats_and_conflicts_are_decided_as_the_sequential_rules_decide(store, tmp_path, lines, stored):
    with store.begin() as conn:  # each example starts from an empty store
        for table in ("ingest_batches", "messages", "conversations", "worlds"):
            conn.execute(text(f"DELETE FROM {table}"))
    n = next(_files)
    if stored:
        first = tmp_path / f"stored-{n}.jsonl"
        first.write_text("".join(json.dumps(e) + "\n" for e in stored), encoding="utf-8")
        ingest_file(store, first, now=NOW, skip_bad=True)
    with store.connect() as conn:
        before = {r[0]: r for r in conn.execute(select(messages.c.message_id, messages.c.content))}
    path = tmp_path / f"events-{n}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines), encoding="utf-8")

    batch = EventBatch(str(path), NOW)  # the sequential reference
    expected = [str(e) for i, obj in enumerate(lines, start=1) for e in batch.add(obj, i)]
    report = ingest_file(store, path, now=NOW, skip_bad=True)
    got = [str(e) for e in report.rejected]
    assert got[: len(expected)] == expected  # the file's own refusals first, in line order
    with store.connect() as conn:
        stored_rows = conn.execute(select(messages.c.message_id, messages.c.content, messages.c.at)).all()
    after = {mid: content for mid, content, _ in stored_rows}
    refused = {e.where for e in report.rejected[len(expected) :]}  # conflicts with stored rows
    at = {mid: t for mid, _, t in stored_rows}
    # The time a line of the file gives its event, whichever of its lines gives it.
    given = {
        obj["message_id"]: datetime.fromisoformat(obj["timestamp"])
        for i, obj in enumerate(lines, start=1)
        if obj["timestamp"] is not None and i not in {e.where for e in report.rejected}
    }
    for e in batch.events:
        if e["message_id"] not in before and e["_where"] not in refused:
            assert after[e["message_id"]] == e["content"]
            if e["message_id"] in given:
                assert at[e["message_id"]] == given[e["message_id"]]
    assert report.inserted == len(set(after) - set(before))


# --- one id is one event: its world, conversation and tool calls too ---------------------------


def test_an_id_repeated_in_another_world_conversation_or_with_other_tool_calls_is_refused(store, tmp_path):
    """A line reusing a stored id in another world and conversation (or with other tool calls) was
    counted "already present" and dropped, exit 0: that world's event never existed. Within one
    file, the same. Tool calls with their keys in another order are the same value."""
    lite = Store(f"sqlite:///{tmp_path}/memory.sqlite")
    ensure_schema(lite, domains.version_locations())
    base = {"message_id": "m-1", "world_id": "wa", "conversation_id": "c-1", "role": "user", "content": "hello"}
    base["timestamp"] = "2026-01-05T06:12:00+08:00"
    calls = [{"name": "x", "args": {"a": 1, "b": 2}}]
    files = {
        "first": [{**base, "tool_calls": calls}],
        "moved": [{**base, "world_id": "wb", "conversation_id": "c-9"}],
        "calls": [{**base, "tool_calls": [{"name": "y"}]}],
        "same": [{**base, "tool_calls": [{"args": {"b": 2, "a": 1}, "name": "x"}]}],
        "in_file": [
            {**base, "message_id": "q-1"},
            {**base, "message_id": "q-1", "world_id": "wq", "conversation_id": "cq"},
        ],
    }
    paths = {}
    for name, lines in files.items():
        paths[name] = tmp_path / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(e) + "\n" for e in lines), encoding="utf-8")
    try:
        for s in (store, lite):
            assert ingest_file(s, paths["first"], now=NOW).inserted == 1
            refused = {}
            for name in ("moved", "calls", "in_file"):
                with pytest.raises(IngestError) as info:
                    ingest_file(s, paths[name], now=NOW)
                refused[name] = [str(e) for e in info.value.errors]
            assert refused == {
                "moved": [
                    f"{paths['moved']}:1: field 'message_id': 'm-1' is already stored with different conversation_id and tool_calls"
                ],
                "calls": [f"{paths['calls']}:1: field 'message_id': 'm-1' is already stored with different tool_calls"],
                "in_file": [
                    f"{paths['in_file']}:2: field 'message_id': 'q-1' repeats {paths['in_file']}:1 with different world_id and conversation_id"
                ],
            }
            again = ingest_file(s, paths["same"], now=NOW)
            assert (again.inserted, again.duplicates) == (0, 1)
            rows = _rows(s)
            assert [m[0] for m in rows["messages"]] == ["m-1"] and [w[0] for w in rows["worlds"]] == ["wa"], rows
    finally:
        make_engine(lite.url).dispose()


# --- an offset with seconds: refused on every path, by line ---------------------------------------

NOT_ISO = "is not an ISO 8601 datetime (want e.g. 2026-01-15T10:00:00+08:00)"


def _both(tmp_path, store: Store, path, **kw) -> list:
    """ingest_file on PostgreSQL and on SQLite: each report or IngestError, and each store's rows."""
    lite = Store(f"sqlite:///{tmp_path}/memory-{path.stem}.sqlite")
    ensure_schema(lite, domains.version_locations())
    out = []
    try:
        for s in (store, lite):
            try:
                got: object = ingest_file(s, path, now=NOW, **kw)
            except IngestError as exc:
                got = exc
            out.append((got, _rows(s)))
    finally:
        make_engine(lite.url).dispose()
    return out


@pytest.mark.parametrize("offset", ["+08:00:30", "+08:00:30.5", "+08:00:00", "+080030"])
def test_an_offset_with_seconds_is_refused_on_every_line_and_path(store, tmp_path, offset):
    """The fast check of a line read such an offset as Python does: a line holding only it was
    stored, while the same value on a line the exact validator reads (tool calls) was refused."""
    ts = f"2026-07-17T10:00:00{offset}"
    plain = event("w1", "c1", "user", "hi", cst(2026, 7, 17, 6), mid="m1") | {"timestamp": ts}
    path = tmp_path / "single.jsonl"
    path.write_text(json.dumps(plain) + "\n")
    for got, rows in _both(tmp_path, store, path):
        assert isinstance(got, IngestError)
        assert [str(e) for e in got.errors] == [f"{path}:1: field 'timestamp': {ts!r} {NOT_ISO}"]
        assert rows["messages"] == rows["batches"] == []

    bot = event("w1", "c1", "bot", "x", cst(2026, 7, 17, 6), mid="m0")
    calls = plain | {"message_id": "m3", "tool_calls": [{"name": "search"}]}
    good = event("w1", "c1", "user", "fine", cst(2026, 7, 17, 6, 5), mid="m4")
    path = tmp_path / "skip.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in [bot, plain, {**plain, "message_id": "m2"}, calls, good]))
    expected = [
        f"{path}:1: field 'role': unknown role 'bot' (expected one of assistant, system, tool, user)",
        *(f"{path}:{n}: field 'timestamp': {ts!r} {NOT_ISO}" for n in (2, 3, 4)),
    ]
    for got, rows in _both(tmp_path, store, path):
        assert isinstance(got, IngestError) and [str(e) for e in got.errors] == expected
        assert rows["messages"] == rows["batches"] == []
    for got, rows in _both(tmp_path, store, path, skip_bad=True):
        assert not isinstance(got, IngestError)
        assert [str(e) for e in got.rejected] == expected
        assert [m[0] for m in rows["messages"]] == ["m4"]
        assert rows["batches"] == [(5, 1, 0, 4)]


def test_skip_bad_counts_rejected_lines_not_problems(store, tmp_path):
    """A line with four faults was four rejected: its file of two lines reported 2 lines, 1
    inserted, 4 rejected, and ingest_batches kept that sum beyond its lines."""
    good = event("w1", "c1", "user", "hi", cst(2026, 7, 17, 6), mid="m1")
    bad = event("w:1", "c1", "bot", "x", cst(2026, 7, 17, 6), mid="m2") | {"timestamp": "soon", "debug": "x"}
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    first = _both(tmp_path, store, path, skip_bad=True)
    for got, rows in first:
        assert not isinstance(got, IngestError)
        assert [(e.line, e.field) for e in got.rejected] == [
            (2, "world_id"),
            (2, "role"),
            (2, "timestamp"),
            (2, "debug"),
        ]
        assert rows["batches"] == [(2, 1, 0, 1)]  # lines, inserted, already present, rejected
        assert (got.lines, got.inserted, got.duplicates, got.rejected_lines) == (2, 1, 0, 1)
    lite = Store(f"sqlite:///{tmp_path}/memory-{path.stem}.sqlite")  # the SQLite store _both wrote
    try:
        again = [ingest_file(s, path, now=NOW, skip_bad=True) for s in (store, lite)]
        batches = [_rows(s)["batches"] for s in (store, lite)]
    finally:
        make_engine(lite.url).dispose()
    assert batches == [[(2, 0, 1, 1), (2, 1, 0, 1)]] * 2  # the re-run: 1 already present, the same line rejected
    for r in again:
        assert (r.lines, r.inserted, r.duplicates, r.rejected_lines, len(r.rejected)) == (2, 0, 1, 1, 4)
