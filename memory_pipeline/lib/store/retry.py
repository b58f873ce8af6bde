"""Bounded retries of a whole unit of work on transient database errors.

A dropped connection (a server restart, a failover, ``pg_terminate_backend``, an idle timeout
in between) fails the statement that was running on it; the pool's pre-ping replaces the
connection at the next checkout. ``retry_transient`` re-runs the caller's unit of work (one or
more whole transactions: a partition's read and write) a few times with a short backoff, so
one dropped connection does not fail a 396-partition run. A transaction that failed was rolled
back whole, so a retry never finishes half of one.

What is reported names the work and the driver's own first line (``OperationalError: server
closed the connection unexpectedly``), never the SQL statement or its parameters."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError

log = logging.getLogger(__name__)

T = TypeVar("T")

ATTEMPTS = 3
BACKOFF_SECONDS = 0.5
_DISCONNECT_WORDS = (
    "server closed the connection",
    "terminating connection",
    "connection already closed",
    "could not connect to server",
    "connection refused",
    "ssl connection has been closed",
    "the database system is shutting down",
    "the database system is starting up",
)


class StoreUnavailable(RuntimeError):
    """A unit of work still hit a transient database error on its last attempt."""

    def __init__(self, what: str, attempts: int, cause: BaseException):
        self.what = what
        self.attempts = attempts
        self.cause_text = describe(cause)
        plural = "attempt" if attempts == 1 else "attempts"
        super().__init__(f"{what}: database error after {attempts} {plural}: {self.cause_text}")


def _driver_error(exc: BaseException) -> BaseException:
    """The DBAPI exception under a SQLAlchemy wrapper (its text holds no SQL nor parameters)."""
    orig = getattr(exc, "orig", None)
    return orig if isinstance(orig, BaseException) else exc


def _class_names(exc: BaseException) -> set[str]:
    return {c.__name__ for c in type(exc).__mro__}


def is_transient(exc: BaseException) -> bool:
    """A lost or refused connection, an operator shutdown, a deadlock or serialization failure,
    a locked SQLite file: errors a fresh attempt of the same work may not meet again.
    Constraint violations, bad SQL and data errors are not transient."""
    if isinstance(exc, StoreUnavailable):
        return False
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    driver = _driver_error(exc)
    if not (isinstance(exc, DBAPIError) or driver.__class__.__module__.split(".")[0] in ("psycopg2", "sqlite3")):
        return False
    names = _class_names(driver) | _class_names(exc)
    first = describe(driver).lower()
    if driver.__class__.__module__ == "sqlite3":  # OperationalError also means "no such table" there
        return "locked" in first or "busy" in first
    if "OperationalError" in names:  # psycopg2: connection, operator intervention, deadlock, resources
        return True
    return "InterfaceError" in names and any(w in first for w in _DISCONNECT_WORDS)


def describe(exc: BaseException) -> str:
    """``Type: first line`` of the driver's error (never the statement or its parameters)."""
    driver = _driver_error(exc)
    lines = str(driver).strip().splitlines()
    first = lines[0].strip() if lines else ""
    if len(first) > 300:
        first = first[:299] + "…"
    return f"{type(driver).__name__}: {first}" if first else type(driver).__name__


def retry_transient(
    fn: Callable[[], T],
    attempts: int | None = None,
    *,
    what: str = "database work",
    backoff_seconds: float | None = None,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """``fn()``, re-run up to ``attempts`` times in all while it raises a transient database error
    (backoff ``backoff_seconds`` doubling). ``fn`` must be a whole unit of work: every
    transaction it opens either commits or rolls back whole, and running it again is safe (its
    writes are idempotent). After the last attempt: StoreUnavailable naming ``what`` and the
    cause in its first line. Any other error propagates at once. Defaults: ATTEMPTS (3) and
    BACKOFF_SECONDS (0.5, then 1.0)."""
    attempts = ATTEMPTS if attempts is None else attempts
    backoff_seconds = BACKOFF_SECONDS if backoff_seconds is None else backoff_seconds
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - only transient errors are retried
            if not is_transient(exc):
                raise
            if attempt == attempts:
                raise StoreUnavailable(what, attempts, exc) from _driver_error(exc)
            delay = backoff_seconds * 2 ** (attempt - 1)
            log.warning(
                "%s: transient database error on attempt %d of %d (%s); retrying in %.2fs",
                what,
                attempt,
                attempts,
                describe(exc),
                delay,
            )
            if on_retry is not None:
                on_retry(attempt, exc)
            time.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
