"""The calendar zone a store is cut in (MEMORY_TIMEZONE), recorded in the store at its first open
and checked at every open after, by the CLI, the memory server and every Dagster step.

Every domain computes its days in that zone: partition keys, 30-minute buckets, day/week/month
windows, sleep's nights, the tower's windows, the exports' days. Rows cut in two zones in one store
mix two calendars with nothing to tell them apart (a day summarized in Shanghai beside the next one
summarized in Berlin, a partition key naming another span of hours than its rows), so a store
opened under a zone other than its own is refused before anything is read or written."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from memory_pipeline.lib.settings import ENV_TIMEZONE, ConfigError
from memory_pipeline.lib.store.db import Store, upsert
from memory_pipeline.lib.store.tables import now_utc, store_settings

CALENDAR_ZONE = "calendar_zone"

# (store URL, zone) pairs this process found recorded: one query per store and process.
_checked: set[tuple[str, str]] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class RecordedZone:
    zone: str
    recorded_at: datetime


def recorded_zone(store: Store) -> RecordedZone | None:
    """The zone the store records, or None before its first open under this revision."""
    s = store_settings.c
    with store.connect() as conn:
        row = conn.execute(select(s.value, s.recorded_at).where(s.name == CALENDAR_ZONE)).first()
    return RecordedZone(row.value, row.recorded_at) if row is not None else None


def check_calendar_zone(store: Store, zone: str) -> None:
    """Record ``zone`` as the store's calendar when it records none yet (of two processes opening
    it at once the first insert wins, and both read that row), and refuse it (ConfigError, one line
    naming both zones and the way out) when the store records another."""
    key = (store.url, zone)
    if key in _checked:
        return
    with _lock:
        found = recorded_zone(store)
        if found is None:
            row = {"name": CALENDAR_ZONE, "value": zone, "recorded_at": now_utc()}
            with store.begin() as conn:
                upsert(conn, store_settings, [row], ["name"], [])
            found = recorded_zone(store)
            assert found is not None  # written above, or by the process that won
        if found.zone != zone:
            raise ConfigError(
                f"{ENV_TIMEZONE}={zone!r}, but this store's calendar is {found.zone!r} (recorded "
                f"{found.recorded_at:%Y-%m-%d %H:%M} UTC): its days, partitions and summaries were cut "
                f"in that zone and nothing converts them. Set {ENV_TIMEZONE}={found.zone}, or use a new store for {zone}"
            )
        _checked.add(key)
