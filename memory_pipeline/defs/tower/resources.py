"""The tower domain's resource: the shared store, model and config, composed for seed 004."""

from __future__ import annotations

from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from dagster import ConfigurableResource

from memory_pipeline.lib.store import Store
from memory_pipeline.resources import LLMResource, MemoryConfigResource, MemoryStoreResource, SharedResources
from memory_pipeline.tower import config as tower_config
from memory_pipeline.tower import types as types_io
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.summaries import SummaryContext


class TowerResource(ConfigurableResource[Any]):
    memory_store: MemoryStoreResource
    llm: LLMResource
    memory_config: MemoryConfigResource

    def cfg(self) -> TowerConfig:
        return tower_config.load(self.memory_config.path())

    def tz(self) -> ZoneInfo:
        return self.memory_config.zone()

    def store(self) -> Store:
        store = self.memory_store.store()
        types_io.ensure_builtins(store, self.cfg().activity_type)
        return store

    def summary_context(self, asset: str, partition: str | None, force_llm: bool = False) -> SummaryContext:
        """A context whose LLM ledger rows name ``asset`` and ``partition``."""
        store = self.store()
        return SummaryContext(
            store=store,
            llm=self.llm.client(store, asset=asset, partition=partition),
            cfg=self.cfg(),
            tz=self.tz(),
            force_llm=force_llm,
            partition_keys=True,
        )


class TowerResources(TypedDict):
    tower: TowerResource


def tower_resources(shared: SharedResources) -> TowerResources:
    return {
        "tower": TowerResource(
            memory_store=shared["memory_store"], llm=shared["llm"], memory_config=shared["memory_config"]
        )
    }
