"""The suite's own isolation: a test that uses the store borrows its worker's migrated schema, and
the next test that borrows it finds it as migrations leave it (every table empty, every id starting
at 1, the same revision), under a URL of its own; a test that changed its shape leaves it dropped,
and the next gets a freshly migrated one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine, insert, select, text

from memory_pipeline import domains
from memory_pipeline.events.tables import ingest_batches
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import VERSION_TABLE, current, ensure_schema, head
from memory_pipeline.lib.store.tables import conversations, worlds
from memory_pipeline_tests.conftest import PG_URL, _MigratedSchema

LOCATIONS = domains.version_locations()


def _schema_exists(name: str) -> bool:
    admin = create_engine(PG_URL)
    try:
        with admin.connect() as conn:
            return conn.execute(text("SELECT to_regnamespace(:s) IS NOT NULL"), {"s": name}).scalar_one()
    finally:
        admin.dispose()


def _rows(store: Store) -> dict[str, int]:
    """Every table's row count, the revision's table included."""
    with store.connect() as conn:
        tables = conn.execute(
            text(
                "SELECT relname FROM pg_class WHERE relnamespace = to_regnamespace(current_schema()) AND relkind = 'r'"
            )
        ).scalars()
        return {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in tables}


def _write(store: Store) -> int:
    """A world, a conversation and an ingest batch; the batch's id."""
    now = datetime(2026, 12, 5, tzinfo=UTC)
    with store.begin() as conn:
        conn.execute(insert(worlds).values(world_id="w1", created_at=now))
        conn.execute(
            insert(conversations).values(conversation_id="c1", world_id="w1", platform="local", created_at=now)
        )
        return conn.execute(
            insert(ingest_batches)
            .values(source="f.jsonl", sha256="0" * 64, lines=1, inserted=1, duplicates=0, rejected=0, at=now)
            .returning(ingest_batches.c.batch_id)
        ).scalar_one()


def test_the_next_loan_finds_the_schema_as_migrations_left_it_under_a_url_of_its_own():
    lender = _MigratedSchema()
    try:
        with lender.lend() as first:
            store = Store(first)
            ensure_schema(store, LOCATIONS)
            schema = lender.schema
            assert _write(store) == 1
            assert _rows(store)["worlds"] == 1
        with lender.lend() as second:
            assert lender.schema == schema  # the same schema, not migrated again
            assert second != first  # whatever a process keeps per URL is not carried over
            store = Store(second)
            assert current(store) == head(LOCATIONS)
            rows = _rows(store)
            assert rows.pop(VERSION_TABLE) == 1
            assert set(rows.values()) == {0}, {t: n for t, n in rows.items() if n}
            assert _write(store) == 1  # the batch id's sequence starts again
        with lender.lend() as third:  # a write rolled back leaves no row but a used sequence
            store = Store(third)
            with pytest.raises(RuntimeError), store.begin() as conn:
                conn.execute(
                    insert(ingest_batches).values(
                        source="f.jsonl", sha256="0" * 64, lines=1, inserted=1, duplicates=0, rejected=0
                    )
                )
                raise RuntimeError("rolled back")
            assert set(_rows(store).values()) == {0, 1}
        with lender.lend() as fourth:
            assert lender.schema == schema
            assert _write(Store(fourth)) == 1
    finally:
        lender.drop()
    assert not _schema_exists(schema)


def test_a_loan_that_changed_the_schemas_shape_leaves_it_dropped_and_the_next_is_migrated_afresh():
    lender = _MigratedSchema()
    try:
        with lender.lend() as url:
            changed = lender.schema
            with Store(url).begin() as conn:
                conn.execute(text("ALTER TABLE messages ADD CONSTRAINT forced CHECK (length(content) < 5)"))
        assert lender.schema is None
        assert not _schema_exists(changed)
        with lender.lend() as url:
            assert lender.schema != changed
            with Store(url).connect() as conn:
                assert current(Store(url)) == head(LOCATIONS)
                forced = conn.execute(
                    text(
                        "SELECT count(*) FROM pg_constraint WHERE conname = 'forced'"
                        " AND connamespace = to_regnamespace(current_schema())"
                    )
                ).scalar_one()
            assert forced == 0
        with lender.lend() as url:  # an added table changes the shape too
            with Store(url).begin() as conn:
                conn.execute(text("CREATE TABLE runs (run_id text)"))
            kept = lender.schema
        assert lender.schema is None and not _schema_exists(kept)
    finally:
        lender.drop()


def test_the_store_fixture_borrows_the_migrated_schema(store, pg_url):
    assert store.url == pg_url
    assert current(store) == head(LOCATIONS)
    with store.connect() as conn:
        assert conn.execute(select(worlds.c.world_id)).first() is None
        assert conn.execute(text("SELECT current_schema()")).scalar_one().startswith("s_")


def test_a_test_that_takes_only_the_url_gets_an_empty_unmigrated_schema(pg_url):
    with Store(pg_url).connect() as conn:
        assert conn.execute(text("SELECT current_schema()")).scalar_one().startswith("t_")
        tables = conn.execute(
            text("SELECT count(*) FROM pg_class WHERE relnamespace = to_regnamespace(current_schema())")
        ).scalar_one()
    assert tables == 0
