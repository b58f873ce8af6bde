"""Ingestion: idempotent, all-or-nothing, every bad input named by file, line and field."""

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from memory_pipeline import domains
from memory_pipeline.events.ingest import IngestError, ingest_file
from memory_pipeline.events.tables import ingest_batches
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline.temporal import chunks, summaries
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline_tests.conftest import cst, event, wait_until_blocked_on_a_lock


def _count(store, table) -> int:
    with store.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def _write(tmp_path, lines: list, name="events.jsonl"):
    path = tmp_path / name
    with open(path, "wb") as fh:
        for line in lines:
            fh.write(line if isinstance(line, bytes) else (json.dumps(line) + "\n").encode())
    return path


GOOD = [
    event("w1", "c1", "user", "hello there", cst(2026, 7, 18, 6, 1), mid="m1"),
    event("w1", "c1", "assistant", "hi, how can I help", cst(2026, 7, 18, 6, 2), mid="m2"),
]


def test_ingest_is_idempotent_on_message_id(store, tmp_path):
    path = _write(tmp_path, GOOD)
    seen = []
    first = ingest_file(store, path, progress=lambda phase, done, total: seen.append((phase, done, total)))
    size = path.stat().st_size
    assert seen == [("validate", 0, size), ("validate", size, size), ("write", 2, 2)]
    assert (first.inserted, first.duplicates, first.new_conversations, first.new_worlds) == (2, 0, 1, 1)
    seen.clear()
    again = ingest_file(store, path, progress=lambda phase, done, total: seen.append((phase, done, total)))
    assert (again.inserted, again.duplicates) == (0, 2)
    # the direct write read the file and met the stored ids; the staging path's second reading is no news
    assert seen == [("validate", 0, size), ("validate", size, size), ("write", 0, 0)]
    assert _count(store, messages) == 2
    assert _count(store, ingest_batches) == 2
    with store.connect() as conn:
        row = conn.execute(select(messages).where(messages.c.message_id == "m1")).mappings().one()
        first_at = conn.execute(select(worlds.c.first_event_at)).scalar_one()
    assert row["at"] == cst(2026, 7, 18, 6, 1).astimezone(UTC)
    assert row["source"].endswith("events.jsonl:1")
    assert first_at == cst(2026, 7, 18, 6, 1)


RANGE = "is out of range (supported: 1970-01-01 to 9998-12-31 UTC)"
ID_RULE = "ids are 1-128 characters of A-Z a-z 0-9 . _ - @ + = / #, not starting with '/', without '..'"


def _with(**fields) -> dict:
    return {**GOOD[0], "message_id": "b0", **fields}


def _without(name: str) -> dict:
    return {k: v for k, v in _with().items() if k != name}


# (case, line 2 of the file, field, exact problem): each refuses the whole file, names line 2.
BAD_CASES = [
    (
        "malformed",
        b'{"message_id": "x",\n',
        "<line>",
        "malformed JSON: Expecting property name enclosed in double quotes at column 21",
    ),
    ("role", _with(role="narrator"), "role", "unknown role 'narrator' (expected one of assistant, system, tool, user)"),
    ("role type", _with(role=["user"]), "role", "must be a string, got array"),
    (  # the objects domain records a world's "organize now" requests there (debug, never organized)
        "reserved conversation",
        _with(conversation_id="memory-requests#w2"),
        "conversation_id",
        "'memory-requests#w2': ids starting 'memory-requests#' are reserved for the requests the project records",
    ),
    ("empty timestamp", _with(timestamp=""), "timestamp", "empty (leave it out, or null, when the time is unknown)"),
    (
        "bad timestamp",
        _with(timestamp="yesterday at noon"),
        "timestamp",
        "'yesterday at noon' is not an ISO 8601 datetime (want e.g. 2026-01-15T10:00:00+08:00)",
    ),
    (
        "naive timestamp",
        _with(timestamp="2026-07-18T06:00:00"),
        "timestamp",
        "'2026-07-18T06:00:00' has no time zone offset",
    ),
    ("timestamp type", _with(timestamp=20260718), "timestamp", "must be a string, got number"),
    (
        "future",
        _with(timestamp="2099-07-18T06:00:00+08:00"),
        "timestamp",
        "'2099-07-18T06:00:00+08:00' is in the future",
    ),
    ("year 1", _with(timestamp="0001-01-01T00:00:00+08:00"), "timestamp", f"'0001-01-01T00:00:00+08:00' {RANGE}"),
    ("year 9999", _with(timestamp="9999-12-31T23:59:59-08:00"), "timestamp", f"'9999-12-31T23:59:59-08:00' {RANGE}"),
    ("before 1970", _with(timestamp="1969-12-31T23:59:59Z"), "timestamp", f"'1969-12-31T23:59:59Z' {RANGE}"),
    (
        "encoding",
        b'{"message_id": "b6", "content": "caf\xe9"}\n',
        "<line>",
        "bad encoding (not UTF-8) at byte offset 36",
    ),
    ("deep nesting", b"[" * 100_000 + b"\n", "<line>", "malformed JSON: nested too deeply"),
    (
        "control character",
        b'{"content": "a\x01b"}\n',
        "<line>",
        "malformed JSON: Invalid control character at column 15",
    ),
    ("huge number", b'{"debug": ' + b"1" * 5000 + b"}\n", "<line>", "malformed JSON: unreadable number"),
    ("not an object", b"[1, 2]\n", "<line>", "expected a JSON object, got array"),
    ("oversized", _with(content="x" * 100_001), "content", "oversized body: 100001 characters (limit 100000)"),
    ("content type", _with(content={"text": "hi"}), "content", "must be a string, got object"),
    (
        "surrogate in content",
        _with(content="caf\ud800"),
        "content",
        "contains a lone surrogate at position 3 (not encodable as UTF-8)",
    ),
    ("NUL in content", _with(content="ab\x00c"), "content", "contains a NUL character (\\u0000) at position 2"),
    ("missing world", _without("world_id"), "world_id", "missing"),
    ("id type", _with(world_id=7), "world_id", f"must be a string ({ID_RULE[8:]})"),
    ("id colon", _with(world_id="w:1"), "world_id", f"character ':' at position 1 is not allowed ({ID_RULE})"),
    (
        "id glob",
        _with(conversation_id="c*"),
        "conversation_id",
        f"character '*' at position 1 is not allowed ({ID_RULE})",
    ),
    ("id space", _with(message_id="m 1"), "message_id", f"character ' ' at position 1 is not allowed ({ID_RULE})"),
    ("id NUL", _with(message_id="m\x00"), "message_id", f"character '\\x00' at position 1 is not allowed ({ID_RULE})"),
    (
        "id surrogate",
        _with(message_id="\ud800"),
        "message_id",
        f"character '\\ud800' at position 0 is not allowed ({ID_RULE})",
    ),
    ("id non-ASCII", _with(world_id="wé"), "world_id", f"character 'é' at position 1 is not allowed ({ID_RULE})"),
    ("id slash", _with(world_id="/w"), "world_id", f"must not start with '/' ({ID_RULE})"),
    ("id dots", _with(world_id="w/../x"), "world_id", f"must not contain '..' ({ID_RULE})"),
    ("id length", _with(message_id="m" * 129), "message_id", f"too long: 129 characters ({ID_RULE})"),
    ("debug type", _with(debug="no"), "debug", "must be true or false"),
    ("world_name object", _with(world_name={"en": "w"}), "world_name", "must be a string, got object"),
    ("world_name length", _with(world_name="n" * 257), "world_name", "too long: 257 characters (limit 256)"),
    ("world_name NUL", _with(world_name="a\x00"), "world_name", "contains a NUL character (\\u0000) at position 1"),
    ("title list", _with(conversation_title=["t"]), "conversation_title", "must be a string, got array"),
    ("title length", _with(conversation_title="t" * 513), "conversation_title", "too long: 513 characters (limit 512)"),
    (
        "title surrogate",
        _with(conversation_title="t\udc80"),
        "conversation_title",
        "contains a lone surrogate at position 1 (not encodable as UTF-8)",
    ),
    ("platform length", _with(platform="p" * 65), "platform", "too long: 65 characters (limit 64)"),
    ("platform control", _with(platform="local\n"), "platform", "contains a control character at position 5"),
    ("platform type", _with(platform=3), "platform", "must be a string, got number"),
    (
        "tool_calls object",
        _with(tool_calls={"name": "x"}),
        "tool_calls",
        "must be null or a list of objects, got object",
    ),
    (
        "tool_calls strings",
        _with(tool_calls=["x"]),
        "tool_calls[0]",
        "must be an object with a string 'name', got string",
    ),
    ("tool_calls no name", _with(tool_calls=[{"arguments": {}}]), "tool_calls[0].name", "missing"),
    ("tool_calls name type", _with(tool_calls=[{"name": 1}]), "tool_calls[0].name", "must be a string, got number"),
    (
        "tool_calls NaN",
        _with(tool_calls=[{"name": "search", "arguments": {"n": float("nan")}}]),
        "tool_calls[0].arguments.n",
        "non-finite number (NaN or Infinity is not JSON)",
    ),
    (
        "tool_calls NUL",
        _with(tool_calls=[{"name": "search", "arguments": {"q": ["ok", "a\x00"]}}]),
        "tool_calls[0].arguments.q[1]",
        "contains a NUL character (\\u0000) at position 1",
    ),
    (
        "tool_calls deep",
        _with(tool_calls=[{"name": "search", "arguments": json.loads("[" * 40 + "]" * 40)}]),
        "tool_calls[0].arguments" + "[0]" * 31,
        "nested deeper than 32 levels",
    ),
]


@pytest.mark.parametrize("name,bad,field,problem", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_line_refuses_the_whole_batch(store, tmp_path, name, bad, field, problem):
    path = _write(tmp_path, [GOOD[0], bad, GOOD[1]])
    with pytest.raises(IngestError) as info:
        ingest_file(store, path)
    assert [str(e) for e in info.value.errors] == [f"{path}:2: field '{field}': {problem}"]
    assert (info.value.errors[0].line, info.value.errors[0].where) == (2, 2)
    assert "1 problem(s); nothing was written" in str(info.value)
    assert _count(store, messages) == 0 and _count(store, conversations) == 0 and _count(store, worlds) == 0
    assert _count(store, ingest_batches) == 0


def test_timestamps_convert_and_tool_calls_read_back(store, tmp_path):
    """Z and any offset are accepted; a BOM before line 1 is ignored; tool_calls are objects with a name."""
    calls = [{"name": "search", "arguments": {"q": "tomatoes", "n": 3}}, {"id": "t2", "name": "fetch"}]
    lines = [
        _with(message_id="z1", timestamp="2026-07-17T22:01:00Z", tool_calls=calls, content=""),
        _with(message_id="z2", timestamp="2026-07-18T06:02:00+08:00", world_name="W " + "n" * 254),
    ]
    path = _write(tmp_path, lines)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert ingest_file(store, path).inserted == 2
    with store.connect() as conn:
        rows = dict(conn.execute(select(messages.c.message_id, messages.c.tool_calls)).all())
        name = conn.execute(select(worlds.c.name)).scalar_one()
    assert rows == {"z1": calls, "z2": None} and len(name) == 256


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_line_without_a_timestamp_takes_the_ingest_time_and_is_idempotent(store, tmp_path, backend):
    """Seed 001: an event's time, or the ingest time when it is unknown. The message says which;
    the same line again is a duplicate (its time is still unknown), not a conflict with the time
    the first ingest gave it; another body under the id is still a conflict."""
    if backend == "sqlite":
        store = Store(f"sqlite:///{tmp_path}/m.sqlite")
        ensure_schema(store, domains.version_locations())
    unknown = [_without("timestamp"), {**_with(message_id="b1"), "timestamp": None}]
    path = _write(tmp_path, [GOOD[0], *unknown])
    now = datetime(2026, 7, 20, 1, 2, 3, tzinfo=UTC)
    report = ingest_file(store, path, now=now)
    assert (report.inserted, report.at_from_ingest) == (3, 2)
    with store.connect() as conn:
        rows = {r.message_id: r for r in conn.execute(select(messages))}
        first_at = conn.execute(select(worlds.c.first_event_at)).scalar_one()
    assert rows["m1"].at == cst(2026, 7, 18, 6, 1) and rows["m1"].at_from_ingest is None
    for mid in ("b0", "b1"):
        assert rows[mid].at == rows[mid].ingested_at and rows[mid].at_from_ingest is True
    assert first_at == cst(2026, 7, 18, 6, 1)

    again = ingest_file(store, path)  # later: a new ingest time, the same events
    assert (again.inserted, again.duplicates, again.at_from_ingest) == (0, 3, 0)
    timed = {**_without("timestamp"), "timestamp": "2026-07-18T06:05:00+08:00"}
    for other in ({**_without("timestamp"), "content": "rewritten"}, timed):
        with pytest.raises(IngestError, match="'b0' is already stored with different content"):
            ingest_file(store, _write(tmp_path, [other], "other.jsonl"))
    with store.connect() as conn:
        assert conn.execute(select(messages.c.at).where(messages.c.message_id == "b0")).scalar_one() == rows["b0"].at


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
@pytest.mark.parametrize("untimed_first", [True, False], ids=["untimed-first", "timed-first"])
def test_a_repeat_with_and_without_a_timestamp_in_one_file_is_one_event_at_the_given_time(
    store, tmp_path, backend, untimed_first
):
    """One id on two lines, one with a timestamp and one without: one event, whose time is the
    one the file gives, whichever line comes first; a third line of that id with another time
    is refused in either order (the untimed line hides no conflict)."""
    if backend == "sqlite":
        store = Store(f"sqlite:///{tmp_path}/m.sqlite")
        ensure_schema(store, domains.version_locations())
    timed = _with(timestamp="2026-07-18T06:05:00+08:00")
    pair = [_without("timestamp"), timed] if untimed_first else [timed, _without("timestamp")]
    other = _with(timestamp="2026-07-18T06:09:00+08:00")
    with pytest.raises(IngestError, match=r":3: field 'message_id': 'b0' repeats .* with different content"):
        ingest_file(store, _write(tmp_path, [*pair, other], "three.jsonl"))
    assert _count(store, messages) == 0

    path = _write(tmp_path, pair)
    report = ingest_file(store, path)
    assert (report.inserted, report.duplicates, report.at_from_ingest) == (1, 0, 0)
    with store.connect() as conn:
        row = conn.execute(select(messages)).one()
        first_at = conn.execute(select(worlds.c.first_event_at)).scalar_one()
    assert (row.at, row.at_from_ingest, first_at) == (cst(2026, 7, 18, 6, 5), None, cst(2026, 7, 18, 6, 5))
    # Both lines are that stored event now, and so is the timed line on its own.
    assert ingest_file(store, path).duplicates == 1
    assert ingest_file(store, _write(tmp_path, [timed], "timed.jsonl")).duplicates == 1


def test_a_world_whose_lines_all_lack_a_timestamp_starts_at_its_ingest(store, tmp_path):
    now = datetime(2026, 7, 20, 1, 2, 3, tzinfo=UTC)
    path = _write(tmp_path, [_without("timestamp"), {**_without("timestamp"), "message_id": "b0"}])
    report = ingest_file(store, path, now=now)
    assert (report.inserted, report.duplicates, report.at_from_ingest) == (1, 0, 1)  # a repeat in the file
    with store.connect() as conn:
        first_at, at = conn.execute(
            select(worlds.c.first_event_at, messages.c.at).select_from(
                worlds.join(conversations, conversations.c.world_id == worlds.c.world_id).join(
                    messages, messages.c.conversation_id == conversations.c.conversation_id
                )
            )
        ).one()
    assert first_at == at


def test_skip_bad_writes_good_lines_and_reports_bad_ones(store, tmp_path):
    path = _write(tmp_path, [GOOD[0], BAD_CASES[1][1], GOOD[1], BAD_CASES[0][1]])
    report = ingest_file(store, path, skip_bad=True)
    assert report.inserted == 2
    assert [(e.line, e.field) for e in report.rejected] == [(2, "role"), (4, "<line>")]
    assert _count(store, messages) == 2


def test_same_id_with_other_content_is_a_conflict_not_an_overwrite(store, tmp_path):
    ingest_file(store, _write(tmp_path, GOOD))
    changed = {**GOOD[0], "content": "rewritten history"}
    with pytest.raises(IngestError, match="already stored with different content"):
        ingest_file(store, _write(tmp_path, [changed], "again.jsonl"))
    with store.connect() as conn:
        assert (
            conn.execute(select(messages.c.content).where(messages.c.message_id == "m1")).scalar_one() == "hello there"
        )
    dup_in_file = [GOOD[0], {**GOOD[0], "content": "other"}]
    with pytest.raises(IngestError, match="repeats .*:1 with different content"):
        ingest_file(store, _write(tmp_path, dup_in_file, "dup.jsonl"))
    # a file with bad lines of its own names the stored conflict as well, in the same refusal
    with pytest.raises(IngestError) as refused:
        ingest_file(store, _write(tmp_path, [changed, BAD_CASES[1][1]], "both.jsonl"))
    assert [(e.line, e.field) for e in refused.value.errors] == [(1, "message_id"), (2, "role")], refused.value
    assert "'m1' is already stored with different content" in str(refused.value)


def test_conversation_metadata_must_agree(store, tmp_path):
    ingest_file(store, _write(tmp_path, GOOD))
    moved = event("w2", "c1", "user", "same conversation, other world", cst(2026, 7, 18, 7), mid="m9")
    with pytest.raises(IngestError) as info:
        ingest_file(store, _write(tmp_path, [moved], "moved.jsonl"))
    assert info.value.errors[0].field == "conversation_id" and info.value.errors[0].line == 1


def test_ingesting_never_bumps_derived_rows_and_chunks_never_bump_conversations(ctx, store, ingest):
    ingest(
        [
            event("w1", "c1", "user", "garden planning with tomatoes", cst(2026, 7, 18, 6, 1)),
            event("w1", "c1", "assistant", "tomatoes need sun", cst(2026, 7, 18, 6, 3)),
        ]
    )
    summaries.regenerate_day(ctx, cst(2026, 7, 18).date())
    with store.connect() as conn:
        before = conn.execute(select(temporal_summaries.c.updated_at)).scalar_one()
        conv_before = conn.execute(select(conversations.c.updated_at)).scalar_one()
    ingest([event("w1", "c1", "user", "next day talk", cst(2026, 7, 19, 9, 0))])
    chunks.run_tick(ctx, cst(2026, 7, 19).date(), cst(2026, 7, 19, 10, 0))
    with store.connect() as conn:
        assert conn.execute(select(temporal_summaries.c.updated_at)).scalar_one() == before
        conv_after = conn.execute(select(conversations.c.updated_at)).scalar_one()
    assert conv_after > conv_before  # the new message is the conversation's own activity
    chunks.run_tick(ctx, cst(2026, 7, 18).date())  # chunks for the 18th: a write to temporal_day only
    with store.connect() as conn:
        assert conn.execute(select(conversations.c.updated_at)).scalar_one() == conv_after


# --- concurrent ingests ---------------------------------------------------------------------------


def _ingest_child(url: str, path: str, barrier, out, direct: bool) -> None:
    """One process of the concurrent-ingest test: migrate (as every process does), then ingest
    in step with the other. The staging path waits for it at the end of validation (both then
    check and write at once); the direct write validates and writes chunk by chunk, so both
    start reading at once and race from their first chunk."""
    from memory_pipeline import domains
    from memory_pipeline.lib.store import Store
    from memory_pipeline.lib.store.migrate import ensure_schema

    store = Store(url)
    ensure_schema(store, domains.version_locations())

    met = []

    def progress(phase, done, total):
        if phase == "validate" and done == (0 if direct else total) and not met:
            # Each child spawns, imports and migrates first: on a loaded machine one has reached
            # this point minutes after the other. The deadline only catches a child that died.
            # Once only: a direct write that falls back before its reading thread has read the
            # whole file reports the staging pass's validation from 0 again, and the other child,
            # done by then, never comes to a second meeting (seen on a loaded machine).
            met.append(True)
            barrier.wait(timeout=600)

    report = ingest_file(store, path, progress=progress, direct=direct)
    out.put((report.inserted, report.duplicates, report.new_conversations, report.new_worlds, len(report.rejected)))


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "staging"])
def test_the_same_file_ingested_twice_at_once_is_one_ingest(pg_url, tmp_path, direct):
    import multiprocessing

    from memory_pipeline.lib.store import Store

    start = cst(2026, 7, 18, 6)
    lines = [
        event(f"w{i % 40 % 3}", f"c{i % 40}", ("user", "assistant")[i % 2], f"line {i} body", start, mid=f"m{i:05d}")
        for i in range(3000)
    ]
    path = _write(tmp_path, lines)
    spawn = multiprocessing.get_context("spawn")
    barrier, out = spawn.Barrier(2), spawn.Queue()
    procs = [spawn.Process(target=_ingest_child, args=(pg_url, str(path), barrier, out, direct)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=900)
    assert [p.exitcode for p in procs] == [0, 0]
    reports = [out.get(timeout=5) for _ in procs]
    assert sum(r[0] for r in reports) == 3000  # inserted
    assert sum(r[1] for r in reports) == 3000  # the other saw every line as already present
    assert sum(r[2] for r in reports) == 40 and sum(r[3] for r in reports) == 3  # new conversations, worlds
    assert all(r[4] == 0 for r in reports)
    store = Store(pg_url)
    assert (_count(store, messages), _count(store, conversations), _count(store, worlds)) == (3000, 40, 3)
    with store.connect() as conn:
        stored = dict(conn.execute(select(messages.c.message_id, messages.c.content)).all())
        batches = conn.execute(select(ingest_batches.c.inserted, ingest_batches.c.duplicates)).all()
    assert stored == {e["message_id"]: e["content"] for e in lines}
    assert sorted(sum(b) for b in batches) == [3000, 3000]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "staging"])
@pytest.mark.parametrize("same", [True, False], ids=["same-content", "other-content"])
def test_a_message_stored_by_a_concurrent_ingest_after_the_read(pg_url, tmp_path, same, direct):
    """The other transaction inserts m1 uncommitted; this ingest reads (no m1), blocks on its rows,
    and goes on once it commits: a duplicate with the same body, a named conflict otherwise (the
    direct write blocks on the world, then its primary key refuses m1 and the staging path says so)."""
    import threading
    import uuid

    from sqlalchemy import create_engine, insert

    from memory_pipeline import domains
    from memory_pipeline.lib.store import Store, make_engine
    from memory_pipeline.lib.store.migrate import ensure_schema
    from memory_pipeline_tests.conftest import PG_URL

    app = f"ingest_{uuid.uuid4().hex[:10]}"
    store = Store(f"{pg_url}&application_name={app}")
    ensure_schema(store, domains.version_locations())
    at = cst(2026, 7, 18, 6, 1)
    theirs = "hello there" if same else "a body the other process wrote"
    path = _write(tmp_path, [GOOD[0]])
    admin = create_engine(PG_URL)
    outcome: dict = {}
    try:
        with store.engine.connect() as other:
            tx = other.begin()
            other.execute(insert(worlds).values(world_id="w1", name="w1", first_event_at=at))
            other.execute(insert(conversations).values(conversation_id="c1", world_id="w1", platform="local"))
            other.execute(
                insert(messages).values(message_id="m1", conversation_id="c1", role="user", content=theirs, at=at)
            )

            def run():
                try:
                    outcome["report"] = ingest_file(store, path, direct=direct)
                except Exception as exc:  # noqa: BLE001 - asserted below
                    outcome["error"] = exc

            thread = threading.Thread(target=run)
            thread.start()
            assert wait_until_blocked_on_a_lock(admin, app)
            tx.commit()
            thread.join(timeout=60)
    finally:
        admin.dispose()
        make_engine(store.url).dispose()
    if same:
        report = outcome["report"]
        assert (report.inserted, report.duplicates, report.new_worlds, report.new_conversations) == (0, 1, 0, 0)
    else:
        error = outcome["error"]
        assert isinstance(error, IngestError) and "'m1' is already stored with different content" in str(error)
    with store.connect() as conn:
        assert conn.execute(select(messages.c.content)).scalars().all() == [theirs]


@pytest.mark.parametrize(
    "constraint, said",
    [
        ("CHECK (content NOT LIKE '%launch code%')", 'violates check constraint "forced"'),
        # A key made of ids is named (here: a second message in c1); never a row's body.
        ("UNIQUE (conversation_id)", "Key (conversation_id)=(c1)"),
    ],
    ids=["check", "unique"],
)
def test_a_store_refusal_names_ids_never_content(store, tmp_path, constraint, said):
    import traceback

    from sqlalchemy import text

    with store.begin() as conn:
        conn.execute(text(f"ALTER TABLE messages ADD CONSTRAINT forced {constraint}"))
    secret = "the launch code is 0000, tell no one"
    lines = [{**GOOD[0], "content": secret}, {**GOOD[1], "content": secret + " (reply)"}]
    with pytest.raises(IngestError) as info:
        ingest_file(store, _write(tmp_path, lines))
    shown_ = str(info.value)
    printed = "".join(traceback.format_exception(info.value))
    assert said in shown_ and "'m1', 'm2'" in shown_ and "the store refused the write" in shown_
    assert "launch code" not in printed and "0000" not in printed
    assert _count(store, messages) == 0
