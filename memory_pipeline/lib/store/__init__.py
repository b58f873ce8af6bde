from memory_pipeline.lib.store.db import Store, make_engine, upsert
from memory_pipeline.lib.store.retry import StoreUnavailable, retry_transient
from memory_pipeline.lib.store.tables import metadata

__all__ = ["Store", "StoreUnavailable", "make_engine", "metadata", "retry_transient", "upsert"]
