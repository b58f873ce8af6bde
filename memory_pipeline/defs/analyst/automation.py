"""When the analyst assets run (declarative automation): after their upstream, never on a timer
where an upstream asset says when its data changed.

- ``ALIGNED``: a table written by partitioned runs (chunks, day/month/year rows): the export of a
  CST day runs after any upstream partition of that day is written, so a backfill, a rebuild or a
  late-data repair (the reconcile re-writes the day) flows into the export of exactly that day.
  Every partition counts, not only the newest (``eager()`` looks at the newest only).
- ``RECENT``: a table written at call time by any run (the LLM ledger and cache): rows land on the
  day of the call, so after any upstream run only the newest two days are exported again.
- ``REFRESH``: a table written outside runs (ingest, the read path): refreshed every 30 minutes
  (its newest two days, or the whole table).
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from dagster import AssetCheckKey, AssetKey, AssetSelection, AutomationCondition

from memory_pipeline.defs._shared.partitions import TZ

REFRESH_CRON = "*/30 * * * *"
RECENT_DAYS = timedelta(days=2)


# Dagster's combinators widen a condition to assets and checks alike.
Condition = AutomationCondition[AssetKey | AssetCheckKey]


class Trigger(StrEnum):
    ALIGNED = "aligned"
    RECENT = "recent"
    REFRESH = "refresh"


def _not_busy() -> Condition:
    return ~AutomationCondition.any_deps_in_progress() & ~AutomationCondition.in_progress()


def after_upstream(ignore: AssetSelection | None = None) -> Condition:
    """Any upstream partition of this partition written (or requested this tick), until handled;
    not while an upstream or this asset is in progress. ``ignore``: whole-table upstreams of a
    partitioned asset, which would otherwise request every partition at once."""
    condition = AutomationCondition.any_deps_updated().since_last_handled() & _not_busy()
    condition = condition.ignore(ignore) if ignore is not None else condition
    return condition.with_label("after_upstream")


def condition_for(trigger: Trigger, by_day: bool) -> Condition:
    if trigger is Trigger.ALIGNED:
        return after_upstream()
    if trigger is Trigger.RECENT:
        return (AutomationCondition.in_latest_time_window(RECENT_DAYS) & after_upstream()).with_label(
            "newest_days_after_upstream"
        )
    # since_last_handled is typed for conditions on assets and checks alike; this one is on assets
    tick = (
        AutomationCondition.cron_tick_passed(REFRESH_CRON, TZ).since_last_handled()  # type: ignore[misc]
        & ~AutomationCondition.in_progress()
    )
    if by_day:
        tick = AutomationCondition.in_latest_time_window(RECENT_DAYS) & tick
    return tick.with_label(f"refresh({REFRESH_CRON})")
