"""Workers past one machine: a Celery worker for MEMORY_EXECUTOR=celery."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from memory_pipeline.cli.console import err

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def celery_worker(
    name: Annotated[str, typer.Option("--name", "-n", help="The worker's name (its node name is NAME@host)")],
    config_yaml: Annotated[
        str, typer.Option("--config-yaml", "-y", help="The executor config naming the broker")
    ] = "deploy/celery/celery.yaml",
    queue: Annotated[
        list[str] | None, typer.Option("--queue", "-q", help="Queues to consume (default: dagster)")
    ] = None,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l")] = "INFO",
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", help="Steps at once (0: one per CPU)")] = 0,
) -> None:
    """Start a Celery worker for MEMORY_EXECUTOR=celery (what `dagster-celery worker start` does, with
    the resolved broker URL written mode 0600 under $DAGSTER_HOME/dagster_celery/config/NAME/, folders
    0700); the process becomes the worker, so SIGTERM reaches it."""
    if not NAME.match(name):
        err.print(f"--name {name!r}: letters, digits, '.', '_' or '-' (at most 64), starting with a letter or digit")
        raise typer.Exit(2)
    if len(queue or []) > 4:
        err.print("--queue: a dagster-celery worker listens on at most four queues")
        raise typer.Exit(2)
    from memory_pipeline.operations.celery_workers import start_worker

    start_worker(name, config_yaml, list(queue or []), loglevel, concurrency)
