"""Engine creation and idempotent upserts for SQLite and PostgreSQL."""

from __future__ import annotations

import io
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import date, datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any, Self, TypeVar, cast
from weakref import WeakKeyDictionary

from sqlalchemy import ColumnDefault, Connection, Engine, Table, TableClause, create_engine, event, select, text
from sqlalchemy import column as sql_column
from sqlalchemy import table as sql_table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.sql.cache_key import CacheKey

T = TypeVar("T")


def _normalize(url: str) -> str:
    # SQLAlchemy 2.0 + psycopg2 is what dagster-postgres uses too; accept bare postgres URLs.
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


# The databases the store runs on, by SQLAlchemy backend name: how their URLs are written.
SUPPORTED_BACKENDS = {"sqlite": "sqlite:///PATH", "postgresql": "postgresql://USER@HOST:PORT/DATABASE"}


@lru_cache(maxsize=16)
def make_engine(url: str) -> Engine:
    """hide_parameters: a database error's text shows the statement but never the values bound to
    it (message bodies, summaries, cached answers). A URL of any other database than SQLite or
    PostgreSQL is an ArgumentError, as a URL that is none (its driver is not installed, and the
    migrations and upserts are written for these two)."""
    url = _normalize(url)
    backend = make_url(url).get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise ArgumentError(
            f"the scheme {backend!r} is not supported: the store is {' or '.join(SUPPORTED_BACKENDS.values())}"
        )
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


# SQLAlchemy 2.0 never caches the compiled form of its PostgreSQL and SQLite INSERT (their Insert
# sets inherit_cache=False: sqlalchemy#10445), so every upsert built and compiled its ON CONFLICT
# statement again: about 1.5 ms a call, a sixth of a month of nightly sleep's time. The
# statements built by ``cached_insert`` carry no bound value of their own (rows come as execute
# parameters, anything else as a value-less ``bindparam``), so their SQL is fixed by their shape
# (with the dialect and the parameters' column names, which SQLAlchemy adds): each is built once per
# dialect and shape, and the shape is its cache key.
class _ShapeKeyed:
    """An INSERT cached by its ``shape`` (None: not cached); a statement made from it (one more
    generative step) is another SQL, so it drops the shape."""

    shape: tuple[Any, ...] | None = None

    def _generate_cache_key(self) -> CacheKey | None:
        return None if self.shape is None else CacheKey(self.shape, [])

    def _generate(self) -> Self:
        new: Self = super()._generate()  # type: ignore[misc]  # the partner base is SQLAlchemy's Generative
        new.shape = None
        return new


class _PgInsert(_ShapeKeyed, postgresql.Insert):
    inherit_cache = False


class _SqliteInsert(_ShapeKeyed, sqlite.Insert):
    inherit_cache = False


def _dialect_insert(conn: Connection, table: Table) -> _PgInsert | _SqliteInsert:
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return _PgInsert(table)
    if dialect == "sqlite":
        return _SqliteInsert(table)
    raise ValueError(f"upsert supports sqlite and postgresql, not {dialect}")


_BUILT: dict[tuple[Any, ...], Any] = {}


def cached_insert(conn: Connection, table: Table, shape: tuple[Any, ...], build: Callable[[Any], T]) -> T:
    """``build(INSERT of table)`` for this connection's dialect (its ON CONFLICT clauses), made once
    per dialect and ``shape`` and compiled once: ``shape`` must name everything ``build`` makes of
    it (``build`` adds no bound value; see above)."""
    key = ("memory_pipeline.lib.store.db", conn.dialect.name, table, *shape)
    stmt: Any = _BUILT.get(key)
    if stmt is None:
        stmt = build(_dialect_insert(conn, table))
        stmt.shape = key
        _BUILT[key] = stmt
    return cast(T, stmt)


def insert_missing(conn: Connection, table: Table, rows: Sequence[Mapping[str, object]], key: str) -> list[object]:
    """INSERT .. ON CONFLICT (key) DO NOTHING RETURNING key: the keys of the rows this statement
    inserted. A row whose key exists, or that a concurrent transaction inserts and commits first
    (the statement waits for it), is skipped, never an error: the caller re-reads the skipped
    keys in its own transaction to tell a duplicate from a conflict."""
    if not rows:
        return []
    stmt = cached_insert(
        conn,
        table,
        ("insert_missing", key),
        lambda ins: ins.on_conflict_do_nothing(index_elements=[key]).returning(table.c[key]),
    )
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
    update = list(update) if update is not None else [c for c in rows[0] if c not in keys]
    # One statement may not touch a row twice (PostgreSQL refuses DO UPDATE on it).
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        k = tuple(row[c] for c in keys)
        if update or k not in by_key:
            by_key[k] = row
    unique = list(by_key.values())

    def conflict(stmt: Any) -> Any:
        if update:
            stmt = stmt.on_conflict_do_update(index_elements=keys, set_={c: stmt.excluded[c] for c in update})
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=keys)
        # RETURNING is what makes SQLAlchemy send VALUES rows as multi-VALUES statements of up to
        # 1,000 (insertmanyvalues); an ON CONFLICT statement without it goes row by row, a round
        # trip each.
        return stmt.returning(table.c[keys[0]])

    payload = _copy_payload(conn, table, unique)
    if payload is None:
        stmt = cached_insert(conn, table, ("upsert", tuple(keys), tuple(update)), conflict)
        return len(conn.execute(stmt, unique).all())
    # The rows COPYed into a scratch table, then one INSERT .. SELECT with the same ON CONFLICT
    # clause as the VALUES form (a statement of its own: the scratch table is new each time).
    names, data = payload
    scratch = _scratch(conn, table, names)
    _copy(conn, _quote_table(conn, scratch), names, data)
    from_scratch = _dialect_insert(conn, table).from_select(
        names, select(*(sql_column(n) for n in names)).select_from(scratch)
    )
    return len(conn.execute(conflict(from_scratch)).all())


def insert_rows(conn: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> int:
    """A plain INSERT of ``rows`` (COPY on PostgreSQL from COPY_ROWS rows on); returns how many."""
    if not rows:
        return 0
    if (payload := _copy_payload(conn, table, rows, COPY_ROWS)) is not None:
        _copy(conn, _quote_table(conn, table), *payload)
    else:
        conn.execute(table.insert(), list(rows))
    return len(rows)


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


# ---- COPY for large writes on PostgreSQL ----------------------------------------------------------
# SQLAlchemy binds every value of an executemany in Python and renders multi-VALUES statements: about
# 100 us a row for a wide row (a year's backfill writes ~11k summary, ledger and cache rows: 1.5 s).
# COPY sends the same rows as text in one stream. Same transaction, same rows; the VALUES path stays
# for small writes (a round trip less) and for SQLite.
BULK_ROWS = 200
# A plain INSERT is one statement either way, and COPY was faster from two rows on (a transaction's
# DELETE, INSERT and commit of 2 rows 1.03 -> 0.91 ms, 116 rows 4.8 -> 2.7 ms, 400 rows 15.1 -> 7.1
# ms): only the upsert, three statements by COPY, waits for BULK_ROWS.
COPY_ROWS = 2
_SCRATCH = itertools.count()
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_payload(
    conn: Connection, table: Table, rows: Sequence[dict[str, Any]], at_least: int | None = None
) -> tuple[list[str], str] | None:
    """(columns, ``rows`` in COPY's text format), or None when they go the VALUES way: not
    PostgreSQL, fewer than ``at_least`` rows (BULK_ROWS unless given), rows with different columns, a left-out column whose
    default is a SQL expression, or a value with no text form here. Left-out columns with a Python
    default get it, per row, as SQLAlchemy's INSERT would give it (COPY knows only the server's)."""
    if conn.dialect.name != "postgresql" or len(rows) < (BULK_ROWS if at_least is None else at_least):
        return None
    given = list(rows[0])
    if any(row.keys() != rows[0].keys() for row in rows):
        return None
    defaults: dict[str, ColumnDefault] = {}
    for c in table.c:
        if c.default is None or c.name in rows[0]:
            continue
        if not isinstance(c.default, ColumnDefault) or not (c.default.is_scalar or c.default.is_callable):
            return None  # a SQL expression or a sequence: the VALUES way
        defaults[c.name] = c.default
    names = given + list(defaults)
    processors = [table.c[n].type.bind_processor(conn.dialect) for n in names]  # JSON -> text, UTC ...
    lines = []
    try:
        for row in rows:
            # a callable default is wrapped by SQLAlchemy to take an execution context (ours ignore it)
            values = [row[n] for n in given] + [d.arg(None) if d.is_callable else d.arg for d in defaults.values()]
            processed = (v if p is None else p(v) for v, p in zip(values, processors, strict=True))
            lines.append("\t".join(map(_copy_value, processed)))
    except _NoTextForm:
        return None
    return names, "\n".join(lines) + "\n"


class _NoTextForm(TypeError):
    pass


def _copy_value(value: Any) -> str:
    """One value in COPY's text format (after the column type's own bind processing)."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, str):
        return value.translate(_COPY_ESCAPES)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, int | float | Decimal):
        return str(value)
    raise _NoTextForm(type(value).__name__)


def _quote_table(conn: Connection, t: TableClause) -> str:
    return conn.dialect.identifier_preparer.format_table(t)


def _copy(conn: Connection, target: str, names: list[str], payload: str) -> None:
    quote = conn.dialect.identifier_preparer.quote
    statement = f"COPY {target} ({', '.join(map(quote, names))}) FROM STDIN"
    driver_error = conn.dialect.loaded_dbapi.Error
    cursor = conn.connection.cursor()  # the transaction's own connection
    try:
        cursor.copy_expert(statement, io.StringIO(payload))
    except driver_error as exc:  # wrapped as SQLAlchemy wraps a statement's error (IntegrityError ...)
        raise DBAPIError.instance(statement, None, exc, driver_error, dialect=conn.dialect) from exc
    finally:
        cursor.close()


def _scratch(conn: Connection, target: Table, names: list[str]) -> TableClause:
    """An empty temporary table (dropped at commit) with ``target``'s columns ``names``, typed as there."""
    quote = conn.dialect.identifier_preparer.quote
    scratch = sql_table(f"_bulk_{target.name}_{next(_SCRATCH)}")
    conn.execute(
        text(
            f"CREATE TEMPORARY TABLE {_quote_table(conn, scratch)} ON COMMIT DROP AS SELECT "
            f"{', '.join(map(quote, names))} FROM {_quote_table(conn, target)} WITH NO DATA"
        )
    )
    return scratch


def world_ingested(store: Store, world: str) -> bool:
    """Whether anything has been ingested for ``world`` (ingest makes its ``worlds`` row): a world
    with none is unknown, and reads and writes of its memory are refused rather than answered
    empty or made up."""
    from memory_pipeline.lib.store.tables import worlds

    with store.connect() as conn:
        return conn.execute(select(worlds.c.world_id).where(worlds.c.world_id == world)).first() is not None
