"""Pure rules of the analyst exports: DuckDB types of the store's columns, day windows, where a
table's Parquet files live, and the DDL of an exported table. No I/O, no Dagster."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from sqlalchemy import JSON, BigInteger, Boolean, Column, Date, DateTime, Float, Integer, Numeric, String, Text
from sqlalchemy.types import TypeDecorator, TypeEngine

from memory_pipeline.analyst.registry import DAY, ExportTable


def duckdb_type(column: Column[object]) -> str:
    """The DuckDB type an exported column gets (instants stay instants: TIMESTAMPTZ)."""
    kind: TypeEngine[object] = column.type
    if isinstance(kind, TypeDecorator):
        kind = kind.impl if isinstance(kind.impl, TypeEngine) else kind.impl()
    if isinstance(kind, JSON):
        return "JSON"
    if isinstance(kind, Boolean):
        return "BOOLEAN"
    if isinstance(kind, BigInteger | Integer):
        return "BIGINT"
    if isinstance(kind, Float | Numeric):
        return "DOUBLE"
    if isinstance(kind, DateTime):
        return "TIMESTAMPTZ"
    if isinstance(kind, Date):
        return "DATE"
    if isinstance(kind, String | Text):
        return "VARCHAR"
    raise TypeError(f"{column.table.name}.{column.name}: no DuckDB type for {column.type!r}")


def export_type(export: ExportTable, column: Column[object]) -> str:
    """The column's DuckDB type in this export (the registry may export it as another type)."""
    return dict(export.types).get(column.name) or duckdb_type(column)


def columns(export: ExportTable) -> list[tuple[str, str]]:
    """(name, DuckDB type) of the exported table: the store's columns, then cst_day when by day."""
    out = [(c.name, export_type(export, c)) for c in export.table.columns]
    if export.by_day:
        out.append((DAY, "DATE"))
    return out


def quote(name: str) -> str:
    """A DuckDB identifier (``window`` is a keyword)."""
    return '"' + name.replace('"', '""') + '"'


def create_sql(export: ExportTable) -> str:
    cols = ", ".join(f"{quote(n)} {t}" for n, t in columns(export))
    return f"CREATE TABLE IF NOT EXISTS {quote(export.name)} ({cols})"


def insert_sql(export: ExportTable, source: str) -> str:
    """Rows of ``source`` (a registered frame holding the store's columns) into the table, each
    cast to its type; cst_day computed from the day column (parameter 1: the zone name)."""
    casts = [f"CAST({quote(c.name)} AS {export_type(export, c)})" for c in export.table.columns]
    if export.day_column is not None:
        day = quote(export.day_column)
        casts.append(f"CAST({day} AS DATE)" if export.day_is_date else f"CAST(timezone(?, {day}) AS DATE)")
    # Named columns: a column the store no longer has stays in the file, NULL for new rows.
    names = ", ".join(quote(n) for n, _ in columns(export))
    return f"INSERT INTO {quote(export.name)} ({names}) SELECT {', '.join(casts)} FROM {source}"


def sql_string(value: str) -> str:
    """A SQL string literal (for the file names COPY takes, which cannot be bound parameters)."""
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class DayWindow:
    """An inclusive range of CST days (a run's partition range)."""

    first: date
    last: date

    def __post_init__(self) -> None:
        if self.last < self.first:
            raise ValueError(f"empty day window: {self.first} .. {self.last}")

    def days(self) -> Iterator[date]:
        d = self.first
        while d <= self.last:
            yield d
            d += timedelta(days=1)

    def __len__(self) -> int:
        return (self.last - self.first).days + 1

    def __str__(self) -> str:
        return self.first.isoformat() if self.first == self.last else f"{self.first}..{self.last}"


def parquet_file(root: Path, table: str, day: date | None) -> Path:
    """``<root>/<table>/cst_day=<day>/<table>.parquet`` (hive partitioning), or
    ``<root>/<table>/<table>.parquet`` for a table exported whole."""
    if day is None:
        return root / table / f"{table}.parquet"
    return root / table / f"{DAY}={day.isoformat()}" / f"{table}.parquet"


def parquet_glob(root: Path, export: ExportTable) -> str:
    """What a reader scans: temporary files are written outside it (``<root>/.tmp``)."""
    return str(root / export.name / ("*/*.parquet" if export.by_day else "*.parquet"))
