"""Shared Dagster resources: thin wrappers that hand the plain lib objects to the assets.

URLs and keys come in as ``dg.EnvVar``: the UI and GraphQL show the variable's name, never its
value. An unset variable leaves the field empty, which means the embedded default."""

from __future__ import annotations

from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from dagster import ConfigurableResource, EnvVar
from pydantic import Field

from memory_pipeline import domains
from memory_pipeline.lib import settings
from memory_pipeline.lib.cache import KVCache
from memory_pipeline.lib.lifeline import exit_with_parent
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.llm.client import configured_model
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.calendar import check_calendar_zone
from memory_pipeline.lib.store.migrate import ensure_schema


class MemoryStoreResource(ConfigurableResource[Any]):
    """The operational store: SQLite under data/ by default, PostgreSQL by MEMORY_DATABASE_URL.
    The schema is brought to the migrations' head on first use (under a lock), and a step under a
    MEMORY_TIMEZONE other than the store's calendar fails before it reads or writes anything."""

    database_url: str = Field("", description="SQLAlchemy URL; empty: SQLite under data/")

    def store(self) -> Store:
        # Every step that writes the store starts here: in a step process of the multiprocess
        # executor, it then dies with its run worker rather than writing into a run already failed.
        exit_with_parent()
        store = Store(self.database_url or settings.default_sqlite_url())
        ensure_schema(store, domains.version_locations())
        check_calendar_zone(store, settings.timezone_name())
        return store

    @property
    def kind(self) -> str:
        """The technology, for asset kinds: postgres or sqlite."""
        return Store.kind_of(self.database_url or settings.default_sqlite_url())


class CacheResource(ConfigurableResource[Any]):
    """Redis by REDIS_URL, with the in-process fallback when it is unset or unreachable; given the
    store, a write Redis did not take is kept there until cache_writeback_sensor writes it back."""

    redis_url: str = Field("", description="redis://host:6379/0; empty: the in-process cache")

    def cache(self, store: Store | None = None) -> KVCache:
        return KVCache(self.redis_url or None, store=store)


class LLMResource(ConfigurableResource[Any]):
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


class MemoryConfigResource(ConfigurableResource[Any]):
    """The ``memory.*`` config file (MEMORY_CONFIG_FILE) and the calendar zone; each domain reads
    its own section from the file."""

    config_file: str = ""
    timezone: str = "Asia/Shanghai"

    def path(self) -> str | None:
        return self.config_file or None

    def zone(self) -> ZoneInfo:
        """The calendar zone of a run's rows. The partitions are cut in MEMORY_TIMEZONE when the
        code location loads (and the store records it): a run configured with another zone would
        cut its rows in a calendar its partition keys are not of, so it is refused (ConfigError)."""
        keys = settings.timezone_name()
        if self.timezone != keys:
            raise settings.ConfigError(
                f"memory_config.timezone {self.timezone!r} is not {settings.ENV_TIMEZONE}={keys!r}, the zone the "
                f"partitions are cut in: set {settings.ENV_TIMEZONE} where the code location runs instead"
            )
        return ZoneInfo(self.timezone)


def _env(name: str) -> Any:
    return EnvVar(name) if settings.env(name) else ""


class SharedResources(TypedDict):
    """The resources every domain's own is composed from (``definitions.build_defs``)."""

    memory_store: MemoryStoreResource
    kv_cache: CacheResource
    llm: LLMResource
    memory_config: MemoryConfigResource


def default_resources() -> SharedResources:
    """Resources from the environment; nothing set means the embedded default."""
    model = settings.env(settings.ENV_LLM_MODEL)
    # read by each LLM client when a run starts: refused here, before any run, as the others are
    configured_model()
    settings.llm_breaker_failures()
    settings.llm_breaker_cooldown_seconds()
    return {
        "memory_store": MemoryStoreResource(database_url=_env(settings.ENV_DATABASE_URL)),
        "kv_cache": CacheResource(redis_url=_env(settings.ENV_REDIS_URL)),
        "llm": LLMResource(
            model=EnvVar(settings.ENV_LLM_MODEL) if model else settings.OFFLINE_MODEL,
            api_base=_env(settings.ENV_LLM_API_BASE),
            api_key=_env(settings.ENV_LLM_API_KEY),
            timeout_seconds=settings.llm_timeout_seconds(),
            max_retries=settings.llm_max_retries(),
        ),
        "memory_config": MemoryConfigResource(
            config_file=_env(settings.ENV_CONFIG_FILE), timezone=settings.timezone_name()
        ),
    }
