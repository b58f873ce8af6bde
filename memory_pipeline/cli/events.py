"""Raw events on the command line: ingest, import-locomo, sample."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import typer

from memory_pipeline.cli.console import console, err, open_store, print_ingest, refuse, with_ingest_progress

if TYPE_CHECKING:
    from memory_pipeline.events.ingest import Event, IngestReport, LineError
    from memory_pipeline.lib.store import Store

app = typer.Typer()


@app.command()
def ingest(
    path: Path = typer.Argument(..., exists=True, dir_okay=False, help="JSONL file of events"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Write the good lines and report the bad ones"),
) -> None:
    """Ingest a JSONL file (all or nothing unless --skip-bad); re-ingesting adds nothing."""
    from memory_pipeline.events.ingest import IngestError, ingest_file, source_label

    store = open_store()
    try:
        report = with_ingest_progress(
            store, f"ingest {path.name}", lambda tick: ingest_file(store, path, skip_bad=skip_bad, progress=tick)
        )
    except IngestError as exc:
        refuse(str(exc))
    except OSError as exc:
        refuse(f"{source_label(path)}: cannot read: {exc.strerror}")
    print_ingest(report)
    warn_before_partitions(store)


def warn_before_partitions(store: Store) -> None:
    """Messages dated before the first partition are stored (raw events are kept) but no asset
    covers them: said after every ingest, rather than found missing from every summary and export."""
    from sqlalchemy import func, select

    from memory_pipeline.lib import settings
    from memory_pipeline.lib.store.tables import messages
    from memory_pipeline.lib.timeutil import day_bounds

    start = date.fromisoformat(settings.partition_start())
    first, _ = day_bounds(start, ZoneInfo(settings.timezone_name()))
    with store.connect() as conn:
        n = conn.execute(select(func.count()).select_from(messages).where(messages.c.at < first)).scalar_one()
    if n:
        err.print(
            f"[yellow]{n} message(s) in the store are dated before MEMORY_PARTITION_START ({start}): stored, but "
            "no partition covers them (no summary, no export); set MEMORY_PARTITION_START earlier to take them in. "
            "Their worlds count as existing from then on: every day from MEMORY_PARTITION_START gets their row "
            "(a placeholder where they said nothing), so `status` and reconcile name the days built without it[/]"
        )


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder of the zone database ("America")
        refuse(f"--tz {name!r}: unknown time zone (an IANA name such as Asia/Shanghai or UTC)")


@app.command("import-locomo")
def import_locomo(
    paths: list[Path] = typer.Argument(..., exists=True, dir_okay=False, help="LoCoMo JSON files"),
    tz: str = typer.Option("Asia/Shanghai", "--tz", help="Zone of the session times (they carry none)"),
    skip_bad: bool = typer.Option(False, "--skip-bad"),
) -> None:
    """Import LoCoMo conversations: one world per file, one conversation per session. Every file is
    validated before anything is written; each file is then written in one transaction."""
    from memory_pipeline.events.ingest import IngestError, source_label
    from memory_pipeline.events.locomo import locomo_events

    zone = _zone(tz)
    try:
        checked = [(path, *locomo_events(path, zone)) for path in paths]
    except OSError as exc:
        refuse(f"{source_label(exc.filename or '')}: cannot read: {exc.strerror}")
    errors = [e for _, _, errs in checked for e in errs]
    if errors and not skip_bad:
        refuse(str(IngestError(errors)))
    store = open_store()
    for path, events, errs in checked:
        try:
            report = _import_one(store, path, events, errs, skip_bad)
        except IngestError as exc:
            refuse(str(exc))
        print_ingest(report)


def _import_one(store: Store, path: Path, events: list[Event], errs: list[LineError], skip_bad: bool) -> IngestReport:
    """One validated LoCoMo file in one transaction, with its progress bars."""
    from memory_pipeline.events.ingest import ingest_events, source_label

    return with_ingest_progress(
        store,
        f"import {path.name}",
        lambda tick: ingest_events(
            store, events, source=source_label(path), errors=errs, skip_bad=skip_bad, progress=tick
        ),
    )


@app.command()
def sample(out: Path | None = typer.Option(None, help="Where to write (default data/sample/events.jsonl)")) -> None:
    """Write the deterministic sample data set in the ingestion format."""
    from memory_pipeline.events import sample_data
    from memory_pipeline.lib import settings

    out = out or settings.data_dir() / "sample" / "events.jsonl"
    n = sample_data.generate(out)
    console.print(f"wrote {n} events to {out}")
