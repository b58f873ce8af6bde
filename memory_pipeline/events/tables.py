"""Tables of the raw-events domain besides the raw tables themselves: one row per ingested file."""

from __future__ import annotations

from sqlalchemy import Column, Integer, String, Table

from memory_pipeline.lib.store.tables import UTCDateTime, metadata, now_utc

ingest_batches = Table(
    "ingest_batches",
    metadata,
    Column("batch_id", Integer, primary_key=True, autoincrement=True),
    Column("source", String(1024), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("lines", Integer, nullable=False),
    Column("inserted", Integer, nullable=False),
    Column("duplicates", Integer, nullable=False),
    Column("rejected", Integer, nullable=False),
    Column("at", UTCDateTime, nullable=False, default=now_utc),
)
