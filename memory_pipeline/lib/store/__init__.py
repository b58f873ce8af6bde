from memory_pipeline.lib.store.db import (
    Store,
    dialect_insert,
    insert_missing,
    insert_rows,
    make_engine,
    read_engine,
    shape_cached,
    upsert,
)
from memory_pipeline.lib.store.retry import StoreUnavailable, retry_transient
from memory_pipeline.lib.store.tables import metadata

__all__ = [
    "Store",
    "StoreUnavailable",
    "dialect_insert",
    "insert_missing",
    "insert_rows",
    "make_engine",
    "metadata",
    "read_engine",
    "retry_transient",
    "shape_cached",
    "upsert",
]
