"""A one-step job on the code location's Celery executor, for the worker tests (a Celery worker
imports this module by name to run the step)."""

from dagster import job, op

from memory_pipeline.defs._shared.celery_executor import celery_executor
from memory_pipeline.lib import settings

BROKER = {"env": settings.ENV_CELERY_BROKER_URL}


@op
def probe_step() -> int:
    return 1


@job(executor_def=celery_executor.configured({"broker": BROKER, "backend": BROKER}))
def celery_probe() -> None:
    probe_step()
