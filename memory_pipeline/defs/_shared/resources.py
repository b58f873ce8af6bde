"""A configured resource's value outside a run (the operations' own reads of the store)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from dagster import ConfigurableResource, DagsterInstance, DagsterInvalidConfigError, build_init_resource_context
from dagster._config.post_process import post_process_config

R = TypeVar("R", bound=ConfigurableResource[Any])


@contextmanager
def initialized(resource: R, instance: DagsterInstance) -> Iterator[R]:
    """``resource.process_config_and_initialize_cm()`` on the caller's instance: Dagster's own
    builds an ephemeral instance for every call (in-memory storages and their alembic stamps, ~60
    ms), which every ``materialize(mode="changed")`` paid before judging a single partition.
    Environment variables are resolved and nested resources initialized the same way."""
    processed = post_process_config(
        resource._config_schema.config_type,  # noqa: SLF001  # what process_config_and_initialize_cm reads
        resource._convert_to_config_dictionary(),  # noqa: SLF001
    )
    if not processed.success:
        # Dagster's error class has no annotations (no-untyped-call)
        raise DagsterInvalidConfigError("Errors while initializing", processed.errors, processed)  # type: ignore[no-untyped-call]
    with (
        build_init_resource_context(config=processed.value, instance=instance) as context,
        resource.from_resource_context_cm(context, nested_resources=resource.nested_resources) as value,
    ):
        yield value
