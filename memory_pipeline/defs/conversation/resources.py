"""The conversation domain's resource: store, model, config and zone for the rolling summary."""

from __future__ import annotations

from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from dagster import ConfigurableResource

from memory_pipeline.conversation import config as conversation_config
from memory_pipeline.conversation.config import ConversationConfig
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store
from memory_pipeline.resources import LLMResource, MemoryConfigResource, MemoryStoreResource, SharedResources


class ConversationResource(ConfigurableResource[Any]):
    memory_store: MemoryStoreResource
    llm: LLMResource
    memory_config: MemoryConfigResource

    def cfg(self) -> ConversationConfig:
        return conversation_config.load(self.memory_config.path())

    def store(self) -> Store:
        return self.memory_store.store()

    def client(self, store: Store, asset: str) -> LLMClient:
        return self.llm.client(store, asset=asset)

    def tz(self) -> ZoneInfo:
        return self.memory_config.zone()


class ConversationResources(TypedDict):
    conversation: ConversationResource


def conversation_resources(shared: SharedResources) -> ConversationResources:
    return {
        "conversation": ConversationResource(
            memory_store=shared["memory_store"], llm=shared["llm"], memory_config=shared["memory_config"]
        )
    }
