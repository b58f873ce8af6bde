"""Celery past one machine (MEMORY_EXECUTOR=celery): dagster-celery's executor, which first warns
when no worker consumes a queue its steps go to, and the worker start that keeps the broker URL
private.

A step submitted to a queue nobody consumes waits silently ("Submitting celery task…") until a
worker starts; the run's log now says so in one line as the run starts. ``dagster-celery worker
start`` writes the resolved broker URL (a password, if it has one) into a module readable by every
user; :func:`start_worker` writes the same module with mode 0600 in folders of mode 0700, one per
worker name (replaced at each start, not one more file per start), then becomes the Celery worker."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dagster import executor, multiple_process_executor_requirements
from dagster._core.execution.retries import RetryMode
from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tags import DAGSTER_CELERY_QUEUE_TAG

from memory_pipeline.lib import settings

CONFIG_MODULE = "dagster_celery_config"  # the module dagster_celery.app imports when it exists
ASK_SECONDS = 2.0  # how long a launch waits for workers to say which queues they consume


def consumers(app: Any, queues: Iterable[str], timeout: float = ASK_SECONDS) -> dict[str, list[str]]:
    """{queue: names of the workers consuming it} for these queues (a broadcast on the broker)."""
    replies = app.control.inspect(timeout=timeout).active_queues() or {}
    return {
        q: sorted(worker for worker, listening in replies.items() if any(x.get("name") == q for x in listening))
        for q in queues
    }


def unconsumed_warning(queue: str) -> str:
    return (
        f'celery queue "{queue}": no consumer. No worker listens on it at the broker '
        f"{settings.ENV_CELERY_BROKER_URL}, so its steps wait until one starts: "
        f"memory-pipeline celery-worker -n NAME -q {queue} (see docs/operations.md)"
    )


class MemoryCeleryExecutor(CeleryExecutor):
    """dagster-celery's executor, saying at launch which of its queues no worker consumes."""

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[Any]:
        app = make_app(self.app_args())
        steps = [execution_plan.get_step_by_key(k) for k in execution_plan.step_keys_to_execute]
        queues = sorted({s.tags.get(DAGSTER_CELERY_QUEUE_TAG, app.conf.task_default_queue) for s in steps})
        if queues:
            try:
                found = consumers(app, queues)
            except Exception as exc:  # the broker itself: the submission below fails with the cause
                plan_context.log.warning(
                    f"celery: could not ask the broker ({settings.ENV_CELERY_BROKER_URL}) which workers "
                    f"consume {', '.join(queues)}: {type(exc).__name__}"
                )
            else:
                for queue, workers in found.items():
                    if workers:
                        plan_context.log.info(f'celery queue "{queue}": consumed by {", ".join(workers)}')
                    else:
                        plan_context.log.warning(unconsumed_warning(queue))
        yield from super().execute(plan_context, execution_plan)


@executor(name="celery", config_schema=CELERY_CONFIG, requirements=multiple_process_executor_requirements())
def celery_executor(init_context: Any) -> MemoryCeleryExecutor:
    """dagster_celery.celery_executor with the launch-time warning (same config)."""
    config = init_context.executor_config
    return MemoryCeleryExecutor(
        broker=config.get("broker"),
        backend=config.get("backend"),
        config_source=config.get("config_source"),
        include=config.get("include"),
        retries=RetryMode.from_config(config["retries"]),
    )


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
