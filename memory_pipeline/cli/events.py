"""Raw events on the command line: ingest, import-locomo, sample."""

from __future__ import annotations

from pathlib import Path
from zoneinfo import ZoneInfo

import typer

from memory_pipeline.cli.console import console, err, open_store, print_ingest, with_ingest_progress

app = typer.Typer()


@app.command()
def ingest(
    path: Path = typer.Argument(..., exists=True, dir_okay=False, help="JSONL file of events"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Write the good lines and report the bad ones"),
):
    """Ingest a JSONL file (all or nothing unless --skip-bad); re-ingesting adds nothing."""
    from memory_pipeline.events.ingest import IngestError, ingest_file

    store = open_store()
    try:
        report = with_ingest_progress(
            store, f"ingest {path.name}", lambda tick: ingest_file(store, path, skip_bad=skip_bad, progress=tick)
        )
    except IngestError as exc:
        err.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    print_ingest(report)


@app.command("import-locomo")
def import_locomo(
    paths: list[Path] = typer.Argument(..., exists=True, dir_okay=False, help="LoCoMo JSON files"),
    tz: str = typer.Option("Asia/Shanghai", "--tz", help="Zone of the session times (they carry none)"),
    skip_bad: bool = typer.Option(False, "--skip-bad"),
):
    """Import LoCoMo conversations: one world per file, one conversation per session."""
    from memory_pipeline.events.ingest import IngestError, ingest_events
    from memory_pipeline.events.locomo import locomo_events

    store = open_store()
    for path in paths:
        events, errors = locomo_events(path, ZoneInfo(tz))
        try:
            report = with_ingest_progress(
                store,
                f"import {path.name}",
                lambda tick, events=events, path=path, errors=errors: ingest_events(
                    store, events, source=str(path), errors=errors, skip_bad=skip_bad, progress=tick
                ),
            )
        except IngestError as exc:
            err.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from None
        print_ingest(report)


@app.command()
def sample(out: Path = typer.Option(None, help="Where to write (default data/sample/events.jsonl)")):
    """Write the deterministic sample data set in the ingestion format."""
    from memory_pipeline.events import sample_data
    from memory_pipeline.lib import settings

    out = out or settings.data_dir() / "sample" / "events.jsonl"
    n = sample_data.generate(out)
    console.print(f"wrote {n} events to {out}")
