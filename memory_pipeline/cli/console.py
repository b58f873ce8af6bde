"""What every command shares: the consoles, progress bars, the store handle."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape as markup_escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:  # the CLI imports the domains lazily: a command loads only what it runs
    from dagster import DagsterInstance

    from memory_pipeline.events.ingest import IngestReport
    from memory_pipeline.lib.cache import KVCache
    from memory_pipeline.lib.store import Store
    from memory_pipeline.operations.runner import RunFindings, RunSummary

T = TypeVar("T")

# Control characters other than newline and tab, shown as \xNN: text an agent or a file stored (an
# ESC sequence, a carriage return) is printed, never allowed to drive the operator's terminal.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}


def escape(value: str) -> str:
    """``value`` for rich's markup: its '[' escaped and its control characters shown as \\xNN."""
    return markup_escape(value.translate(_CONTROLS))


# Off a terminal (pipes, CI, files) rich would wrap at 80 columns; keep lines whole there.
_WIDTH = None if os.isatty(1) else 200
console = Console(width=_WIDTH)
err = Console(stderr=True, width=None if os.isatty(2) else 200)


WARNING_SHOWN_CHARS = 300


def run_state(r: RunSummary, instance: DagsterInstance | None = None) -> str:
    """A run's state on its one line: failed with its cause; ok; or ok with the checks that did not
    pass and the warnings its steps logged (a degraded run: cut or empty answers, refused worlds,
    Redis down), the first of each shown. ``instance``: the run's (default: the CLI's)."""
    if not r.success:
        return f"[red]failed:[/] {escape(r.error)}"
    found = _findings(r.run_id, instance)
    if not found.warnings and not found.failed_checks:
        return "[green]ok[/]"
    said = []
    if found.failed_checks:
        checks = found.failed_checks
        more = f" (+{len(checks) - 1} more)" if len(checks) > 1 else ""
        said.append(f"{len(checks)} check(s) failed: {escape(str(checks[0]))}{more}")
    if found.warnings:
        first = " ".join(found.warnings[0].split())
        first = first if len(first) <= WARNING_SHOWN_CHARS else first[: WARNING_SHOWN_CHARS - 1] + "…"
        more = f" (+{len(found.warnings) - 1} more in the run's log)" if len(found.warnings) > 1 else ""
        said.append(f"{len(found.warnings)} warning(s): {escape(first)}{more}")
    return "[yellow]ok,[/] " + "; ".join(said)


def exit_if_checks_failed(runs: Sequence[RunSummary]) -> None:
    """Exit 1, saying why, when an ERROR check of ``runs`` failed: the runs succeeded and their
    partitions are materialized, but what they wrote is wrong (rows a check found wrong, a world
    refused), and a script must not read that as done. A failed WARN check (a tower window left
    failed, which its backoff retries) is on the run's line, as a warning is, and exits 0."""
    failed = sum(1 for r in runs if r.success for c in _findings(r.run_id, None).failed_checks if not c.warn)
    if failed:
        err.print(
            f"[yellow]{failed} check result(s) of severity ERROR did not pass (on the run lines above): the "
            "partitions are materialized, and the checks say what is wrong; exit status 1[/]"
        )
        raise typer.Exit(1)


@functools.lru_cache(maxsize=256)
def _findings(run_id: str, instance: DagsterInstance | None) -> RunFindings:
    from memory_pipeline.operations.runner import get_instance, run_findings

    return run_findings(instance or get_instance(), run_id)


def refuse(message: str, code: int = 2) -> NoReturn:
    """Print a refusal (markup-escaped: ids and paths may hold '[') and exit (2: bad input). One
    line however long (soft_wrap: a path past stderr's 200 columns was cut onto a second line)."""
    err.print(f"[red]{escape(message)}[/]", soft_wrap=True)
    raise typer.Exit(code)


def known_world(value: str, store: Store, flag: str = "--world") -> str:
    """A world id that is well formed and has been ingested: a mistyped world is refused (exit 1),
    never shown as an empty memory nor given one by a write."""
    from memory_pipeline.lib.ids import validate_id
    from memory_pipeline.lib.store import world_ingested
    from memory_pipeline.lib.text import shown

    problem = validate_id(value)
    if problem:
        refuse(f"{flag} {shown(value)}: {problem}")
    if not world_ingested(store, value):
        refuse(f"no such world {value!r}: nothing has been ingested for it", code=1)
    return value


def answering_store() -> Store:
    """The store of MEMORY_DATABASE_URL (SQLite under data/ by default), connected to once, as it
    is. A URL that is none (or of a database the store does not support), or a database that does
    not answer (not there, a role it does not know), is one line naming the variable (the URL's
    password hidden), not a traceback."""
    from sqlalchemy.exc import ArgumentError, OperationalError

    from memory_pipeline.lib import settings
    from memory_pipeline.lib.store import Store
    from memory_pipeline.lib.text import redact

    url = settings.database_url()
    try:
        store = Store(url)
    except ArgumentError as exc:
        refuse(f"{settings.ENV_DATABASE_URL}: {redact(str(exc))}")
    try:
        with store.engine.connect():
            pass
    except OperationalError as exc:
        problem = " ".join(str(exc.orig).split()) if exc.orig is not None else str(exc).splitlines()[0]
        refuse(f"the store ({settings.ENV_DATABASE_URL}={redact(url)}) did not answer: {redact(problem)}", 1)
    return store


def migrate(store: Store, to_head: Callable[[], T]) -> T:
    """``to_head()`` (a migration of ``store``); a search_path naming no schema that exists, where a
    migration has nowhere to create its tables, is one line (exit 1), not a traceback."""
    from sqlalchemy.exc import ProgrammingError

    from memory_pipeline.lib import settings
    from memory_pipeline.lib.text import redact

    try:
        return to_head()
    except ProgrammingError as exc:
        problem = (str(exc.orig) if exc.orig is not None else str(exc)).splitlines()[0]
        refuse(
            f"the store ({settings.ENV_DATABASE_URL}={redact(settings.database_url())}) cannot be migrated: "
            f"{redact(problem)} (does the schema its search_path names exist?)",
            1,
        )


def open_store() -> Store:
    """The store that answers (:func:`answering_store`), migrated to head (:func:`migrate`) and
    opened under its own calendar zone (``lib.store.calendar``): MEMORY_TIMEZONE other than the
    store's is one line too."""
    from memory_pipeline import domains
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.settings import ConfigError
    from memory_pipeline.lib.store.calendar import check_calendar_zone
    from memory_pipeline.lib.store.migrate import ensure_schema

    store = answering_store()
    migrate(store, lambda: ensure_schema(store, domains.version_locations()))
    try:
        check_calendar_zone(store, settings.timezone_name())
    except ConfigError as exc:
        refuse(str(exc))
    return store


def open_cache(store: Store | None = None) -> KVCache:
    """The cache of REDIS_URL (the in-process one when unset, or when Redis does not answer). A URL
    that is none, or one Redis refuses (a database number past its ``databases``), is one line
    naming the variable (the URL's password hidden), not a traceback."""
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.cache import KVCache
    from memory_pipeline.lib.text import redact

    url = settings.redis_url()
    try:
        cache = KVCache(url, store=store)
    except ValueError as exc:  # redis-py: not a redis://, rediss:// or unix:// URL, a bad number in it
        refuse(f"{settings.ENV_REDIS_URL}={redact(url or '')}: {redact(' '.join(str(exc).split()))}")
    refused = cache.refusal()
    if refused:
        refuse(f"{settings.ENV_REDIS_URL}={redact(url or '')}: Redis refused it: {refused}")
    return cache


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


def with_ingest_progress(store: Store, label: str, fn: Callable[[Callable[[str, int, int], None]], T]) -> T:
    """Run ``fn(progress)`` showing one bar per ingestion phase (validate bytes, write rows)."""
    with progress_bar() as progress:
        tasks: dict[str, TaskID] = {}

        def tick(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = progress.add_task(f"{label}: {phase}", total=total or 1)
            progress.update(tasks[phase], completed=done if total else 1, total=total or 1)

        return fn(tick)


def print_ingest(report: IngestReport) -> None:
    other = report.lines - report.inserted - report.duplicates - report.rejected_lines
    console.print(
        f"{escape(report.source)}: {report.lines} lines, [green]{report.inserted} inserted[/], "
        f"{report.duplicates} already present, {report.rejected_lines} rejected, "
        + (f"{other} blank or repeated in the file, " if other > 0 else "")  # the counts add up to the lines
        + f"{report.new_conversations} new conversation(s), {report.new_worlds} new world(s)"
    )
    if report.at_from_ingest:
        console.print(f"{report.at_from_ingest} inserted without a timestamp: their time is the ingest time")
    for e in report.rejected[:50]:
        err.print(f"[yellow]rejected[/] {escape(str(e))}")
