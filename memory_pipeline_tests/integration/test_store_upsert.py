"""``upsert``: the one write path for INSERT .. ON CONFLICT. Rows go as multi-VALUES statements of
up to 1,000 (not a round trip per row), repeated keys are written as sequential statements would
write them, and the return value counts the rows written, on PostgreSQL and SQLite alike."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from memory_pipeline import domains
from memory_pipeline.lib.store import Store, make_engine, upsert
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import worlds
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


def test_thousands_of_rows_go_as_a_few_statements_not_one_per_row(store):
    relay = PgWire()
    wired = Store(relay.url(store.url))
    try:
        rows = [{"world_id": f"w{i:05d}", "name": f"n{i}"} for i in range(2500)]
        for update in (None, []):  # DO UPDATE, then DO NOTHING over the same keys
            mark = relay.count()
            with wired.begin() as conn:
                n = upsert(conn, worlds, rows, keys=["world_id"], update=update)
            inserts = [q for q in relay.since(mark) if q.startswith("INSERT INTO worlds")]
            assert len(inserts) == 3, f"{len(inserts)} INSERT statements for 2,500 rows"
            assert n == (2500 if update is None else 0)
        assert len(_names(store)) == 2500
    finally:
        make_engine(wired.url).dispose()
        relay.close()
