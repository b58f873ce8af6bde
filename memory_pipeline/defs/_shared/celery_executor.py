"""The executor of every job under Celery (MEMORY_EXECUTOR=celery): dagster-celery's, which first
says when no worker consumes a queue its steps go to.

A step submitted to a queue nobody consumes waits silently ("Submitting celery task…") until a
worker starts; the run's log now says so in one line as the run starts. Starting a worker is an
operator's action: ``operations/celery_workers.py``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from dagster import executor, multiple_process_executor_requirements
from dagster._core.execution.retries import RetryMode
from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tags import DAGSTER_CELERY_QUEUE_TAG

from memory_pipeline.lib import settings

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
        # dagster-celery ships no types: its executor's own methods are untyped
        app = make_app(self.app_args())  # type: ignore[no-untyped-call]
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
        yield from super().execute(plan_context, execution_plan)  # type: ignore[no-untyped-call]


@executor(name="celery", config_schema=CELERY_CONFIG, requirements=multiple_process_executor_requirements())
def celery_executor(init_context: Any) -> MemoryCeleryExecutor:
    """dagster_celery.celery_executor with the launch-time warning (same config)."""
    config = init_context.executor_config
    return MemoryCeleryExecutor(  # type: ignore[no-untyped-call]
        broker=config.get("broker"),
        backend=config.get("backend"),
        config_source=config.get("config_source"),
        include=config.get("include"),
        retries=RetryMode.from_config(config["retries"]),
    )
