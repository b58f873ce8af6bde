"""How a run stops when the LLM provider's breaker opened (lib/llm/client.py, LLMProviderDown):
one Failure, the same for every domain, whose first line names the provider, its last error and
what the run leaves for the next one, in the domain's own terms (partitions, queued jobs, due
conversations). Not retried: a retry would only meet the same outage."""

from __future__ import annotations

from dagster import Failure
from dagster._core.definitions.metadata import RawMetadataValue  # what Failure(metadata=) takes; not public

from memory_pipeline.lib.llm import LLMProviderDown

# What a partitioned domain (temporal, tower, sleep) leaves: its partitions not done. The others
# pass their own words (objects.worker.LEFT_FOR_NEXT_RUN, conversation.summaries.LEFT_FOR_NEXT_RUN).
PARTITIONS_LEFT = "the partitions not done are left for the next run"


def provider_down(exc: LLMProviderDown, left: str = PARTITIONS_LEFT, **metadata: RawMetadataValue) -> Failure:
    """The run's Failure: ``<provider> is failing: <error> (N consecutive failures); stopping:
    <left>``, with ``metadata`` (what was done, what was not) on the step's failure event."""
    return Failure(description=exc.stopping(left), metadata=metadata, allow_retries=False)
