"""``upsert``: the one write path for INSERT .. ON CONFLICT, and ``insert_rows`` for plain inserts.
Rows go as multi-VALUES statements of up to 1,000 (not a round trip per row); on PostgreSQL, from
``BULK_ROWS`` rows on, as one COPY into a scratch table, then one INSERT .. SELECT (an upsert), and
from ``COPY_ROWS`` rows on as one COPY (a plain insert), which writes exactly the rows the VALUES statements write. Repeated keys are written as sequential
statements would write them, and the return value counts the rows written, on PostgreSQL and SQLite
alike."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import JSON, Boolean, Column, Date, Float, Integer, MetaData, String, Table, Text, event, select, text
from sqlalchemy.exc import IntegrityError

from memory_pipeline import domains
from memory_pipeline.lib.store import Store, db, insert_rows, make_engine, upsert
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import UTCDateTime, worlds
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline_tests.wire import PgWire


@pytest.fixture(params=["postgresql", "sqlite"])
def any_store(request, tmp_path):
    if request.param == "postgresql":
        return request.getfixturevalue("store")
    store = Store(f"sqlite:///{tmp_path / 'upsert.db'}")
    ensure_schema(store, domains.version_locations())
    return store


def _names(store: Store) -> dict[str, str | None]:
    with store.connect() as conn:
        return dict(conn.execute(select(worlds.c.world_id, worlds.c.name)).all())


def test_do_update_writes_every_row_and_keeps_the_last_of_a_repeated_key(any_store):
    with any_store.begin() as conn:
        assert upsert(conn, worlds, [{"world_id": "w1", "name": "a"}], keys=["world_id"]) == 1
    rows = [
        {"world_id": "w1", "name": "b"},
        {"world_id": "w2", "name": "first"},
        {"world_id": "w2", "name": "last"},
    ]
    with any_store.begin() as conn:
        # A key counts once, however often it is repeated.
        assert upsert(conn, worlds, rows, keys=["world_id"]) == 2
    assert _names(any_store) == {"w1": "b", "w2": "last"}


def test_do_nothing_counts_only_new_rows_and_keeps_the_first_of_a_repeated_key(any_store):
    with any_store.begin() as conn:
        assert upsert(conn, worlds, [{"world_id": "w1", "name": "a"}], keys=["world_id"], update=[]) == 1
    rows = [
        {"world_id": "w1", "name": "b"},
        {"world_id": "w2", "name": "first"},
        {"world_id": "w2", "name": "last"},
    ]
    with any_store.begin() as conn:
        assert upsert(conn, worlds, rows, keys=["world_id"], update=[]) == 1
    assert _names(any_store) == {"w1": "a", "w2": "first"}
    with any_store.begin() as conn:
        assert upsert(conn, worlds, rows, keys=["world_id"], update=[]) == 0


def _compiled(store: Store, write) -> list[object]:
    """The compiled statements ``write(conn)`` executed, in order (each execution's own)."""
    seen: list[object] = []

    def note(_conn, _cursor, _statement, _params, context, _many):
        seen.append(context.compiled)

    event.listen(store.engine, "before_cursor_execute", note)
    try:
        with store.begin() as conn:
            write(conn)
    finally:
        event.remove(store.engine, "before_cursor_execute", note)
    return seen


def test_an_upsert_statement_is_compiled_once_per_shape_and_shapes_never_share_one(any_store):
    # SQLAlchemy 2.0 compiles its dialects' ON CONFLICT INSERT at every call (it caches no such
    # statement); ours are cached by their shape: the same upsert again reuses its compiled form,
    # while another key or update list is a statement of its own and writes what it says.
    row = {"world_id": "w1", "name": "a", "first_event_at": datetime(2025, 1, 1, tzinfo=UTC)}
    first = _compiled(any_store, lambda conn: upsert(conn, worlds, [row], keys=["world_id"]))
    again = _compiled(any_store, lambda conn: upsert(conn, worlds, [row | {"name": "b"}], keys=["world_id"]))
    assert len(first) == len(again) == 1 and first[0] is again[0]
    later = datetime(2025, 2, 1, tzinfo=UTC)
    only_date = _compiled(
        any_store,
        lambda conn: upsert(
            conn, worlds, [row | {"name": "c", "first_event_at": later}], ["world_id"], ["first_event_at"]
        ),
    )
    nothing = _compiled(any_store, lambda conn: upsert(conn, worlds, [row | {"name": "d"}], ["world_id"], update=[]))
    assert len({id(c) for c in (first[0], only_date[0], nothing[0])}) == 3
    assert "DO NOTHING" in str(nothing[0]) and "DO UPDATE" in str(only_date[0])
    with any_store.connect() as conn:
        name, at = conn.execute(select(worlds.c.name, worlds.c.first_event_at)).one()
    assert (name, at) == ("b", later)  # the update of the date alone left the name; DO NOTHING left both


def test_a_statement_made_from_a_cached_one_is_compiled_as_itself(any_store):
    # The cache key belongs to the statement cached_insert built: a statement made from it (here
    # with RETURNING added) is another SQL and must never be served the cached compiled form.
    def build(ins):
        return ins.on_conflict_do_nothing(index_elements=["world_id"])

    with any_store.begin() as conn:
        plain = db.cached_insert(conn, worlds, ("test.derived",), build)
        conn.execute(plain, [{"world_id": "w1", "name": "a"}])
        derived = plain.returning(worlds.c.world_id)
        assert conn.execute(derived, [{"world_id": "w2", "name": "b"}]).scalars().all() == ["w2"]
        assert db.cached_insert(conn, worlds, ("test.derived",), build) is plain
    assert _names(any_store) == {"w1": "a", "w2": "b"}


def test_a_lease_is_taken_by_one_compiled_statement_whatever_its_holder_and_time(any_store):
    from memory_pipeline.lib.store import leases

    now = utcnow()
    takes = [
        ("h1", now, None),  # free: taken
        ("h2", now, "h1"),  # held by h1 and not expired: refused, h1 named
        ("h2", now + timedelta(seconds=11), None),  # expired: taken over
    ]
    compiled = []
    for holder, at, refused_by in takes:
        got = []
        compiled += _compiled(
            any_store,
            lambda conn, holder=holder, at=at, got=got: got.append(
                leases.try_acquire(any_store, "a", "p", holder, timedelta(seconds=10), now=at, conn=conn)
            ),
        )
        assert (got[0].holder if got[0] else None) == refused_by
    inserts = [c for c in compiled if str(c).startswith("INSERT INTO partition_leases")]
    assert len(inserts) == 3 and all(c is inserts[0] for c in inserts)


def _statements(relay: PgWire, mark: int, *starts: str) -> dict[str, int]:
    sent = relay.since(mark)
    return {start: sum(q.startswith(start) for q in sent) for start in starts}


def test_rows_below_the_bulk_size_go_as_multi_values_statements_not_one_per_row(store, monkeypatch):
    monkeypatch.setattr(db, "BULK_ROWS", 10**9)  # the VALUES form at any size
    relay = PgWire()
    wired = Store(relay.url(store.url))
    try:
        rows = [{"world_id": f"w{i:05d}", "name": f"n{i}"} for i in range(2500)]
        for update in (None, []):  # DO UPDATE, then DO NOTHING over the same keys
            mark = relay.count()
            with wired.begin() as conn:
                n = upsert(conn, worlds, rows, keys=["world_id"], update=update)
            sent = _statements(relay, mark, "INSERT INTO worlds", "COPY")
            assert sent == {"INSERT INTO worlds": 3, "COPY": 0}, f"{sent} for 2,500 rows"
            assert n == (2500 if update is None else 0)
        assert len(_names(store)) == 2500
    finally:
        make_engine(wired.url).dispose()
        relay.close()


def test_thousands_of_rows_go_as_one_copy_and_one_insert_on_postgresql(store):
    relay = PgWire()
    wired = Store(relay.url(store.url))
    try:
        rows = [{"world_id": f"w{i:05d}", "name": f"n{i}"} for i in range(2500)]
        for update in (None, []):
            mark = relay.count()
            with wired.begin() as conn:
                n = upsert(conn, worlds, rows, keys=["world_id"], update=update)
            sent = _statements(relay, mark, "INSERT INTO worlds", "COPY")
            assert sent == {"INSERT INTO worlds": 1, "COPY": 1}, f"{sent} for 2,500 rows"
            assert n == (2500 if update is None else 0)
        assert len(_names(store)) == 2500
        # Fewer than BULK_ROWS rows: the VALUES form (no scratch table for a handful of rows).
        mark = relay.count()
        with wired.begin() as conn:
            upsert(conn, worlds, rows[: db.BULK_ROWS - 1], keys=["world_id"])
        assert _statements(relay, mark, "INSERT INTO worlds", "COPY") == {"INSERT INTO worlds": 1, "COPY": 0}
        # A plain insert is one statement either way: COPY from two rows on, one row as VALUES.
        for n, want in ((2, {"INSERT INTO worlds": 0, "COPY": 1}), (1, {"INSERT INTO worlds": 1, "COPY": 0})):
            mark = relay.count()
            with wired.begin() as conn:
                fresh = [{"world_id": f"plain{n}-{i}", "name": None} for i in range(n)]
                assert insert_rows(conn, worlds, fresh) == n
            assert _statements(relay, mark, "INSERT INTO worlds", "COPY") == want, f"{n} row(s)"
        assert len(_names(store)) == 2503
    finally:
        make_engine(wired.url).dispose()
        relay.close()


# Every kind of value the store writes, and the characters COPY's text format escapes.
_TEXTS = ["plain", "tab\there", "new\nline", "cr\rhere", "back\\slash", "\\N", "", None, "北京烤鸭 🎉", "'quote\""]
_JSONS = [{"a": [1, 2.5, None, "x\ty"]}, ["北京", {"n": 0.0001}], None, "text", 3, True]


def _kinds(name: str, meta: MetaData) -> Table:
    return Table(
        name,
        meta,
        Column("id", String(32), primary_key=True),
        Column("body", Text),
        Column("doc", JSON),
        Column("at", UTCDateTime),
        Column("day", Date),
        Column("flag", Boolean),
        Column("ratio", Float),
        Column("count", Integer, nullable=False, default=7),  # Python defaults, left out of the rows
        Column("made_at", UTCDateTime, nullable=False, default=utcnow),
        Column("level", Integer, nullable=False, server_default=text("5")),  # the server's default
    )


def _kind_rows(n: int, salt: str) -> list[dict]:
    start = datetime(2025, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)
    return [
        {
            "id": f"r{i:04d}",
            "body": None if _TEXTS[i % len(_TEXTS)] is None else f"{_TEXTS[i % len(_TEXTS)]}{salt}",
            "doc": _JSONS[i % len(_JSONS)],
            "at": start + timedelta(minutes=i) if i % 5 else None,
            "day": date(2025, 1, 1) + timedelta(days=i % 400),
            "flag": (None, True, False)[i % 3],
            "ratio": i / 7 if i % 4 else None,
        }
        for i in range(n)
    ]


def test_copy_writes_exactly_the_rows_the_values_statements_write(store, monkeypatch):
    meta = MetaData()
    tables = {"values": _kinds("kinds_values", meta), "copy": _kinds("kinds_copy", meta)}
    with store.begin() as conn:
        meta.create_all(conn)
    n = db.BULK_ROWS + 50
    written: dict[str, list[tuple]] = {}
    before = utcnow()
    for path, table in tables.items():
        monkeypatch.setattr(db, "BULK_ROWS", 10**9 if path == "values" else 200)
        monkeypatch.setattr(db, "COPY_ROWS", 10**9 if path == "values" else 2)
        with store.begin() as conn:
            assert upsert(conn, table, _kind_rows(n, ""), keys=["id"]) == n
        with store.begin() as conn:  # DO UPDATE of every row, then DO NOTHING of the same keys
            assert upsert(conn, table, _kind_rows(n, " (again)"), keys=["id"]) == n
            assert upsert(conn, table, _kind_rows(n, " (ignored)"), keys=["id"], update=[]) == 0
        with store.begin() as conn:
            extra = [r | {"id": f"x{r['id']}"} for r in _kind_rows(n, " (inserted)")]
            assert insert_rows(conn, table, extra) == n
        with store.connect() as conn:
            found = conn.execute(select(table).order_by(table.c.id)).all()
        assert all(r.made_at >= before for r in found)  # the Python default, given per row
        written[path] = [tuple(r)[:-2] + (r.level,) for r in found]  # made_at: the moment of writing
    assert len(written["copy"]) == 2 * n
    assert written["copy"] == written["values"]
    assert {r[1] for r in written["copy"]} >= {f"{t} (again)" for t in _TEXTS if t is not None}
    assert all(r[-1] == 5 for r in written["copy"])  # the server's default


def test_a_copy_that_breaks_a_constraint_fails_as_a_statement_would(store):
    rows = [{"world_id": f"w{i:05d}", "name": None} for i in range(db.BULK_ROWS)]
    with store.begin() as conn:
        insert_rows(conn, worlds, rows)
    with pytest.raises(IntegrityError, match="duplicate key"), store.begin() as conn:
        insert_rows(conn, worlds, rows)  # the same keys again: the whole COPY is refused
    assert len(_names(store)) == db.BULK_ROWS
