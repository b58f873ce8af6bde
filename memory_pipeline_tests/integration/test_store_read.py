"""``Store.read``: the platform's read-only path. On PostgreSQL one round trip per statement
(AUTOCOMMIT, no pre-ping, no reset on return), read-only sessions, a pooled connection found
dead retried once on a fresh one, disposed with the store's engine; on SQLite the store's own
engine."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.exc import DBAPIError

from memory_pipeline.lib.store import Store, make_engine, read_engine
from memory_pipeline.lib.store.tables import worlds
from memory_pipeline_tests.conftest import PG_URL
from memory_pipeline_tests.wire import PgWire


@pytest.fixture
def named(store):
    """The test's schema under an application_name of its own (its backends are found by it)."""
    name = f"read_{uuid.uuid4().hex[:10]}"
    url = f"{store.url}&application_name={name}"
    yield Store(url), name
    make_engine(url).dispose()


def _backends(name: str) -> int:
    admin = create_engine(PG_URL)
    try:
        with admin.connect() as conn:
            return conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :n"), {"n": name}
            ).scalar_one()
    finally:
        admin.dispose()


def _terminate(name: str) -> int:
    admin = create_engine(PG_URL)
    try:
        with admin.begin() as conn:
            return len(
                conn.execute(
                    text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :n"),
                    {"n": name},
                ).all()
            )
    finally:
        admin.dispose()


def test_a_read_is_its_statement_alone_on_the_wire(store):
    relay = PgWire()
    wired = Store(relay.url(store.url))
    try:
        wired.read(lambda conn: conn.execute(text("SELECT 1")).scalar_one())  # opens the connection
        setup = relay.since(0)
        assert "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY" in setup
        mark = relay.count()
        got = [
            wired.read(lambda conn: conn.execute(select(func.count()).select_from(worlds)).scalar_one())
            for _ in range(3)
        ]
        assert got == [0, 0, 0]
        assert relay.since(mark) == ["SELECT count(*) AS count_1 \nFROM worlds"] * 3
    finally:
        make_engine(wired.url).dispose()
        relay.close()


def test_a_write_through_the_read_path_is_refused_and_writes_nothing(store):
    with pytest.raises(DBAPIError, match="read-only transaction"):
        store.read(lambda conn: conn.execute(worlds.insert().values(world_id="w-ro")))
    with pytest.raises(DBAPIError, match="read-only transaction"):
        store.read(lambda conn: conn.execute(text("CREATE TABLE read_path_probe (i int)")))
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(worlds)).scalar_one() == 0
        assert conn.execute(text("SELECT to_regclass('read_path_probe')")).scalar_one() is None
    # the main engine still writes
    with store.begin() as conn:
        conn.execute(worlds.insert().values(world_id="w-rw"))
    assert store.read(lambda conn: conn.execute(select(worlds.c.world_id)).scalars().all()) == ["w-rw"]


def test_a_pooled_connection_found_dead_is_retried_once_on_a_fresh_one(named):
    store, name = named
    with store.begin() as conn:
        conn.execute(worlds.insert().values(world_id="w1"))
    calls = []

    def count_worlds(conn):
        calls.append(1)
        return conn.execute(select(func.count()).select_from(worlds)).scalar_one()

    assert store.read(count_worlds) == 1 and len(calls) == 1
    assert _terminate(name) >= 1  # the server drops the pooled connection (as a restart would)
    assert store.read(count_worlds) == 1
    assert len(calls) == 3  # the dead connection's attempt, then the fresh one's
    assert store.read(count_worlds) == 1 and len(calls) == 4

    # Any other error is the caller's, raised at once.
    with pytest.raises(DBAPIError, match="no_such_table"):
        store.read(lambda conn: calls.append(1) or conn.execute(text("SELECT * FROM no_such_table")))
    assert len(calls) == 5


def test_the_read_engine_is_disposed_with_the_store_engine(named):
    store, name = named
    assert store.read(lambda conn: conn.execute(text("SELECT 1")).scalar_one()) == 1
    reader = read_engine(store.engine)
    assert reader is read_engine(store.engine) and reader is not store.engine
    assert reader.pool.checkedin() == 1 and _backends(name) == 1
    store.engine.dispose()
    assert reader.pool.checkedin() == 0 and _backends(name) == 0


def test_on_sqlite_the_read_path_is_the_store_engine(tmp_path):
    lite = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    try:
        assert read_engine(lite.engine) is lite.engine
        with lite.begin() as conn:
            conn.execute(text("CREATE TABLE t (i INTEGER)"))
            conn.execute(text("INSERT INTO t VALUES (1), (2)"))
        assert lite.read(lambda conn: conn.execute(text("SELECT sum(i) FROM t")).scalar_one()) == 3
    finally:
        lite.engine.dispose()
