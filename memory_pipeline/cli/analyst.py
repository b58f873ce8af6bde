"""The analyst layer on the command line: export a range of CST days and build the marts (as
Dagster runs), and show what the DuckDB file holds."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from memory_pipeline.cli.console import console, err, escape, open_store, progress_bar, refuse, run_state

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from memory_pipeline.analyst.files import AnalyticsFiles

app = typer.Typer()


def analytics_files() -> AnalyticsFiles:
    from memory_pipeline.analyst import config as analyst_config
    from memory_pipeline.analyst.files import AnalyticsFiles
    from memory_pipeline.lib import settings

    return AnalyticsFiles.at(settings.duckdb_path(), analyst_config.load())


def run_steps(
    steps: list[tuple[str, str, str | None]],
    instance: DagsterInstance | None = None,
    on_step: Callable[[int, str], None] | None = None,
) -> bool:
    """(target, from, to) as Dagster runs, one per range, in order; prints one line per run. After
    a failed run the remaining steps are not run (each would work on a file the failure left as it
    was, or fail the same way): each is listed as skipped, with the reason."""
    from memory_pipeline import operations
    from memory_pipeline.operations.runner import finished_steps, get_instance

    failed = ""
    for i, (target, lo, hi) in enumerate(steps):
        span = f"{lo}..{hi or lo}"
        if failed:
            console.print(f"   {target:<20} {span}: [yellow]skipped[/] ({escape(failed)} failed)")
            continue
        if on_step is not None:
            on_step(i, target)
        # dagster-dbt echoes every line of dbt's log to stdout (a run's compute log); here the
        # summary line below says what happened, and the instance keeps the rest.
        with contextlib.redirect_stdout(io.StringIO()):
            report = operations.materialize(target, lo, hi, mode="rebuild", instance=instance)
        for note in report.notes:
            err.print(f"[yellow]{escape(note)}[/]")
        for r in report.runs:
            console.print(
                f"   {target:<20} {r.first}..{r.last}: {r.partitions} partition(s) in one run {r.run_id[:8]} of {r.job} "
                f"({r.seconds:.1f}s) {run_state(r, instance) if r.success else 'FAILED: ' + escape(' '.join(r.error.split())[:400])}",
                soft_wrap=True,
            )
            if not r.success:
                # Each step publishes its work when it ends: what the failed run did still counts.
                done = finished_steps(instance or get_instance(), r.run_id)
                if done:
                    console.print(f"   {'':<20} finished before it failed, and published: {escape(', '.join(done))}")
                if not failed:
                    failed = f"{target} {r.first}..{r.last}"
    return not failed


def print_unchanged(files: AnalyticsFiles) -> None:
    """After a failed export: what analysts now read, said as such (not listed as if current)."""
    import datetime as dt

    if files.duckdb.exists():
        stamp = dt.datetime.fromtimestamp(files.duckdb.stat().st_mtime).astimezone().isoformat(timespec="seconds")
        console.print(
            f"{files.duckdb}: the version published at {stamp}; it holds the runs marked ok above and the steps "
            "a failed run finished (named under it), not the skipped runs",
            soft_wrap=True,
        )
    else:
        console.print(f"{files.duckdb}: no DuckDB file (nothing was published)")


def print_analytics(files: AnalyticsFiles) -> None:
    import duckdb

    from memory_pipeline.analyst import reports

    try:
        counts = reports.table_counts(files)
    except duckdb.Error as exc:  # not a DuckDB file, or one of a newer DuckDB: one line, not a traceback
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        refuse(f"{files.duckdb}: cannot be read as the analyst's DuckDB file (MEMORY_DUCKDB_PATH): {first}", 1)
    if not counts:
        console.print(f"{files.duckdb}: no DuckDB file yet (`memory-pipeline export`)")
        return
    table = Table(title=str(files.duckdb))
    table.add_column("schema.table")
    table.add_column("rows", justify="right")
    for name, n in counts.items():
        if not name.startswith("dbt_test__audit."):
            table.add_row(name, str(n))
    console.print(table)
    # The duckdb wheel has no CLI: Python is what every install has.
    console.print(
        f"Open it read-only: .venv/bin/python -c \"import duckdb; duckdb.connect('{files.duckdb}', read_only=True)"
        f".sql('SHOW ALL TABLES').show()\" (or `duckdb -readonly {files.duckdb}` where the DuckDB CLI is installed)"
    )
    if files.parquet is not None:
        console.print(f"Parquet by CST day: {files.parquet}/<table>/cst_day=<day>/<table>.parquet")
    if files.report.exists():
        console.print(f"Coverage and cost picture: {files.report}")


def export_steps(start: str, end: str | None, marts: bool) -> list[tuple[str, str, str | None]]:
    """The runs of an export of [start, end]: the tables by day, the months and years the range
    touches (those closed), the whole tables, then the marts."""
    from memory_pipeline import operations

    steps: list[tuple[str, str, str | None]] = [("exports", start, end)]
    for target, cut in (("month_exports", 7), ("year_exports", 4)):
        lo, hi = start[:cut], end[:cut] if end else None
        try:
            keys = operations.partition_keys(target, lo, hi)[0]
        except operations.RangeError:
            continue  # the range lies in a month (year) that is not closed yet: no row to export
        if keys:  # the closed ones: a note naming --to would quote a month the user never typed
            steps.append((target, keys[0], keys[-1]))
    return steps + ([("marts", start, end)] if marts else [])


@app.command("export")
def export(
    start: str = typer.Option(..., "--from", help="First CST day (YYYY-MM-DD)"),
    end: str = typer.Option(
        None, "--to", help="Last CST day (YYYY-MM-DD); default: the --from day alone (one day, not up to today)"
    ),
    marts: bool = typer.Option(True, "--marts/--no-marts", help="Then dbt build the marts for the same days"),
) -> None:
    """Export every table of memory for a range of CST days to the DuckDB file and Parquet
    (replacing exactly those days, and the months and years they touch), then build the dbt
    marts: Dagster runs, as the automation would. Without --to, the one day --from."""
    from memory_pipeline import operations

    # Without --to the range is the --from day alone: a message about its end names --from.
    labels = ("--from", "--to" if end else "--from")
    end = end or start
    files = analytics_files()  # a bad memory.analyst setting is refused before any run, not after the first
    open_store()  # so is a store it cannot use (another calendar zone)
    try:
        keys, notes = operations.partition_keys("exports", start, end, labels)  # refuse a bad range before any run
        if not keys:
            refuse(f"nothing to export: {'; '.join(notes)}")
        for note in notes:
            err.print(f"[yellow]{escape(note)}[/]")
        start, end = keys[0], keys[-1]  # what runs: a future day is never exported
        steps = export_steps(start, end, marts)
        console.print(f"export {start}..{end}: {len(keys)} day(s), {len(steps)} run(s)")
        with progress_bar() as progress:
            task = progress.add_task("export", total=len(steps))

            def on_step(i: int, target: str) -> None:
                progress.update(task, completed=i, description=f"export: {target}")

            ok = run_steps(steps, on_step=on_step)
            progress.update(task, completed=len(steps), description="export")
    except operations.RangeError as exc:
        refuse(str(exc))
    if not ok:
        print_unchanged(files)
        raise typer.Exit(1)
    print_analytics(files)


@app.command("analytics")
def analytics() -> None:
    """What the analyst's DuckDB file holds: tables and marts with their rows, Parquet, the picture."""
    print_analytics(analytics_files())
