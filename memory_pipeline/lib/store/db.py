"""Engine creation and idempotent upserts for SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from functools import lru_cache
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, Table, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError

T = TypeVar("T")


def _normalize(url: str) -> str:
    # SQLAlchemy 2.0 + psycopg2 is what dagster-postgres uses too; accept bare postgres URLs.
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


@lru_cache(maxsize=16)
def make_engine(url: str) -> Engine:
    """hide_parameters: a database error's text shows the statement but never the values bound to
    it (message bodies, summaries, cached answers)."""
    url = _normalize(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60}, hide_parameters=True)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

    else:
        engine = create_engine(url, pool_pre_ping=True, hide_parameters=True)
    return engine


_read_engines: WeakKeyDictionary[Engine, Engine] = WeakKeyDictionary()
_read_engines_lock = threading.Lock()


def read_engine(engine: Engine) -> Engine:
    """The read-only companion of ``engine`` (one per engine, disposed with it).

    On PostgreSQL a read on the main engine costs four round trips: the pool's pre-ping (with
    psycopg2's implicit BEGIN), the statement, and the ROLLBACK that resets the connection on its
    way back to the pool. This engine's connections are AUTOCOMMIT (no BEGIN), reset nothing on
    return and are not pre-pinged, so a read is its statement alone; ``Store.read`` retries once
    on a fresh connection when a pooled one turns out dead. Its sessions are READ ONLY: a write
    through it is refused by the server. SQLite has no round trips to save (and an in-memory
    database exists only on its own engine): there it is ``engine`` itself."""
    if engine.dialect.name == "sqlite":
        return engine
    with _read_engines_lock:
        found = _read_engines.get(engine)
        if found is not None:
            return found
        reader = create_engine(
            engine.url, isolation_level="AUTOCOMMIT", pool_reset_on_return=None, hide_parameters=True
        )

        @event.listens_for(reader, "connect")
        def _read_only(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            cur.close()
            dbapi_conn.commit()  # kept even if the connection is not in autocommit yet

        event.listen(engine, "engine_disposed", lambda _engine: reader.dispose())
        _read_engines[engine] = reader
        return reader


def _insert(conn: Connection, table: Table) -> postgresql.Insert | sqlite.Insert:
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise ValueError(f"upsert supports sqlite and postgresql, not {dialect}")


def insert_missing(conn: Connection, table: Table, rows: Sequence[dict[str, Any]], key: str) -> list[Any]:
    """INSERT .. ON CONFLICT (key) DO NOTHING RETURNING key: the keys of the rows this statement
    inserted. A row whose key exists, or that a concurrent transaction inserts and commits first
    (the statement waits for it), is skipped, never an error: the caller re-reads the skipped
    keys in its own transaction to tell a duplicate from a conflict."""
    if not rows:
        return []
    stmt = _insert(conn, table).on_conflict_do_nothing(index_elements=[key]).returning(table.c[key])
    return list(conn.execute(stmt, list(rows)).scalars())


def upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[dict[str, Any]],
    keys: Iterable[str],
    update: Iterable[str] | None = None,
) -> int:
    """INSERT .. ON CONFLICT (keys) DO UPDATE (update) / DO NOTHING when ``update`` is empty.

    Returns the rows actually written, a key once: a row skipped by DO NOTHING does not count.
    Rows repeating a key are written as one after the other would be: DO UPDATE keeps the last,
    DO NOTHING the first."""
    if not rows:
        return 0
    keys = list(keys)
    stmt = _insert(conn, table)
    update = list(update) if update is not None else [c for c in rows[0] if c not in keys]
    if update:
        stmt = stmt.on_conflict_do_update(index_elements=keys, set_={c: stmt.excluded[c] for c in update})
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=keys)
    # One multi-VALUES statement may not touch a row twice (PostgreSQL refuses DO UPDATE on it).
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        k = tuple(row[c] for c in keys)
        if update or k not in by_key:
            by_key[k] = row
    # RETURNING is what makes SQLAlchemy send the rows as multi-VALUES statements of up to 1,000
    # (insertmanyvalues); an ON CONFLICT statement without it goes row by row, a round trip each.
    returning = stmt.returning(table.c[keys[0]])
    return len(conn.execute(returning, list(by_key.values())).all())


class Store:
    """A handle on the operational store (an engine; all I/O is Core statements)."""

    def __init__(self, url: str):
        self.url = _normalize(url)
        self.engine = make_engine(url)

    @staticmethod
    def kind_of(url: str) -> str:
        """The technology behind a URL, as Dagster asset kinds name it."""
        return "sqlite" if _normalize(url).startswith("sqlite") else "postgres"

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def begin(self) -> AbstractContextManager[Connection]:
        return self.engine.begin()

    def connect(self) -> Connection:
        return self.engine.connect()

    def read(self, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)`` on a read-only connection of :func:`read_engine` (on PostgreSQL: one round
        trip per statement, nothing around it). For short reads on a hot path; ``fn`` must not
        write. A pooled connection found dead (the server restarted while it sat in the pool) is
        dropped with the pool's other connections and ``fn`` runs once more on a fresh one."""
        engine = read_engine(self.engine)
        try:
            with engine.connect() as conn:
                return fn(conn)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
        with engine.connect() as conn:
            return fn(conn)
