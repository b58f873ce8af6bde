from memory_pipeline.lib.store.db import (
    Store,
    cached_insert,
    insert_missing,
    insert_rows,
    make_engine,
    read_engine,
    upsert,
    world_ingested,
)
from memory_pipeline.lib.store.retry import StoreUnavailable, retry_transient
from memory_pipeline.lib.store.tables import metadata

__all__ = [
    "Store",
    "StoreUnavailable",
    "cached_insert",
    "insert_missing",
    "insert_rows",
    "make_engine",
    "metadata",
    "read_engine",
    "retry_transient",
    "upsert",
    "world_ingested",
]
