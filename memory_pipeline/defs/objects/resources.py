"""The objects domain's resource: the shared store, LLM and config resources composed into one
ObjectsContext per asset and partition (ledger rows name both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from dagster import ConfigurableResource

from memory_pipeline.objects import config as objects_config
from memory_pipeline.objects import projection
from memory_pipeline.objects.config import ObjectsConfig
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.resources import LLMResource, MemoryConfigResource, MemoryStoreResource, SharedResources


class ObjectsResource(ConfigurableResource[Any]):
    memory_store: MemoryStoreResource
    llm: LLMResource
    memory_config: MemoryConfigResource

    def cfg(self) -> ObjectsConfig:
        return objects_config.load(self.memory_config.path())

    def context(self, asset: str, partition: str | None = None) -> ObjectsContext:
        store = self.memory_store.store()
        return ObjectsContext(
            store=store,
            llm=self.llm.client(store, asset=asset, partition=partition),
            cfg=self.cfg(),
            tz=self.memory_config.zone(),
        )

    def projection_root(self) -> Path:
        return projection.root_of(self.cfg())


class ObjectsResources(TypedDict):
    objects: ObjectsResource


def objects_resources(shared: SharedResources) -> ObjectsResources:
    return {
        "objects": ObjectsResource(
            memory_store=shared["memory_store"], llm=shared["llm"], memory_config=shared["memory_config"]
        )
    }
