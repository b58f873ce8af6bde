"""The temporal domain's resource: the four shared resources, composed into one TemporalContext."""

from zoneinfo import ZoneInfo

from dagster import ConfigurableResource

from memory_pipeline.resources import LLMResource, MemoryConfigResource, MemoryStoreResource, RollCacheResource
from memory_pipeline.temporal.context import TemporalContext


class TemporalResource(ConfigurableResource):
    memory_store: MemoryStoreResource
    roll_cache: RollCacheResource
    llm: LLMResource
    memory_config: MemoryConfigResource

    def context(self, asset: str, partition: str | None, force_llm: bool = False) -> TemporalContext:
        """A context whose LLM ledger rows name ``asset`` and ``partition``."""
        store = self.memory_store.store()
        return TemporalContext(
            store=store,
            llm=self.llm.client(store, asset=asset, partition=partition),
            cache=self.roll_cache.cache(),
            cfg=self.memory_config.memory().temporal_summary,
            tz=ZoneInfo(self.memory_config.timezone),
            force_llm=force_llm,
        )
