"""Dagster resources: thin wrappers that hand the plain lib objects to the assets."""

import os

from dagster import ConfigurableResource

from memory_pipeline.lib import settings
from memory_pipeline.lib.cache import RollCache
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store


class MemoryStoreResource(ConfigurableResource):
    """The operational store: SQLite under data/ by default, PostgreSQL by MEMORY_DATABASE_URL."""

    database_url: str

    def store(self) -> Store:
        return Store(self.database_url)


class RollCacheResource(ConfigurableResource):
    """Redis by REDIS_URL, with the in-process fallback when it is unset or unreachable."""

    redis_url: str = ""

    def cache(self) -> RollCache:
        return RollCache(self.redis_url or None)


class LLMResource(ConfigurableResource):
    """Every LLM call goes through here (litellm, or the offline deterministic model) and leaves a
    ledger row naming the asset and partition."""

    model: str = settings.OFFLINE_MODEL
    api_base: str = ""
    api_key: str = ""
    timeout_seconds: float = 60.0
    max_retries: int = 3
    backoff_seconds: float = 1.0
    use_cache: bool = True

    def client(self, store: Store, asset: str | None = None, partition: str | None = None) -> LLMClient:
        return LLMClient(
            store,
            model=self.model,
            api_base=self.api_base or None,
            api_key=self.api_key or None,
            timeout_seconds=self.timeout_seconds,
            max_retries=self.max_retries,
            backoff_seconds=self.backoff_seconds,
            use_cache=self.use_cache,
            asset=asset,
            partition=partition,
        )


class MemoryConfigResource(ConfigurableResource):
    """``memory.*`` settings (file in MEMORY_CONFIG_FILE) and the calendar zone."""

    config_file: str = ""
    timezone: str = "Asia/Shanghai"

    def memory(self) -> settings.MemoryConfig:
        return settings.load_memory_config(self.config_file or None)


def default_resources() -> dict:
    """Resources from the environment; nothing set means the embedded default."""
    return {
        "memory_store": MemoryStoreResource(database_url=settings.database_url()),
        "roll_cache": RollCacheResource(redis_url=settings.redis_url() or ""),
        "llm": LLMResource(
            model=os.environ.get("MEMORY_LLM_MODEL", settings.OFFLINE_MODEL),
            api_base=os.environ.get("MEMORY_LLM_API_BASE", ""),
            api_key=os.environ.get("MEMORY_LLM_API_KEY", ""),
            timeout_seconds=float(os.environ.get("MEMORY_LLM_TIMEOUT_SECONDS", "60")),
            max_retries=int(os.environ.get("MEMORY_LLM_MAX_RETRIES", "3")),
        ),
        "memory_config": MemoryConfigResource(
            config_file=os.environ.get("MEMORY_CONFIG_FILE", ""), timezone=settings.timezone_name()
        ),
    }
