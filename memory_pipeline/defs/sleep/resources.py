"""The sleep domain's resource: the shared resources composed into one SleepContext."""

from __future__ import annotations

from typing import Any, TypedDict

from dagster import ConfigurableResource

from memory_pipeline.resources import LLMResource, MemoryConfigResource, MemoryStoreResource, SharedResources
from memory_pipeline.sleep import config as sleep_config
from memory_pipeline.sleep.config import SleepConfig
from memory_pipeline.sleep.context import SleepContext


class SleepResource(ConfigurableResource[Any]):
    memory_store: MemoryStoreResource
    llm: LLMResource
    memory_config: MemoryConfigResource

    def cfg(self) -> SleepConfig:
        return sleep_config.load(self.memory_config.path())

    def context(self, asset: str, partition: str | None, force: bool = False) -> SleepContext:
        store = self.memory_store.store()
        return SleepContext(
            store=store,
            llm=self.llm.client(store, asset=asset, partition=partition),
            cfg=self.cfg(),
            tz=self.memory_config.zone(),
            force=force,
        )


class SleepResources(TypedDict):
    sleep: SleepResource


def sleep_resources(shared: SharedResources) -> SleepResources:
    return {
        "sleep": SleepResource(
            memory_store=shared["memory_store"], llm=shared["llm"], memory_config=shared["memory_config"]
        )
    }
