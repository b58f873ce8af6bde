from memory_pipeline.lib.store.db import Store, make_engine, upsert
from memory_pipeline.lib.store.tables import metadata

__all__ = ["Store", "make_engine", "metadata", "upsert"]
