"""retry_transient: which database errors are retried, how often, and what a final failure says
(no service needed: the errors are built as the drivers raise them)."""

from __future__ import annotations

import sqlite3

import psycopg2
import psycopg2.errors
import pytest
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from memory_pipeline.lib.store import retry
from memory_pipeline.lib.store.retry import StoreUnavailable, describe, is_transient, retry_transient

BODY = "my diary entry about the surgery"


def _wrapped(cls, orig, message: str = "INSERT INTO messages (content) VALUES (%(content)s)", invalidated=False):
    return cls(message, {"content": BODY}, orig, connection_invalidated=invalidated)


DROPPED = _wrapped(
    OperationalError,
    psycopg2.OperationalError(
        "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally\n"
    ),
)


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(retry, "BACKOFF_SECONDS", 0.0)


@pytest.mark.parametrize(
    "exc",
    [
        DROPPED,
        _wrapped(
            OperationalError, psycopg2.errors.AdminShutdown("terminating connection due to administrator command")
        ),
        _wrapped(OperationalError, psycopg2.errors.DeadlockDetected("deadlock detected")),
        _wrapped(ProgrammingError, psycopg2.ProgrammingError("whatever"), invalidated=True),
        psycopg2.OperationalError("server closed the connection unexpectedly"),
        _wrapped(OperationalError, sqlite3.OperationalError("database is locked")),
    ],
    ids=["server-closed", "admin-shutdown", "deadlock", "invalidated", "raw-psycopg2", "sqlite-locked"],
)
def test_transient_errors(exc):
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        _wrapped(IntegrityError, psycopg2.errors.UniqueViolation("duplicate key value violates unique constraint")),
        _wrapped(ProgrammingError, psycopg2.errors.UndefinedTable('relation "x" does not exist')),
        _wrapped(OperationalError, sqlite3.OperationalError("no such table: x")),
        ValueError("not a database error"),
        StoreUnavailable("day 2026-01-03", 3, DROPPED),
    ],
    ids=["unique", "undefined-table", "sqlite-no-table", "value-error", "already-final"],
)
def test_errors_that_are_not_retried(exc):
    assert not is_transient(exc)


def test_a_transient_error_is_retried_and_the_work_redone_whole():
    calls, retried = [], []

    def work():
        calls.append(1)
        if len(calls) < 3:
            raise DROPPED
        return "done"

    assert retry_transient(work, what="day 2026-01-03", on_retry=lambda n, e: retried.append(n)) == "done"
    assert len(calls) == 3 and retried == [1, 2]


def test_a_persistent_error_names_the_work_and_cause_in_the_first_line_without_parameters():
    calls = []

    def work():
        calls.append(1)
        raise DROPPED

    with pytest.raises(StoreUnavailable) as info:
        retry_transient(work, what="day 2026-01-03")
    assert len(calls) == 3
    first = str(info.value).splitlines()[0]
    assert first == (
        "day 2026-01-03: database error after 3 attempts: OperationalError: server closed the connection unexpectedly"
    )
    assert info.value.what == "day 2026-01-03"
    # The cause kept for the traceback is the driver's error: no statement, no bound values.
    assert isinstance(info.value.__cause__, psycopg2.OperationalError)
    assert BODY not in str(info.value) and BODY not in str(info.value.__cause__)


def test_other_errors_propagate_at_once():
    calls = []
    unique = _wrapped(IntegrityError, psycopg2.errors.UniqueViolation("duplicate key"))

    def work():
        calls.append(1)
        raise unique

    with pytest.raises(IntegrityError):
        retry_transient(work)
    assert len(calls) == 1


def test_describe_is_one_bounded_line():
    assert describe(DROPPED) == "OperationalError: server closed the connection unexpectedly"
    long = psycopg2.OperationalError("x" * 1000)
    assert len(describe(long)) < 330
    with pytest.raises(ValueError):
        retry_transient(lambda: None, attempts=0)
