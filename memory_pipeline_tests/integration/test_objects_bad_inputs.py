"""Seed 001 entry points fed arbitrary input (property-based, real PostgreSQL): the agent's tools
(tool-call arguments, the Python API behind them and the CLI), and graph-write submissions against
a real claim. Each call is accepted or refused with a message naming the field; never a
traceback, never a partial write."""

from __future__ import annotations

import uuid
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from typer.testing import CliRunner

from memory_pipeline.lib.store import leases
from memory_pipeline.objects import graph, logic, recall, timeline, tools, worker
from memory_pipeline.objects.logic import JobMode, SubmissionError
from memory_pipeline.objects.tables import (
    objects_attachments,
    objects_event_state,
    objects_jobs,
    objects_objects,
    objects_receipts,
    objects_relations,
    objects_versions,
    objects_worlds,
)
from memory_pipeline_tests.integration.test_objects import add, octx_for

TABLES = [objects_objects, objects_relations, objects_attachments, objects_receipts, objects_versions, objects_jobs]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**6) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=25,
)
FIELD_NAMES = ["world", "query", "id", "offset", "limit", "mode", "scope", "retry_blocked", "token", "x"]


def _counts(store):
    with store.connect() as conn:
        counts = [int(conn.execute(select(func.count()).select_from(t)).scalar()) for t in TABLES]
        states = sorted(
            conn.execute(
                select(objects_event_state.c.event_id, objects_event_state.c.state, objects_event_state.c.page_cursor)
            ).all()
        )
        rev = conn.execute(select(objects_worlds.c.graph_revision)).scalars().all()
    return counts, states, rev


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tool=st.sampled_from([*tools.TOOLS, "memory_delete", ""]) | st.text(max_size=10) | json_values,
    args=st.dictionaries(
        st.sampled_from(FIELD_NAMES),
        json_values | st.sampled_from(["w1", "person:qhy", "organize", "deep"]),
        max_size=5,
    )
    | json_values,
)
def test_tool_calls_with_arbitrary_arguments(store, tool, args):
    octx = octx_for(store)
    before = _counts(store)
    try:
        out = tools.call(octx, tool, args)
    except tools.ToolError as exc:
        assert str(exc).split(":")[0]  # names the tool / argument
        assert _counts(store) == before
    else:
        assert isinstance(out, dict)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=st.dictionaries(
        st.sampled_from(
            [
                "token",
                "graph_revision",
                "event_id",
                "outcome",
                "page_end",
                "progress",
                "reason",
                "objects",
                "relations",
                "attach",
                "core",
                "evidence",
                "reviewed",
                "junk",
            ]
        ),
        json_values | st.sampled_from(["linked", "archive_only", "continue", "person:a", 0, 1, 5]),
        max_size=9,
    )
    | json_values
)
def test_graph_writes_with_arbitrary_submissions(store, ingest, raw):
    octx = octx_for(store)
    if not _counts(store)[1]:
        add(ingest, ["hello world"])
        timeline.intake(octx)
        worker.enqueue(octx, "w1", "compact")
        worker.run_worker(octx)
        worker.enqueue(octx, "w1", "organize", origin=logic.JobOrigin.HOURLY)
    with store.connect() as conn:
        ev = conn.execute(select(objects_event_state)).mappings().first()
        rev = conn.execute(select(objects_worlds.c.graph_revision)).scalar()
    holder = f"h-{uuid.uuid4().hex[:8]}"
    leases.release(store, graph.LEASE_ASSET, "w1", "h")
    from memory_pipeline.lib.store.tables import partition_leases

    with store.begin() as conn:
        conn.execute(partition_leases.delete())
    leases.try_acquire(store, graph.LEASE_ASSET, "w1", holder, timedelta(seconds=360))
    page = graph.EventPage(
        ev["event_id"], ev["chars"], ev["page_cursor"], ev["chars"], "hello world", ev["occurred_at"], ev["event_day"]
    )
    claim = graph.Claim("w1", None, JobMode.ORGANIZE, holder, rev, set(), page=page)
    if isinstance(raw, dict) and "token" in raw:
        raw = {**raw, "token": f"tok-{uuid.uuid4().hex}"}  # a fresh token (a replay is tested elsewhere)
    before = _counts(store)
    try:
        graph.commit(octx, claim, raw)
    except SubmissionError as exc:
        assert exc.field and exc.problem
        assert _counts(store) == before


def test_the_cli_refuses_bad_input_naming_the_argument(store, ingest, monkeypatch):
    from memory_pipeline.cli import app

    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    add(ingest, ["hello"])  # w1 exists; its bad arguments are refused by name
    runner = CliRunner()
    cases = [
        (["objects", "organize", "w1", "--mode", "sleep"], "mode"),
        (["objects", "organize", "bad:world"], "world"),
        (["objects", "inspect", "list", "pet", "--world", "w1"], "TYPE"),
        (["objects", "inspect", "events", "2026-01-01", "2026-01-02T00:00:00+08:00"], "FROM '2026-01-01'"),
        (
            ["objects", "inspect", "events", "2026-01-01T00:00:00+08:00", "2026-01-02T00:00:00+08:00", "garbage"],
            "cursor: not a cursor this command returned\n",  # and nothing after it (no exception's name)
        ),
        (["objects", "inspect", "events", "2026-01-01T00:00:00+08:00", "2026-01-02"], "TO '2026-01-02'"),
        (["objects", "inspect", "object", "person:x", "abc", "--world", "w1"], "OFFSET"),
        # a negative OFFSET is that argument refused by name, not "No such option: -1"
        (["objects", "inspect", "object", "person:x", "-1", "--world", "w1"], "OFFSET: must be >= 0"),
        (["objects", "inspect", "event", "x", "-5"], "OFFSET: must be >= 0"),
        (["objects", "inspect", "list", "person", "-2", "--world", "w1"], "OFFSET: must be >= 0"),
        (["objects", "evidence", "w1", "knowledge:x", "-1"], "offset >= 0, limit 1-100 (got offset -1, limit 20)"),
        (["objects", "read", "w1", "nocolon"], "memory_read.id"),
        # a byte the shell passed undecoded (argv's surrogate escape) was a traceback from the store
        (["objects", "read", "w1", "knowledge:gar\udcff"], "memory_read.id: key 'gar\\udcff' must be"),
        (["objects", "evidence", "w1", "knowledge:gar\udcff"], "memory_evidence.id: key 'gar\\udcff'"),
        (["objects", "inspect", "object", "knowledge:gar\udcff", "--world", "w1"], "ID: key 'gar\\udcff'"),
        (["objects", "find", "w1", " "], "memory_find.query"),
        (["objects", "organize", "w1", "--now", "--mode", "compact"], "mode"),
        (["objects", "organize", "w1", "--now", "--token", "x y"], "token"),
        # an empty world is refused by the name the operator gave it, never read as "every world"
        (["objects", "status", "--world", ""], "--world '': "),
        (["objects", "inspect", "status", "--world", ""], "--world '': "),
        (
            ["objects", "inspect", "events", "2026-01-01T00:00:00+08:00", "2026-01-02T00:00:00+08:00", "--world", ""],
            "--world '': ",
        ),
        (["objects", "find", "", "garden"], "WORLD '': "),
        (["objects", "flags", "", "--busy"], "WORLD '': "),
    ]
    before = _counts(store)
    for argv, field in cases:
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert field in result.output, (argv, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit)
    assert _counts(store) == before


def test_the_cli_refuses_a_world_nothing_was_ingested_for_and_creates_none(store, ingest, monkeypatch, tmp_path):
    """A mistyped world is not an empty memory: every objects command naming it is refused (exit 1),
    and no write gives it a job, a core document or a world row."""
    from memory_pipeline.cli import app

    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    add(ingest, ["hello"])
    user = tmp_path / "USER.md"
    user.write_text("# User\n", encoding="utf-8")
    runner = CliRunner()
    before = _counts(store)
    for argv in (
        ["objects", "organize", "nosuch"],
        ["objects", "core-import", "nosuch", str(user)],
        ["objects", "approve", "nosuch", "project:x"],
        ["objects", "flags", "nosuch", "--busy"],
        ["objects", "find", "nosuch", "garden"],
        ["objects", "read", "nosuch", "knowledge:x"],
        ["objects", "evidence", "nosuch", "knowledge:x"],
        ["objects", "resident", "nosuch"],
        ["objects", "status", "--world", "nosuch"],
        ["objects", "inspect", "list", "knowledge", "--world", "nosuch"],
    ):
        result = runner.invoke(app, argv)
        assert result.exit_code == 1, (argv, result.output)
        assert "no such world 'nosuch': nothing has been ingested for it" in result.output, (argv, result.output)
    assert _counts(store) == before
    with store.connect() as conn:
        assert conn.execute(select(objects_worlds.c.world_id).where(objects_worlds.c.world_id == "nosuch")).all() == []
    # An object the world does not have: refused as read refuses it, not an empty evidence list.
    result = runner.invoke(app, ["objects", "evidence", "w1", "knowledge:nope"])
    assert result.exit_code == 2 and "memory_evidence.id: no object knowledge:nope in world w1" in result.output


def test_the_inspect_cli_pages_and_never_calls_a_model(store, ingest, monkeypatch):
    import json as _json

    from memory_pipeline.cli import app
    from memory_pipeline.lib.store.tables import llm_ledger
    from memory_pipeline.objects import recall

    octx = octx_for(store)
    ids = add(ingest, [f"garden visit {i}" for i in range(25)])
    timeline.intake(octx)
    worker.enqueue(octx, "w1", "compact")
    worker.run_worker(octx)
    worker.enqueue(octx, "w1", "organize")
    worker.run_worker(octx)
    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    with store.connect() as conn:
        calls = conn.execute(select(func.count()).select_from(llm_ledger)).scalar()
    runner = CliRunner()

    def run(*argv):
        result = runner.invoke(app, ["objects", "inspect", *argv])
        assert result.exit_code == 0, result.output
        return _json.loads(result.output)

    first = run("events", "2026-01-10T00:00:00+08:00", "2026-01-11T00:00:00+08:00", "--world", "w1")
    second = run("events", "2026-01-10T00:00:00+08:00", "2026-01-11T00:00:00+08:00", first["cursor"], "--world", "w1")
    assert [x["event_id"] for x in first["items"] + second["items"]] == ids and second["cursor"] is None
    obj = run("object", "knowledge:garden", "--world", "w1")
    assert len(obj["sources"]) == 25 and obj["next_offset"] is None
    listed = run("list", "knowledge", "--world", "w1")
    assert [x["id"] for x in listed["items"]] == ["knowledge:garden"]
    ev = run("event", ids[0])
    assert ev["state"] == "linked" and ev["objects"] == ["knowledge:garden"]
    assert run("status")["states"] == {"linked": 25}
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(llm_ledger)).scalar() == calls
    assert recall.find(store, "w1", "garden")[0]["id"] == "knowledge:garden"


def test_the_cli_organize_now_records_the_request_and_prints_both_receipts(store, ingest, monkeypatch):
    import json as _json

    from memory_pipeline.cli import app
    from memory_pipeline.lib.store.tables import messages

    ids = add(ingest, ["greenhouse plans"])
    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    result = CliRunner().invoke(
        app, ["objects", "organize", "w1", "--now", "--scope", "greenhouse", "--token", "cli-now-01"]
    )
    assert result.exit_code == 0, result.output
    compact, organize = _json.loads(result.output)
    assert (compact["mode"], organize["mode"], organize["scope"]) == ("compact", "organize", "greenhouse")
    with store.connect() as conn:
        content = conn.execute(
            select(messages.c.content).where(messages.c.message_id == organize["request_event_id"])
        ).scalar_one()
        state = conn.execute(
            select(objects_event_state.c.state).where(objects_event_state.c.event_id == ids[0])
        ).scalar()
    assert content == "memory_organize: compact, then organize now (scope: greenhouse)" and state == "hot"
    other = CliRunner().invoke(
        app, ["objects", "organize", "w1", "--now", "--scope", "harbor", "--token", "cli-now-01"]
    )
    assert other.exit_code == 2 and "--token 'cli-now-01' was used for another request" in other.output, other.output


def test_integers_past_the_integer_column_are_refused_by_name_before_the_database(store, ingest, monkeypatch, tmp_path):
    """An offset, a graph revision or a count past 2,147,483,647 (a PostgreSQL INTEGER column) is
    refused up-front naming the field or argument: never the database's overflow error, and
    nothing written."""
    from memory_pipeline.cli import app

    octx = octx_for(store)
    (e1,) = add(ingest, ["hello garden"])
    timeline.intake(octx)
    worker.enqueue(octx, "w1", "compact")
    worker.run_worker(octx)
    leases.try_acquire(store, graph.LEASE_ASSET, "w1", "h-big", timedelta(seconds=360))
    with store.connect() as conn:
        ev = conn.execute(select(objects_event_state)).mappings().one()
    page = graph.EventPage(e1, ev["chars"], 0, ev["chars"], "hello garden", ev["occurred_at"], ev["event_day"])
    claim = graph.Claim("w1", None, JobMode.ORGANIZE, "h-big", 0, set(), page=page)
    before = _counts(store)
    submission = {
        "token": "tok-big-0001",
        "event_id": e1,
        "page_end": 12,
        "outcome": "linked",
        "attach": ["project:daily"],
    }
    try:
        graph.commit(octx, claim, {**submission, "graph_revision": 2_147_483_648})
    except SubmissionError as exc:
        assert exc.field == "graph_revision" and "2,147,483,647" in exc.problem
    else:
        raise AssertionError("a graph revision past 2,147,483,647 was accepted")
    assert _counts(store) == before
    big = 2**63
    for call, field in (
        (
            lambda: tools.call(octx, "memory_evidence", {"world": "w1", "id": "project:daily", "offset": big}),
            "memory_evidence.offset",
        ),
        (lambda: tools.batch_read(octx, "w1", "memory_list", {"type": "person", "offset": big}), "memory_list.offset"),
        (
            lambda: tools.batch_read(octx, "w1", "memory_evidence", {"id": "project:daily", "offset": big}),
            "memory_evidence.offset",
        ),
    ):
        try:
            call()
        except tools.ToolError as exc:
            assert str(exc).startswith(f"{field}: ") and "2,147,483,647" in str(exc)
        else:
            raise AssertionError(f"{field} past 2,147,483,647 was accepted")
    for call in (
        lambda: recall.list_objects(store, "w1", "person", big),
        lambda: recall.evidence(store, "w1", "project:daily", big),
        lambda: recall.object_view(store, "w1", "project:daily", big),
        lambda: recall.event_view(store, e1, big),
    ):
        try:
            call()
        except recall.RecallError as exc:
            assert str(exc).startswith("offset: ") and "2,147,483,647" in str(exc)
        else:
            raise AssertionError("an offset past 2,147,483,647 was accepted")
    try:
        worker.run_worker(octx, max_batches=2_147_483_648)
    except ValueError as exc:
        assert str(exc).startswith("max_batches: ") and "2,147,483,647" in str(exc)
    else:
        raise AssertionError("max_batches past 2,147,483,647 was accepted")
    assert _counts(store) == before
    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "data"))
    runner = CliRunner()
    for argv, name in (
        (["objects", "run", "--max-batches", "2147483648"], "--max-batches"),
        (["objects", "project", "--passes", "2147483648"], "--passes"),
        (["objects", "evidence", "w1", "project:daily", str(big)], "memory_evidence.offset"),
        (["objects", "inspect", "list", "person", str(big), "--world", "w1"], "OFFSET"),
        (["objects", "inspect", "object", "project:daily", str(big), "--world", "w1"], "OFFSET"),
        (["objects", "inspect", "event", e1, str(big)], "OFFSET"),
    ):
        result = runner.invoke(app, argv, terminal_width=200)
        assert result.exit_code == 2, (argv, result.output, result.exception)
        assert name in result.output and "2,147,483,647" in result.output, (argv, result.output)
    assert _counts(store) == before
