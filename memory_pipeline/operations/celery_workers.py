"""Celery workers past one machine (MEMORY_EXECUTOR=celery): the worker start that keeps the
broker URL private (the executor itself is ``defs/_shared/celery_executor.py``).

``dagster-celery worker start`` writes the resolved broker URL (a password, if it has one) into a
module readable by every user; :func:`start_worker` writes the same module with mode 0600 in folders
of mode 0700, one per worker name (replaced at each start, not one more file per start), then
becomes the Celery worker."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from memory_pipeline.lib import settings

CONFIG_MODULE = "dagster_celery_config"  # the module dagster_celery.app imports when it exists


def _private_dir(path: Path, stop: Path) -> None:
    """``path`` and its parents below ``stop`` exist with mode 0700."""
    for folder in [path, *path.parents]:
        if folder == stop or not folder.is_relative_to(stop):
            break
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for folder in [path, *path.parents]:
        if folder == stop or not folder.is_relative_to(stop):
            break
        folder.chmod(0o700)


def write_config_module(home: Path, name: str, config: dict[str, Any]) -> Path:
    """The worker's ``dagster_celery_config`` module (broker, backend, config_source), mode 0600 in
    ``<home>/dagster_celery/config/<name>/`` (folders 0700); returns the folder for PYTHONPATH."""
    folder = home / "dagster_celery" / "config" / name
    _private_dir(folder, home)
    lines = []
    if config.get("broker"):
        lines.append(f"broker_url = {str(config['broker'])!r}\n")
    if config.get("backend"):
        lines.append(f"result_backend = {str(config['backend'])!r}\n")
    for key, value in (config.get("config_source") or {}).items():
        lines.append(f"{key} = {value!r}\n")
    target = folder / f"{CONFIG_MODULE}.py"
    tmp = folder / f".{CONFIG_MODULE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("".join(lines))
    os.chmod(tmp, 0o600)  # O_CREAT's mode only applies to a new file
    os.replace(tmp, target)
    return folder


def worker_command(name: str, queues: list[str], loglevel: str, concurrency: int = 0) -> list[str]:
    celery = Path(sys.executable).parent / "celery"
    args = [str(celery) if celery.exists() else "celery", "-A", "dagster_celery.app", "worker"]
    args += ["--prefetch-multiplier=1", "--loglevel", loglevel]
    for queue in queues:
        args += ["-Q", queue]
    if concurrency:
        args.append(f"--concurrency={concurrency}")
    return [*args, "-n", f"{name}@%h"]


def start_worker(name: str, config_yaml: str, queues: list[str], loglevel: str = "INFO", concurrency: int = 0) -> None:
    """Become a Celery worker for this instance (DAGSTER_HOME) and the broker of ``config_yaml``
    (deploy/celery/celery.yaml names it by variable): exec, so signals reach the worker itself."""
    from dagster_celery.cli import get_validated_config

    folder = write_config_module(settings.dagster_home(), name, dict(get_validated_config(config_yaml)))
    env = settings.child_environment(str(folder))
    args = worker_command(name, queues or ["dagster"], loglevel, concurrency)
    os.execvpe(args[0], args, env)
