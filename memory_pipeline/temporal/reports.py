"""Read-only summaries of the store for the CLI and the demo (no Dagster, no LLM)."""

from __future__ import annotations

from collections import defaultdict
from datetime import date
from typing import TypedDict

from sqlalchemy import case, func, select

from memory_pipeline.lib.store import Store
from memory_pipeline.temporal.tables import temporal_day_chunks, temporal_summaries


class WorldRows(TypedDict):
    """One world's summary rows of one window."""

    world_id: str
    window: str
    rows: int
    non_empty: int
    first: date
    last: date


def rows_per_world(store: Store) -> list[WorldRows]:
    """Per world and window: rows, non-empty rows, placeholders, first and last period."""
    t = temporal_summaries.c
    q = (
        select(
            t.world_id,
            t.window,
            func.count().label("rows"),
            func.sum(case((t.empty_reason.is_(None), 1), else_=0)).label("non_empty"),
            func.min(t.period_start).label("first"),
            func.max(t.period_start).label("last"),
        )
        .group_by(t.world_id, t.window)
        .order_by(t.world_id, t.window)
    )
    with store.connect() as conn:
        return [
            WorldRows(
                world_id=r["world_id"],
                window=r["window"],
                rows=r["rows"],
                non_empty=r["non_empty"],
                first=r["first"],
                last=r["last"],
            )
            for r in conn.execute(q).mappings()
        ]


def placeholders_by_reason(store: Store) -> dict[str, dict[str, int]]:
    t = temporal_summaries.c
    q = (
        select(t.window, t.empty_reason, func.count())
        .where(t.empty_reason.is_not(None))
        .group_by(t.window, t.empty_reason)
    )
    out: dict[str, dict[str, int]] = defaultdict(dict)
    with store.connect() as conn:
        for window, reason, n in conn.execute(q):
            out[reason][window] = n
    return dict(out)


def store_counts(store: Store) -> dict[str, int]:
    with store.connect() as conn:
        return {
            "chunks": conn.execute(select(func.count()).select_from(temporal_day_chunks)).scalar_one(),
            "summaries": conn.execute(select(func.count()).select_from(temporal_summaries)).scalar_one(),
        }
