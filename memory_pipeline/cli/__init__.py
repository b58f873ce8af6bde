"""`memory-pipeline`: one root command; each domain adds its own sub-app of commands."""

from __future__ import annotations

import sys
import warnings

import typer

from memory_pipeline.cli import (
    analyst,
    cache,
    conversation,
    db,
    events,
    objects,
    recall,
    serve,
    sleep,
    temporal,
    tokens,
    tower,
    workers,
)
from memory_pipeline.cli.console import console, err, escape

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
app.add_typer(events.app)
app.add_typer(temporal.app)
app.add_typer(cache.app)
app.add_typer(analyst.app)
app.add_typer(tower.app, name="tower")
app.command(name="serve")(serve.serve)
app.command(name="mcp")(serve.mcp)
app.add_typer(objects.app, name="objects")
app.add_typer(db.app, name="db", help="Schema migrations of the operational store.")
app.add_typer(sleep.app, name="sleep", help="Seed 003 sleep: status, diff, recovery backfill/rebuild, memory tools.")
app.add_typer(conversation.app, name="conversation", help="Seed 002 rolling conversation summaries.")
app.add_typer(recall.app, name="eval")
app.command(name="search")(recall.search)
app.add_typer(tokens.app, name="tokens")
app.command(name="celery-worker")(workers.celery_worker)


@app.command()
def demo(
    fresh: bool = typer.Option(True, "--fresh/--keep", help="Start from an empty store and instance under data/"),
) -> None:
    """The main job on the embedded default: sample data -> ingest -> every temporal asset as real
    Dagster runs in the instance under data/dagster_home -> DuckDB exports and dbt marts -> results."""
    from memory_pipeline.cli.demo import run_demo

    sys.exit(run_demo(fresh=fresh, console=console, err=err))


@app.command()
def ui(
    port: int | None = typer.Option(None, "--port", "-p", help="Port of the webserver (dagster dev's default, 3000)."),
    host: str | None = typer.Option(
        None, "--host", "-h", help="Address of the webserver (dagster dev's default, 127.0.0.1)."
    ),
    stop_timeout: float = typer.Option(
        90.0, "--stop-timeout", help="Seconds a stop waits for every process of dagster dev before killing them."
    ),
) -> None:
    """The Dagster UI (`dagster dev -w workspace.yaml`) on the instance of DAGSTER_HOME, else the data
    folder's dagster_home. SIGTERM, SIGINT (Ctrl-C) or SIGHUP stops its webserver, daemon and code
    servers together; what still runs after --stop-timeout is killed, and named."""
    from memory_pipeline.operations.ui import run_ui

    sys.exit(run_ui(port=port, host=host, stop_timeout=stop_timeout))


def main() -> None:  # pragma: no cover - console entry
    from memory_pipeline.lib import settings

    settings.offline_litellm()
    # Dagster's Beta/Preview/Supersession notices are for us, not for an operator at a prompt. Their
    # classes from dagster_shared (dagster's own, 30 ms): from dagster they imported all of it
    # (0.5 s) into every command, also those that never load the code location (status, read, ...).
    from dagster_shared.utils.warnings import BetaWarning, PreviewWarning, SupersessionWarning

    for category in (BetaWarning, PreviewWarning, SupersessionWarning):
        warnings.filterwarnings("ignore", category=category)
    try:
        app()
    except settings.ConfigError as exc:  # a setting the command could not use: its one line names it
        err.print(f"[red]{escape(str(exc))}[/]", soft_wrap=True)
        sys.exit(2)
