"""Closed vocabularies shared by every domain (the calendar and the LLM ledger)."""

from __future__ import annotations

from enum import StrEnum


class Window(StrEnum):
    """Calendar windows of summary rows and partitions."""

    DAY = "day"
    MONTH = "month"
    YEAR = "year"


class LedgerOutcome(StrEnum):
    """What one ledger row records: a model answer, a cached answer, or a hard failure."""

    OK = "ok"
    CACHE_HIT = "cache_hit"
    ERROR = "error"
