"""Read-only queries over the raw events, for status tables."""

from __future__ import annotations

from sqlalchemy import func, select

from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import conversations, messages, worlds


def event_counts(store: Store) -> dict[str, int]:
    with store.connect() as conn:
        return {
            name: conn.execute(select(func.count()).select_from(table)).scalar_one()
            for name, table in (("worlds", worlds), ("conversations", conversations), ("messages", messages))
        }
