"""Seed 004 status queries (read-only)."""

from __future__ import annotations

from datetime import date
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from sqlalchemy import func, select

from memory_pipeline.lib.store import Store
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.tower import summaries, windows
from memory_pipeline.tower.tables import tower_entries, tower_jobs, tower_summaries, tower_types, tower_windows


class TypeStatus(TypedDict):
    """One memory type's row of the status report."""

    name: str
    chain: list[str]
    summaries: bool
    cap: str
    archived: bool
    entries: int
    windows: int
    summaries_count: int
    jobs: int


def per_type(store: Store) -> list[TypeStatus]:
    def counts(table: Any) -> dict[str, int]:
        with store.connect() as conn:
            q = select(table.c.type_name, func.count()).group_by(table.c.type_name)
            return {name: int(n) for name, n in conn.execute(q)}

    entries, wins, recs, jobs = (counts(t) for t in (tower_entries, tower_windows, tower_summaries, tower_jobs))
    with store.connect() as conn:
        types = list(conn.execute(select(tower_types).order_by(tower_types.c.name)).mappings())
    return [
        {
            "name": t["name"],
            "chain": list(t["chain"]),
            "summaries": t["summaries_enabled"],
            "cap": t["summary_cap"],
            "archived": t["archived_at"] is not None,
            "entries": entries.get(t["name"], 0),
            "windows": wins.get(t["name"], 0),
            "summaries_count": recs.get(t["name"], 0),
            "jobs": jobs.get(t["name"], 0),
        }
        for t in types
    ]


def given_up(store: Store, tz: ZoneInfo) -> list[summaries.FailedWindow]:
    return summaries.given_up(store, tz)


def retrying(store: Store, tz: ZoneInfo) -> list[summaries.FailedWindow]:
    return summaries.retrying(store, tz)


def stale_days(store: Store, tz: ZoneInfo, activity_type: str | None) -> dict[date, int]:
    return windows.stale_days(store, tz, utcnow(), activity_type=activity_type)
