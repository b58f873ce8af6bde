"""The embedded instance's event log: Dagster's SQLite event log storage, written in fewer, cheaper
commits. Named in the dagster.yaml the CLI writes (operations.runner.INSTANCE_YAML).

Dagster's SqliteEventLogStorage opens a new engine and connection for every write and closes it
after: each event is one to three commits with a full fsync, and each close of the last connection
to a database checkpoints its WAL (another fsync). A range export's 1,400 events spent ~92 of 98 s
there. This storage keeps the same files, tables and rows, and changes only how they are written:

- a batch of one run's asset events (Dagster's ``store_event_batch`` path, which the instance uses
  when DAGSTER_EVENT_BATCH_SIZE > 0: a run's planned events, an output's materializations over a
  range of partitions) is one transaction in the run's database and one in the index database;
- commits use ``synchronous=NORMAL`` (unless a connect hook already set it lower): in WAL mode a
  commit survives a killed process (it is in the WAL), only an OS crash or power loss can drop the
  last commits, never corrupt the file;
- the index database's connection and the last run's stay open, so a write is no connect and no
  close (no checkpoint per event; SQLite checkpoints the WAL itself every 1,000 pages);
- after a write to a run's database the file's mtime is touched: the UI's watcher follows a run by
  the file's change events, which an open connection's WAL writes no longer cause.

Single events (run and step events, check results) are Dagster's ``store_event`` on the same kept
connections; reads, the watcher and migrations are Dagster's code."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import sqlalchemy as db
import sqlalchemy.exc as db_exc
from dagster import _check as check
from dagster._config import Field, StringSource
from dagster._config.config_schema import UserConfigSchema
from dagster._core.errors import DagsterInvariantViolationError
from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS, EVENT_TYPE_TO_PIPELINE_RUN_STATUS
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.schema import AssetKeyTable, SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

if TYPE_CHECKING:
    from dagster._core.instance import DagsterInstance

_MIRRORED = ASSET_EVENTS | ASSET_CHECK_EVENTS | set(EVENT_TYPE_TO_PIPELINE_RUN_STATUS)


class _Kept:
    """One open connection to one shard, owned by the process that opened it."""

    def __init__(self, engine: Engine, conn: Connection) -> None:
        self.engine, self.conn, self.pid = engine, conn, os.getpid()

    def close(self) -> None:
        if self.pid == os.getpid():  # a forked child must not close its parent's SQLite handle
            self.conn.close()
            self.engine.dispose()


class BatchSqliteEventLogStorage(SqliteEventLogStorage):
    """SqliteEventLogStorage with batched, NORMAL-synchronous writes on kept connections.

    In dagster.yaml (``base_dir`` defaults to the instance's history/runs, where Dagster's own
    default keeps them, so an instance switched to this class keeps its event logs)::

        event_log_storage:
          module: memory_pipeline.operations.event_log
          class: BatchSqliteEventLogStorage
    """

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None) -> None:
        # Re-entrant: a batch holds it across its two transactions, and Dagster's helpers that a
        # batch calls (the check's planned rows) open the index connection again: they join the
        # batch's transaction. It replaces Dagster's _db_lock, which only Dagster's _connect took.
        self._lock = threading.RLock()
        self._kept: dict[str, _Kept] = {}  # the index shard's and the last run's connections
        self._tables: set[str] = set()
        self._pending_inst_data = inst_data
        if base_dir is not None:
            super().__init__(base_dir, inst_data=inst_data)
        # else Dagster's initialization (it creates the index database) waits for the instance,
        # the one place that knows the instance's folder: Dagster builds a storage, then registers it.

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> BatchSqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    def register_instance(self, instance: DagsterInstance) -> None:
        if not hasattr(self, "_base_dir"):
            base_dir = os.path.join(instance.root_directory, "history", "runs")
            super().__init__(base_dir, inst_data=self._pending_inst_data)
        super().register_instance(instance)

    def has_table(self, table_name: str) -> bool:
        # Asked on every asset event (tags table) and check event; a table, once there, stays.
        if table_name not in self._tables and super().has_table(table_name):
            self._tables.add(table_name)
        return table_name in self._tables

    # -- connections ---------------------------------------------------------------------------

    def _open(self, shard: str) -> _Kept:
        engine = db.create_engine(
            self.conn_string_for_shard(shard),
            poolclass=NullPool,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
        )
        if shard not in self._initialized_dbs:
            self._initdb(engine)
            self._initialized_dbs.add(shard)
        conn = engine.connect()
        if int(conn.exec_driver_sql("PRAGMA synchronous").scalar() or 0) > 1:  # FULL or EXTRA; OFF is kept
            conn.exec_driver_sql("PRAGMA synchronous=NORMAL")
        conn.commit()
        return _Kept(engine, conn)

    def _kept_for(self, shard: str) -> _Kept | None:
        """The open connection of ``shard``, opened (closing the previous run's) if need be; None
        while the previous run's is inside a transaction (the caller then opens its own)."""
        kept = self._kept.get(shard)
        if kept is not None and kept.pid != os.getpid():
            self._kept.clear()  # inherited over fork: the parent's handles are left alone
            kept = None
        if kept is not None:
            return kept
        if shard != INDEX_SHARD_NAME:
            for other in [s for s in self._kept if s != INDEX_SHARD_NAME]:
                if self._kept[other].conn.in_transaction():
                    return None
                self._kept.pop(other).close()  # one checkpoint per run, not per event
        kept = self._kept[shard] = self._open(shard)
        return kept

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        check.str_param(shard, "shard")
        with self._lock:
            kept = self._kept_for(shard)
            if kept is None:
                transient = self._open(shard)
                try:
                    yield from self._transaction(shard, transient.conn)
                finally:
                    transient.close()
            elif kept.conn.in_transaction():  # this thread's own outer transaction (the lock is held)
                yield kept.conn
            else:
                try:
                    yield from self._transaction(shard, kept.conn)
                except BaseException:
                    if kept.conn.invalidated or kept.conn.closed:
                        self._kept.pop(shard, None)
                    raise

    def _transaction(self, shard: str, conn: Connection) -> Iterator[Connection]:
        changes = self._changes(conn)
        with conn.begin():
            yield conn
        if shard != INDEX_SHARD_NAME and self._changes(conn) != changes:
            self._touch(shard)

    @staticmethod
    def _changes(conn: Connection) -> int:
        raw = conn.connection.dbapi_connection
        return int(getattr(raw, "total_changes", 0))

    def _touch(self, shard: str) -> None:
        try:
            os.utime(self.path_for_shard(shard))  # the watcher's FileModifiedEvent
        except FileNotFoundError:
            pass

    def wipe(self) -> None:
        with self._lock:
            self._close_kept()  # the run files are deleted
            super().wipe()

    def dispose(self) -> None:
        with self._lock:
            self._close_kept()
        super().dispose()

    def _close_kept(self) -> None:
        for kept in self._kept.values():
            kept.close()
        self._kept.clear()

    # -- writes --------------------------------------------------------------------------------

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """One run's batch: one transaction in the run's database, then one in the index database,
        the rows ``store_event`` writes for each event (each event serialized once, the rows
        inserted in one statement per table, an asset's row in the asset index written once with
        what its events' writes one by one would leave). If the index's transaction fails, the
        run's rows are deleted again before the error goes up, so the instance's fallback (one
        ``store_event`` per event) writes each event once."""
        check.sequence_param(events, "events", of_type=EventLogEntry)
        if not events:
            return
        if len({event.run_id for event in events}) != 1:
            super().store_event_batch(events)
            return
        run_id = events[0].run_id
        rows = [self._event_to_row(event) for event in events]
        with self._lock:
            with self.run_connection(run_id) as conn:
                run_ids = self._insert_rows(conn, rows)
            try:
                with self.index_transaction() as conn:
                    self._mirror(conn, events, rows)
            except BaseException:
                with self.run_connection(run_id) as conn:
                    conn.execute(SqlEventLogStorageTable.delete().where(SqlEventLogStorageTable.c.id.in_(run_ids)))
                raise

    def _insert_rows(self, conn: Connection, rows: list[dict[str, Any]]) -> list[int]:
        """Storage ids of ``rows`` inserted into event_logs, in their order."""
        if not rows:
            return []
        statement = SqlEventLogStorageTable.insert().returning(
            SqlEventLogStorageTable.c.id, sort_by_parameter_order=True
        )
        ids = [int(row[0]) for row in conn.execute(statement, rows)]
        if len(ids) != len(rows):
            raise DagsterInvariantViolationError(f"{len(rows)} events inserted, {len(ids)} storage ids returned")
        return ids

    def _mirror(self, conn: Connection, events: Sequence[EventLogEntry], rows: list[dict[str, Any]]) -> None:
        """What SqliteEventLogStorage.store_event writes to the index database for these events."""
        mirrored = [
            (event, row)
            for event, row in zip(events, rows, strict=True)
            if event.is_dagster_event and event.dagster_event_type in _MIRRORED
        ]
        ids = self._insert_rows(conn, [row for _, row in mirrored])
        assets = [
            (event, event_id)
            for (event, _), event_id in zip(mirrored, ids, strict=True)
            if event.dagster_event_type in ASSET_EVENTS
        ]
        if assets:
            self._store_asset_event_tags(conn, [e for e, _ in assets], [i for _, i in assets])
            self._store_asset_rows(conn, assets)
        for (event, _), event_id in zip(mirrored, ids, strict=True):
            if event.dagster_event_type in ASSET_CHECK_EVENTS:
                self.store_asset_check_event(event, event_id)  # its index_connection joins this transaction

    def _store_asset_rows(self, conn: Connection, assets: list[tuple[EventLogEntry, int]]) -> None:
        """``_store_asset_event`` once per asset: an event's write sets the columns of its kind
        (materialization, planned, observation), so the last event of each kind, applied in order,
        leaves the row the writes one by one leave."""
        last: dict[str, dict[str, tuple[int, EventLogEntry, int]]] = {}
        for order, (event, event_id) in enumerate(assets):
            dagster_event = event.dagster_event
            if dagster_event is None or dagster_event.asset_key is None:
                continue
            last.setdefault(dagster_event.asset_key.to_string(), {})[dagster_event.event_type_value] = (
                order,
                event,
                event_id,
            )
        has_index_cols = self._has_asset_key_index_cols_on_connection(conn)
        for asset_key, by_kind in last.items():
            values: dict[str, Any] = {}
            for _, event, event_id in sorted(by_kind.values(), key=lambda kept: kept[0]):
                values.update(self._get_asset_entry_values(event, event_id, has_index_cols))
            if not values:
                continue
            try:
                conn.execute(AssetKeyTable.insert().values(asset_key=asset_key, **values))
            except db_exc.IntegrityError:
                conn.execute(AssetKeyTable.update().values(**values).where(AssetKeyTable.c.asset_key == asset_key))
