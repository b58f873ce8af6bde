"""Schema migrations (Alembic) run from code: ``memory-pipeline db upgrade``, the demo, the tests
and every store resource bring the schema to head. Domains pass their version folders; the
platform names none of them.

Two processes starting at once on a fresh database must not race to create tables: on
PostgreSQL the upgrade holds a session-level advisory lock keyed by its schema, on SQLite an exclusive
file lock."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

from memory_pipeline.lib.store.db import Store

SCRIPT_LOCATION = str(Path(__file__).resolve().parent / "migrations")
# Any constant: the seed of the advisory lock key every migrating process takes. The key is the
# schema's name hashed with it, so migrations of one schema wait for each other and migrations of
# different schemas in one database (the tests' schema per test) do not.
_PG_LOCK_KEY = 7_000_000_042
_PG_LOCK = "hashtextextended(coalesce(current_schema(), ''), :k)"
# Not "alembic_version": the Dagster instance may share the database and keeps its own.
VERSION_TABLE = "memory_pipeline_schema_version"
_checked: set[tuple[str, tuple[str, ...]]] = set()
_checked_lock = threading.Lock()


def _config(store: Store, version_locations: Sequence[str], connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", ":".join(version_locations))
    cfg.set_main_option("sqlalchemy.url", store.url.replace("%", "%%"))
    cfg.set_main_option("version_table", VERSION_TABLE)
    cfg.attributes["connection"] = connection
    return cfg


def head(version_locations: Sequence[str]) -> str:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", ":".join(version_locations))
    heads = ScriptDirectory.from_config(cfg).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"the migration history has {len(heads)} heads ({heads}); it must be linear")
    return heads[0]


def current(store: Store) -> str | None:
    with store.connect() as conn:
        return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


@contextmanager
def _migration_lock(store: Store, conn: Connection) -> Iterator[None]:
    if store.dialect == "postgresql":
        conn.execute(text(f"SELECT pg_advisory_lock({_PG_LOCK})"), {"k": _PG_LOCK_KEY})
        conn.commit()
        try:
            yield
        finally:
            conn.execute(text(f"SELECT pg_advisory_unlock({_PG_LOCK})"), {"k": _PG_LOCK_KEY})
            conn.commit()
        return
    database = store.engine.url.database
    if not database or database == ":memory:":
        yield
        return
    lock_path = Path(database).with_name(Path(database).name + ".migrate.lock")
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def upgrade(store: Store, version_locations: Sequence[str], revision: str = "heads") -> tuple[str | None, str | None]:
    """Upgrade to ``revision`` under the migration lock; returns (before, after)."""
    with store.engine.connect() as conn:
        with _migration_lock(store, conn):
            before = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()
            conn.commit()
            cfg = _config(store, version_locations, conn)
            command.upgrade(cfg, revision)
            conn.commit()
            after = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()
            conn.commit()
    return before, after


def ensure_schema(store: Store, version_locations: Sequence[str]) -> None:
    """Upgrade to head once per process and URL (a cheap check when already there)."""
    key = (store.url, tuple(version_locations))
    if key in _checked:
        return
    with _checked_lock:
        if key in _checked:
            return
        if current(store) != head(version_locations):
            upgrade(store, version_locations)
        _checked.add(key)


def forget_checked() -> None:
    """Tests that drop a schema under the same URL call this."""
    _checked.clear()
