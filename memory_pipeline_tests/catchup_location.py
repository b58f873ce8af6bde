"""A code location for the in-process scheduler tests: the project's definitions on the store and
Redis the test names in CATCHUP_DATABASE_URL / CATCHUP_REDIS_URL, built when Dagster loads it. Steps
run in the run's process (the executor is not what those tests are about, and a step process would
load the location again)."""

from __future__ import annotations

import os

from dagster import Definitions, definitions, in_process_executor

from memory_pipeline.definitions import build_defs
from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource


@definitions
def defs() -> Definitions:
    built = build_defs(
        {
            "memory_store": MemoryStoreResource(database_url=os.environ["CATCHUP_DATABASE_URL"]),
            "kv_cache": CacheResource(redis_url=os.environ["CATCHUP_REDIS_URL"]),
            "llm": LLMResource(),
            "memory_config": MemoryConfigResource(),
        }
    )
    return Definitions(
        assets=built.assets,
        asset_checks=built.asset_checks,
        jobs=built.jobs,
        schedules=built.schedules,
        sensors=built.sensors,
        resources=built.resources,
        executor=in_process_executor,
    )
