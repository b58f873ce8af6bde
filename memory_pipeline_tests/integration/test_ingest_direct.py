"""The direct write (``events.direct``) on PostgreSQL: a file of new lines goes straight into the
tables, chunk by chunk, and stores exactly what the staging path stores; a file that is not all new
(a repeat, a stored id, a disagreeing conversation, a bad line not to be skipped) is rolled back
and takes the staging path, with its refusals, counts and rows. Chunks are made tiny here (2, then
3 lines) so every file spans several; each outcome is compared with ``direct=False`` (the staging
path alone) on a second schema, and which path wrote is observed at ``staging.load``."""

from __future__ import annotations

import itertools
import json
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, func, insert, select, text

from memory_pipeline import domains
from memory_pipeline.events import direct, staging
from memory_pipeline.events.ingest import IngestError, ingest_file
from memory_pipeline.events.tables import ingest_batches
from memory_pipeline.lib.store import Store, make_engine
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import conversations, worlds
from memory_pipeline_tests.conftest import PG_URL, cst, event, fresh_schema, wait_until_blocked_on_a_lock
from memory_pipeline_tests.integration.test_ingest_paths import _rows

NOW = datetime(2026, 7, 18, tzinfo=UTC)


@pytest.fixture
def staging_store():
    """A second schema, written by the staging path alone (the reference)."""
    with fresh_schema() as url:
        store = Store(url)
        ensure_schema(store, domains.version_locations())
        yield store


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(direct, "FIRST_CHUNK_ROWS", 2)
    monkeypatch.setattr(direct, "CHUNK_ROWS", 3)


@pytest.fixture
def staged(monkeypatch):
    """The dialects ``staging.load`` ran on: empty when the direct write wrote the file."""
    calls: list[str] = []
    load = staging.load

    def spy(conn, rows):
        calls.append(conn.dialect.name)
        return load(conn, rows)

    monkeypatch.setattr(staging, "load", spy)
    return calls


def _write(path, lines) -> None:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)) + "\n" for line in lines),
        encoding="utf-8",
    )


def _outcome(store, path, **kw) -> tuple:
    try:
        r = ingest_file(store, path, now=NOW, **kw)
    except IngestError as exc:
        return ("refused", [str(e) for e in exc.errors])
    return (
        "written",
        r.lines,
        r.inserted,
        r.duplicates,
        r.new_worlds,
        r.new_conversations,
        [str(e) for e in r.rejected],
    )


def _both(store, staging_store, staged, path, **kw) -> tuple:
    """The outcome of the default ingest and of the staging path alone (which must agree, rows
    included); and the dialects the default ingest staged on."""
    before = len(staged)
    got = _outcome(store, path, **kw)
    fell_back = staged[before:]
    before = len(staged)
    want = _outcome(staging_store, path, direct=False, **kw)
    assert staged[before:] == ["postgresql"]
    assert got == want
    assert _rows(store) == _rows(staging_store)
    return got, fell_back


def _stored_first(stores, tmp_path, lines) -> None:
    path = tmp_path / "stored.jsonl"
    _write(path, lines)
    for s in stores:
        ingest_file(s, path, now=NOW, direct=False)


def test_a_file_of_new_lines_is_written_directly_as_the_staging_path_writes_it(
    store, staging_store, staged, small_chunks, tmp_path
):
    at = cst(2026, 7, 17, 6, 1)
    _stored_first(
        (store, staging_store), tmp_path, [event("w3", "c9", "user", "stored", at.replace(hour=12), mid="p1")]
    )
    calls = [{"name": "search", "arguments": {"q": "tab\there", "n": 12345678901234567890123}}]
    lines = [
        event("w1", "c1", "user", "tab\there, back\\slash \\N", at, mid="m1"),  # chunk 1 (2 rows)
        event("w2", "c2", "user", "hi", at.replace(minute=2), mid="m2")
        | {"world_name": "Second World", "conversation_title": "first title"},
        event("w1", "c1", "assistant", "", at.replace(minute=3), tool_calls=calls, mid="m3"),  # chunk 2 (3 rows)
        event("w1", "c1", "narrator", "a bad line, skipped", at, mid="m-bad"),
        event("w2", "c2", "user", "later", at.replace(minute=5), mid="m4")
        | {"world_name": "Later Name", "conversation_title": "later title"},
        event("w3", "c9", "assistant", "earlier than the stored one", at.replace(hour=5), mid="m5"),
        event("w1", "c3", "user", "汉字 🍅", at.replace(minute=7), platform="discord", debug=True, mid="m6")
        | {"world_name": "First World"},  # chunk 3: w1 was created without a name in chunk 1
        event("w1", "c1", "user", "again", at.replace(minute=9), mid="m7"),
        event("w4", "c4", "user", "zulu", at, mid="m8") | {"timestamp": "2026-07-16T22:01:00Z"},
    ]
    path = tmp_path / "events.jsonl"
    _write(path, lines)
    got, fell_back = _both(store, staging_store, staged, path, skip_bad=True)

    assert fell_back == []  # written directly
    assert got == (
        "written",
        9,
        8,
        0,
        3,
        4,
        [
            f"{path}:4: field 'role': unknown role 'narrator' (expected one of assistant, system, tool, user)",
        ],
    )
    rows = _rows(store)
    assert rows["worlds"] == [
        ("w1", "First World", at),
        ("w2", "Second World", at.replace(minute=2)),
        ("w3", "w3", at.replace(hour=5)),  # lowered; a stored world keeps its name
        ("w4", "w4", at),
    ]
    assert ("c2", "w2", "local", False, "first title") in rows["conversations"]
    assert ("c3", "w1", "discord", True, None) in rows["conversations"]
    by_id = {m[0]: m for m in rows["messages"]}
    assert by_id["m1"][3] == lines[0]["content"] and by_id["m6"][3] == "汉字 🍅"
    assert by_id["m3"][4] == json.dumps(calls) and by_id["m1"][4] == "null"
    assert by_id["m8"][5] == at and by_id["m5"][6].endswith("events.jsonl:6")
    for s in (store, staging_store):  # the stored conversation got a message: touched at the ingest's time
        with s.connect() as conn:
            batch_at = conn.execute(select(func.max(ingest_batches.c.at))).scalar_one()
            c9 = conn.execute(
                select(conversations.c.created_at, conversations.c.updated_at).where(
                    conversations.c.conversation_id == "c9"
                )
            ).one()
            c1 = conn.execute(
                select(conversations.c.created_at, conversations.c.updated_at).where(
                    conversations.c.conversation_id == "c1"
                )
            ).one()
        assert c9.updated_at == batch_at and c9.created_at < batch_at
        assert c1.created_at == c1.updated_at == batch_at

    again, fell_back = _both(store, staging_store, staged, path, skip_bad=True)
    assert fell_back == ["postgresql"]  # every id is stored: the primary key sent it the staging path
    assert again[:6] == ("written", 9, 0, 8, 0, 0)


def _line(mid, world="w1", conv="c1", content="body", minute=1, platform="local") -> dict:
    return event(world, conv, "user", content, cst(2026, 7, 17, 6, minute), platform=platform, mid=mid)


FALLBACKS = {
    # name: (stored lines, file lines, skip_bad, what the staging path decides)
    "the same line again in a later chunk": (
        [],
        [_line(f"m{i}", minute=i) for i in range(1, 6)] + [_line("m1", minute=1)],
        False,
        ("written", 6, 5, 0, 1, 1, []),
    ),
    "an id again with another body in a later chunk": (
        [],
        [_line(f"m{i}", minute=i) for i in range(1, 6)] + [_line("m1", content="other", minute=1)],
        False,
        ("refused", ["{path}:6: field 'message_id': 'm1' repeats {path}:1 with different content"]),
    ),
    "an id twice in one chunk": (
        [],
        [_line("m1"), _line("m1"), _line("m2", minute=2)],
        False,
        ("written", 3, 2, 0, 1, 1, []),
    ),
    "an id stored before": (
        [_line("m3", minute=3)],
        [_line(f"m{i}", minute=i) for i in range(1, 6)],
        False,
        ("written", 5, 4, 1, 0, 0, []),
    ),
    "a conversation on another platform in a later chunk": (
        [],
        [_line(f"m{i}", minute=i) for i in range(1, 5)] + [_line("m5", minute=5, platform="discord")],
        True,
        (
            "written",
            5,
            4,
            0,
            1,
            1,
            [
                "{path}:5: field 'conversation_id': 'c1' has (world, platform, debug) ('w1', 'discord', False), "
                "earlier lines say ('w1', 'local', False)"
            ],
        ),
    ),
    "a conversation stored with another platform": (
        [_line("p1", platform="cron")],
        [_line(f"m{i}", minute=i) for i in range(1, 4)],
        False,
        (
            "refused",
            [
                f"{{path}}:{i}: field 'conversation_id': 'c1' is stored with (world, platform, debug) ('w1', 'cron', False),"
                " this line says ('w1', 'local', False)"
                for i in (1, 2, 3)
            ],
        ),
    ),
    "a bad line, not skipped": (
        [],
        [_line("m1"), _line("m2", minute=2), _line("m3", minute=3), "{broken"],
        False,
        (
            "refused",
            ["{path}:4: field '<line>': malformed JSON: Expecting property name enclosed in double quotes at column 2"],
        ),
    ),
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_a_file_that_is_not_all_new_falls_back_to_the_staging_path(
    store, staging_store, staged, small_chunks, tmp_path, case
):
    stored, lines, skip_bad, decided = FALLBACKS[case]
    if stored:
        _stored_first((store, staging_store), tmp_path, stored)
        staged.clear()
    path = tmp_path / "events.jsonl"
    _write(path, lines)
    got, fell_back = _both(store, staging_store, staged, path, skip_bad=skip_bad)
    assert fell_back == ["postgresql"]
    expected = (decided[0], [e.format(path=path) for e in decided[1]]) if decided[0] == "refused" else decided
    if decided[0] == "written":
        expected = (*decided[:6], [e.format(path=path) for e in decided[6]])
    assert got == expected
    if decided[0] == "refused":
        assert _rows(store)["batches"] == [(len(stored), len(stored), 0, 0)] * bool(stored)  # nothing written


def test_a_world_and_conversation_another_ingest_holds_wait_and_the_write_goes_on(pg_url, store, staged, tmp_path):
    """Rows another transaction created uncommitted: the direct write waits for them, then uses
    them (same (world, platform, debug)) and writes its messages; nothing falls back."""
    import threading

    app = f"ingest_{uuid.uuid4().hex[:10]}"
    waiting_store = Store(f"{pg_url}&application_name={app}")
    at = cst(2026, 7, 17, 6, 1)
    path = tmp_path / "events.jsonl"
    _write(path, [_line("m1"), _line("m2", minute=2)])
    outcome: dict = {}
    admin = create_engine(PG_URL)
    try:
        with store.engine.connect() as other:
            tx = other.begin()
            other.execute(insert(worlds).values(world_id="w1", name="Theirs", first_event_at=at.replace(hour=9)))
            other.execute(insert(conversations).values(conversation_id="c1", world_id="w1", platform="local"))
            thread = threading.Thread(target=lambda: outcome.update(report=ingest_file(waiting_store, path, now=NOW)))
            thread.start()
            assert wait_until_blocked_on_a_lock(admin, app)
            tx.commit()
            thread.join(timeout=60)
    finally:
        admin.dispose()
        make_engine(waiting_store.url).dispose()
    report = outcome["report"]
    assert (report.inserted, report.duplicates, report.new_worlds, report.new_conversations) == (2, 0, 0, 0)
    assert staged == []
    rows = _rows(store)
    assert rows["worlds"] == [("w1", "Theirs", at)]  # their name; first_event_at lowered to this file's first
    assert [m[0] for m in rows["messages"]] == ["m1", "m2"]


# --- any file: the default ingest decides as the staging path alone ------------------------------

_files = itertools.count()
lines_strategy = st.fixed_dictionaries(
    {
        "message_id": st.sampled_from([f"m{i}" for i in range(1, 9)]),
        "world_id": st.sampled_from(["w1", "w2"]),
        "conversation_id": st.sampled_from(["c1", "c2", "c3"]),
        "role": st.sampled_from(["user", "assistant"]),
        "content": st.sampled_from(["a", "b"]),
        "timestamp": st.sampled_from(["2026-07-17T06:00:00+08:00", "2026-07-16T22:00:00Z", "2026-07-16T21:00:00Z"]),
        "platform": st.sampled_from(["local", "discord"]),
        "debug": st.booleans(),
    },
    optional={
        "world_name": st.sampled_from(["", "Alpha", "Beta"]),
        "conversation_title": st.sampled_from(["", "T1", "T2"]),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(lines_strategy | st.just("{broken"), min_size=1, max_size=9),
    stored=st.lists(lines_strategy, max_size=2),
    skip_bad=st.booleans(),
)
def test_any_file_is_decided_as_the_staging_path_decides_it(
    store, staging_store, staged, small_chunks, tmp_path, lines, stored, skip_bad
):
    for s in (store, staging_store):  # each example starts from an empty store
        with s.begin() as conn:
            for table in ("ingest_batches", "messages", "conversations", "worlds"):
                conn.execute(text(f"DELETE FROM {table}"))
    n = next(_files)
    if stored:
        first = tmp_path / f"stored-{n}.jsonl"
        _write(first, stored)
        for s in (store, staging_store):
            ingest_file(s, first, now=NOW, skip_bad=True, direct=False)
    staged.clear()
    path = tmp_path / f"events-{n}.jsonl"
    _write(path, lines)
    _both(store, staging_store, staged, path, skip_bad=skip_bad)


def test_the_switch_interval_is_short_while_the_direct_write_runs_and_restored_after(
    store, staged, small_chunks, tmp_path
):
    """The writer takes the GIL back from the reading thread at every answer of the server: the
    process's switch interval is direct.SWITCH_INTERVAL while both work, the one before after,
    whether the file was written directly or fell back to the staging path."""
    import sys

    at = cst(2026, 7, 17, 6, 1)
    lines = [event("w1", "c1", "user", f"line {i}", at.replace(minute=i), mid=f"m{i}") for i in range(8)]
    path = tmp_path / "events.jsonl"
    _write(path, lines)
    before = sys.getswitchinterval()
    assert before > direct.SWITCH_INTERVAL
    during: list[float] = []

    def progress(phase, done, total):
        if phase == "validate":  # ticks the writer passes on between its chunks
            during.append(sys.getswitchinterval())

    assert ingest_file(store, path, now=NOW, progress=progress).inserted == 8
    assert staged == [] and during and during == pytest.approx([direct.SWITCH_INTERVAL] * len(during))
    assert sys.getswitchinterval() == before

    # Again: every id stored, so the first chunk falls back; restored all the same.
    during.clear()
    assert ingest_file(store, path, now=NOW, progress=progress).duplicates == 8
    assert staged == ["postgresql"]
    assert sys.getswitchinterval() == before


def test_a_fallback_after_the_first_chunks_still_shows_the_whole_file_validated(store, staged, small_chunks, tmp_path):
    """A line without a timestamp in a later chunk sends the file the staging path after the
    direct write read part of it: the validation the operator is shown still reaches the end
    of the file (the staging path's reading reports it), then the rows written."""
    lines = [_line(f"m{i}", minute=i) for i in range(1, 6)] + [{**_line("u1", minute=9), "timestamp": None}]
    path = tmp_path / "events.jsonl"
    _write(path, lines)
    ticks: list[tuple[str, int, int]] = []
    report = ingest_file(store, path, now=NOW, progress=lambda *tick: ticks.append(tick))
    assert staged == ["postgresql"] and (report.inserted, report.at_from_ingest) == (6, 1)
    size = path.stat().st_size
    assert [t for t in ticks if t[0] == "validate"][-1] == ("validate", size, size)
    assert ticks[-1] == ("write", 6, 6)
