"""Copy operational tables into the analyst's DuckDB file and Parquet (core I/O, no Dagster).

One call is one published version: under the writer lock, every requested table is brought up to
date in a private copy of the file, which then replaces the published one atomically (see
``files``). For a table by day the rows of exactly the window's CST days are replaced (so a
backfill, a rebuild or a late-data repair of a day flows through by exporting that day again); for
a table of periods, every row whose period overlaps the window (and the Parquet file of the day
such a row began on). A table without a day column is replaced whole. Every registered table exists
in the file after any export (empty until exported), so the dbt sources always resolve."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import duckdb
from sqlalchemy import JSON, Boolean, ColumnElement, Date, DateTime, Integer, select

from memory_pipeline.analyst import logic
from memory_pipeline.analyst.files import AnalyticsFiles, ParquetFiles, publishing
from memory_pipeline.analyst.logic import DayWindow, quote
from memory_pipeline.analyst.registry import DAY, EXPORTS, ExportTable, split_tables
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.timeutil import day_start

if TYPE_CHECKING:
    import pandas as pd

# Rows fetched from the store and inserted into DuckDB at a time (bounded memory on big days).
BATCH_ROWS = 50_000


@dataclass
class TableExport:
    table: str
    rows: int = 0  # the window's rows now in the file (of a table of periods: all overlapping it), or all
    days: int = 0  # CST days replaced (0: the table was replaced whole)
    parquet_files: int = 0  # Parquet files (re)written
    rows_by_day: dict[str, int] = field(default_factory=dict)  # days that hold rows


@dataclass
class ExportReport:
    duckdb_path: Path
    window: DayWindow | None
    tables: list[TableExport] = field(default_factory=list)
    seconds: float = 0.0
    file_bytes: int = 0

    def table(self, name: str) -> TableExport:
        return next(t for t in self.tables if t.table == name)


def ensure_tables(con: duckdb.DuckDBPyConnection, exports: Sequence[ExportTable] = EXPORTS) -> None:
    """Create every registered table (empty) if missing, add columns a migration added since, and
    the view with a store table's name over the tables it is split into."""
    for export in exports:
        con.execute(logic.create_sql(export))
        have = dict(
            con.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
                "AND table_schema = current_schema()",
                [export.name],
            ).fetchall()
        )
        for name, kind in logic.columns(export):
            if name not in have:
                con.execute(f"ALTER TABLE {quote(export.name)} ADD COLUMN {quote(name)} {kind}")
        for name, kind in export.types:  # a file written before the registry changed the type
            if name in have and have[name] != kind:
                col = quote(name)
                con.execute(
                    f"ALTER TABLE {quote(export.name)} ALTER {col} SET DATA TYPE {kind} USING TRY_CAST({col} AS {kind})"
                )
    for view, parts in split_tables().items():
        union = " UNION ALL BY NAME ".join(f"SELECT * FROM {quote(p.name)}" for p in parts)
        con.execute(f"CREATE OR REPLACE VIEW {quote(view)} AS {union}")


def _bounds(window: DayWindow, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """The window as instants: [start of its first day, start of the day after its last)."""
    return day_start(window.first, tz), day_start(window.last + timedelta(days=1), tz)


def _store_filter(export: ExportTable, window: DayWindow, tz: ZoneInfo) -> ColumnElement[bool]:
    """The store's rows of the window: by the day column, or every row whose period overlaps it."""
    assert export.day_column is not None
    col = export.table.c[export.day_column]
    if export.day_is_date:
        return col.between(window.first, window.last)
    lo, hi = _bounds(window, tz)
    if export.end_column is None:
        return (col >= lo) & (col < hi)
    end = export.table.c[export.end_column]
    return (col < hi) & ((col >= lo) | (end >= lo if export.end_inclusive else end > lo))


def _file_filter(export: ExportTable, window: DayWindow | None, tz: ZoneInfo) -> tuple[str, list[Any]]:
    """The same rows in the file (SQL and parameters): what an export of the window replaces."""
    if window is None or not export.by_day:
        return "true", []
    if export.end_column is None:
        return f"{DAY} BETWEEN ? AND ?", [window.first, window.last]
    start, end = quote(export.day_column or ""), quote(export.end_column)
    lo, hi = _bounds(window, tz)
    return f"{start} < ? AND ({start} >= ? OR {end} {'>=' if export.end_inclusive else '>'} ?)", [hi, lo, lo]


def _frame(export: ExportTable, rows: Sequence[Any]) -> pd.DataFrame:
    """A batch of store rows as a frame DuckDB scans with stable types (None stays NULL)."""
    # Imported here: every process that loads the code location (code servers, run workers, step
    # forkservers) imports this module, and only an export needs pandas (0.26 s of import).
    import pandas as pd

    data: dict[str, Any] = {}
    for i, col in enumerate(export.table.columns):
        values = [r[i] for r in rows]
        kind = col.type
        if isinstance(kind, JSON):
            data[col.name] = pd.Series(
                [None if v is None else json.dumps(v, ensure_ascii=False) for v in values], dtype=object
            )
        elif isinstance(kind, DateTime) or isinstance(getattr(kind, "impl", None), DateTime):
            data[col.name] = pd.to_datetime(pd.Series(values, dtype=object), utc=True)
        elif isinstance(kind, Integer) and not isinstance(kind, Boolean):
            data[col.name] = pd.array(values, dtype="Int64")
        elif isinstance(kind, Date):
            data[col.name] = pd.Series([None if v is None else v.isoformat() for v in values], dtype=object)
        else:
            data[col.name] = pd.Series(values, dtype=object)
    return pd.DataFrame(data)


def _copy_rows(
    con: duckdb.DuckDBPyConnection, store: Store, export: ExportTable, window: DayWindow | None, tz: ZoneInfo
) -> set[date]:
    """Delete the window's rows (or all) in the file and insert the store's, in batches. Returns the
    CST days outside the window that hold replaced rows (periods that began before it)."""
    name = quote(export.name)
    q = select(export.table)
    if export.rows is not None:
        q = q.where(export.table.c[export.rows[0]] == export.rows[1])
    where, bound = _file_filter(export, window, tz)
    first = window.first if window is not None and export.end_column is not None else None
    outside = _days_before(con, export, where, bound, first) if first else set()
    con.execute(f"DELETE FROM {name} WHERE {where}", bound)
    if window is not None and export.by_day:
        q = q.where(_store_filter(export, window, tz))
    params = [tz.key] if export.by_day and not export.day_is_date else []
    insert = logic.insert_sql(export, "incoming")
    with store.connect() as conn:
        result = conn.execution_options(yield_per=BATCH_ROWS).execute(q)
        for batch in result.partitions():
            con.register("incoming", _frame(export, batch))
            try:
                con.execute(insert, params)
            finally:
                con.unregister("incoming")
    if first:
        outside |= _days_before(con, export, where, bound, first)
    return outside


def _days_before(
    con: duckdb.DuckDBPyConnection, export: ExportTable, where: str, bound: list[Any], first: date
) -> set[date]:
    """The CST days before ``first`` of the file's rows matching ``where``."""
    rows = con.execute(
        f"SELECT DISTINCT {DAY} FROM {quote(export.name)} WHERE {where} AND {DAY} < ?", [*bound, first]
    ).fetchall()
    return {r[0] for r in rows}


def _write_parquet(
    con: duckdb.DuckDBPyConnection,
    files: AnalyticsFiles,
    parquet: ParquetFiles,
    export: ExportTable,
    days: list[date] | None,
) -> int:
    """Rewrite the Parquet file of every exported day that has rows or had a file (an emptied day
    gets an empty file rather than a deletion under a reader's feet), and the first day's when the
    table has no file at all (a glob over an empty table then reads no row, not an error); a whole
    table's one file.

    The days' rows are written by one COPY partitioned by day into a private folder under the
    temporary one, then each day's file is moved over its published path (one rename per day), so
    a range costs one query per table, not one per day."""
    assert files.parquet is not None and files.parquet_tmp is not None
    name = quote(export.name)

    def copy(where: str, params: list[Any], target: Path) -> None:
        def write(tmp: Path) -> None:
            target_sql = logic.sql_string(str(tmp))
            con.execute(
                f"COPY (SELECT * FROM {name} {where}) TO {target_sql} (FORMAT parquet, COMPRESSION zstd)", params
            )

        parquet.write(write, target)

    if days is None:
        copy("", [], logic.parquet_file(files.parquet, export.name, None))
        return 1
    written = 0
    with_rows = con.execute(f"SELECT count(*) FROM {name} WHERE list_contains(?, {DAY})", [days]).fetchone()
    files.parquet_tmp.mkdir(parents=True, exist_ok=True)
    parts = files.parquet_tmp / uuid.uuid4().hex
    try:
        if with_rows and with_rows[0]:
            con.execute(
                f"COPY (SELECT * FROM {name} WHERE list_contains(?, {DAY})) TO {logic.sql_string(str(parts))} "
                f"(FORMAT parquet, COMPRESSION zstd, PARTITION_BY ({DAY}), WRITE_PARTITION_COLUMNS true)",
                [days],
            )
        for day in days:
            target = logic.parquet_file(files.parquet, export.name, day)
            made = sorted((parts / f"{DAY}={day.isoformat()}").glob("*.parquet"))
            if len(made) == 1:
                parquet.write(lambda tmp, src=made[0]: os.replace(src, tmp), target)
            elif made or target.exists():  # several files for one day, or an emptied day: one COPY of the day
                copy(f"WHERE {DAY} = ?", [day], target)
            else:
                continue
            written += 1
        if not written and days and next((files.parquet / export.name).glob("*/*.parquet"), None) is None:
            # A table with no row on any day yet still gets one (empty) day file, with the table's
            # columns: a reader's glob over the table's folder finds no file otherwise and fails.
            copy(f"WHERE {DAY} = ?", [days[0]], logic.parquet_file(files.parquet, export.name, days[0]))
            written += 1
    finally:
        shutil.rmtree(parts, ignore_errors=True)
    return written


def export_tables(
    store: Store,
    files: AnalyticsFiles,
    exports: Sequence[ExportTable],
    window: DayWindow | None,
    tz: ZoneInfo,
    on_wait: Callable[[str], None] | None = None,
) -> ExportReport:
    """Bring ``exports`` up to date for ``window`` (a table by day: exactly those days; ``None``:
    every day it has) in one new published version of the file. ``on_wait`` hears it when another
    writer holds the file (see ``files.writer_lock``)."""
    started = time.monotonic()
    report = ExportReport(files.duckdb, window)
    parquet = ParquetFiles(files) if files.parquet is not None else None
    try:  # the Parquet files go out right after the DuckDB file: a failed export publishes neither
        with publishing(files, on_wait, then=parquet.publish if parquet else None) as staging:
            with duckdb.connect(str(staging), config=files.duckdb_config()) as con:
                ensure_tables(con)
                for export in exports:
                    report.tables.append(_export_one(con, store, files, parquet, export, window, tz))
                con.execute("CHECKPOINT")
    finally:
        if parquet is not None:
            parquet.discard()  # what a failure left unpublished (nothing after a publish)
    report.seconds = time.monotonic() - started
    report.file_bytes = files.duckdb.stat().st_size
    return report


def _export_one(
    con: duckdb.DuckDBPyConnection,
    store: Store,
    files: AnalyticsFiles,
    parquet: ParquetFiles | None,
    export: ExportTable,
    window: DayWindow | None,
    tz: ZoneInfo,
) -> TableExport:
    outside = _copy_rows(con, store, export, window, tz)  # the copy is private: a failure discards it whole
    out = TableExport(export.name)
    name = quote(export.name)
    if export.by_day:
        if window is None:
            bounds = con.execute(f"SELECT min({DAY}), max({DAY}) FROM {name}").fetchone()
            days = list(DayWindow(bounds[0], bounds[1]).days()) if bounds and bounds[0] is not None else []
        else:
            days = list(window.days())
        where, bound = _file_filter(export, window, tz)
        out.days = len(days)
        if days:
            counts = con.execute(
                f"SELECT {DAY}, count(*) FROM {name} WHERE {where} GROUP BY 1 ORDER BY 1", bound
            ).fetchall()
            out.rows_by_day = {d.isoformat(): n for d, n in counts}
            out.rows = sum(out.rows_by_day.values())
        if parquet is not None and days:
            # the days of the rows replaced outside the window get their files rewritten too
            out.parquet_files = _write_parquet(con, files, parquet, export, sorted(outside | set(days)))
    else:
        row = con.execute(f"SELECT count(*) FROM {name}").fetchone()
        out.rows = int(row[0]) if row else 0
        if parquet is not None:
            out.parquet_files = _write_parquet(con, files, parquet, export, None)
    return out
