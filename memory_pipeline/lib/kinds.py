"""Closed vocabularies shared by every domain (the calendar, the LLM ledger, the deployment)."""

from __future__ import annotations

from enum import StrEnum

# Seed 000: conversations on the cron platform are not counted (nor by seeds 002 and 003, which
# read the same conversations); compared case-insensitively.
CRON_PLATFORM = "cron"


class Window(StrEnum):
    """Calendar windows of summary rows and partitions."""

    DAY = "day"
    MONTH = "month"
    YEAR = "year"


class LedgerOutcome(StrEnum):
    """What one ledger row records: a model answer, a cached answer, a hard failure, or a call
    refused without a request because the provider's breaker is open (it kept failing)."""

    OK = "ok"
    CACHE_HIT = "cache_hit"
    ERROR = "error"
    BREAKER_OPEN = "breaker_open"


class TokensSource(StrEnum):
    """Where a ledger row's token counts come from: the provider's usage report, or an estimate
    (the offline model, or a provider answer without usage). Estimates are never billing."""

    PROVIDER = "provider"
    ESTIMATED = "estimated"


class ExecutorKind(StrEnum):
    """Where a run's steps execute (MEMORY_EXECUTOR): in the run worker's host (Dagster's default:
    a process per step), on Celery workers fed by a broker, or as Kubernetes Jobs."""

    MULTIPROCESS = "multiprocess"
    CELERY = "celery"
    K8S = "k8s"
