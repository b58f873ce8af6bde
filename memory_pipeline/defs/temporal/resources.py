"""The temporal domain's resource: the four shared resources, composed into one TemporalContext."""

from __future__ import annotations

from typing import Any, TypedDict

from dagster import ConfigurableResource

from memory_pipeline.resources import (
    CacheResource,
    LLMResource,
    MemoryConfigResource,
    MemoryStoreResource,
    SharedResources,
)
from memory_pipeline.temporal import config as temporal_config
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.context import TemporalContext


class TemporalResource(ConfigurableResource[Any]):
    memory_store: MemoryStoreResource
    kv_cache: CacheResource
    llm: LLMResource
    memory_config: MemoryConfigResource

    def cfg(self) -> TemporalSummaryConfig:
        return temporal_config.load(self.memory_config.path())

    def context(
        self, asset: str, partition: str | None, force_llm: bool = False, *, rebuild: bool = False
    ) -> TemporalContext:
        """A context whose LLM ledger rows name ``asset`` and ``partition``."""
        store = self.memory_store.store()
        return TemporalContext(
            store=store,
            llm=self.llm.client(store, asset=asset, partition=partition),
            cache=self.kv_cache.cache(store),
            cfg=self.cfg(),
            tz=self.memory_config.zone(),
            force_llm=force_llm,
            rebuild=rebuild,
        )


class TemporalResources(TypedDict):
    temporal: TemporalResource


def temporal_resources(shared: SharedResources) -> TemporalResources:
    return {
        "temporal": TemporalResource(
            memory_store=shared["memory_store"],
            kv_cache=shared["kv_cache"],
            llm=shared["llm"],
            memory_config=shared["memory_config"],
        )
    }
