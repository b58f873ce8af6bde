"""Which closed partitions a nightly schedule tick requests (pure).

A tick requests its newest closed partition and, after downtime, the gap of partitions newer than
the last one materialized (within a look-back), so a schedule that missed ticks creates the missed
runs. Older holes are a backfill's business, not the schedule's."""

from __future__ import annotations

from collections.abc import Sequence


def catchup_keys(closed_keys: Sequence[str], materialized: set[str], lookback: int) -> list[str]:
    """``closed_keys`` in order, newest last. Returns the keys to request, oldest first."""
    window = list(closed_keys[-lookback:]) if lookback > 0 else []
    if not window:
        return []
    done = [i for i, k in enumerate(window) if k in materialized]
    if not done:
        return [] if window[-1] in materialized else [window[-1]]
    return window[done[-1] + 1 :]
