"""The analyst domain's resources: the DuckDB file and its exports (over the shared store and
config), and dbt."""

from __future__ import annotations

from functools import cached_property
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from dagster import ConfigurableResource, EnvVar
from dagster_dbt import DbtCliResource
from packaging import version
from pydantic import Field

from memory_pipeline.analyst import config as analyst_config
from memory_pipeline.analyst.config import AnalystConfig
from memory_pipeline.analyst.files import AnalyticsFiles
from memory_pipeline.defs.analyst.project import analytics_dbt, dbt_executable
from memory_pipeline.lib import settings
from memory_pipeline.lib.store import Store
from memory_pipeline.resources import MemoryConfigResource, MemoryStoreResource, SharedResources
from memory_pipeline.temporal import config as temporal_config


class AnalystResource(ConfigurableResource[Any]):
    """Where the exports go: the DuckDB file (MEMORY_DUCKDB_PATH, default data/analytics.duckdb),
    the Parquet folder and the report beside it (``memory.analyst``)."""

    memory_store: MemoryStoreResource
    memory_config: MemoryConfigResource
    duckdb_path: str = Field("", description="The DuckDB file; empty: data/analytics.duckdb")

    def cfg(self) -> AnalystConfig:
        return analyst_config.load(self.memory_config.path())

    def files(self) -> AnalyticsFiles:
        return AnalyticsFiles.at(self.duckdb_path or settings.duckdb_path(), self.cfg())

    def store(self) -> Store:
        return self.memory_store.store()

    @property
    def tz(self) -> ZoneInfo:
        return self.memory_config.zone()

    def dbt_vars(self, staging: Path) -> dict[str, Any]:
        """What every dbt build is told: the private copy it builds, the zone, the summary caps."""
        caps = temporal_config.load(self.memory_config.path())
        return {
            "duckdb_path": str(staging),
            "timezone": self.memory_config.zone().key,
            "summary_caps": {
                "day": caps.global_day_max_chars,
                "month": caps.month_max_chars,
                "year": caps.year_max_chars,
            },
        }


class AnalystDbtCliResource(DbtCliResource):
    """dbt of this environment, without two start-up costs dagster-dbt pays on every invocation
    that this project never uses (about 10 s of a build on two cores): ``dbt --version`` in a
    subprocess (the version is the installed dbt-core's) and an in-process dbt adapter (used only
    to fetch row counts and column metadata). Both override private methods of the pinned
    dagster-dbt; a unit test fails if an upgrade renames them."""

    @cached_property
    def _cli_version(self) -> version.Version:
        return version.parse(installed_version("dbt-core"))

    def _initialize_dbt_core_adapter(self, args: Any) -> Any:
        return None


class AnalystShared(SharedResources, total=False):
    """The shared resources, and a test's own analyst resource (a DuckDB file of its own)."""

    analyst: AnalystResource


class AnalystResources(TypedDict):
    analyst: AnalystResource
    dbt: AnalystDbtCliResource


def analyst_resources(shared: SharedResources, analyst: AnalystResource | None = None) -> AnalystResources:
    """The analyst resource over the shared store and config (a test passes its own as
    ``shared["analyst"]``, with a DuckDB file of its own: build_defs hands it on as ``analyst``),
    and dbt on the project."""
    analyst = analyst or AnalystResource(
        memory_store=shared["memory_store"],
        memory_config=shared["memory_config"],
        duckdb_path=EnvVar(settings.ENV_DUCKDB_PATH) if settings.env(settings.ENV_DUCKDB_PATH) else "",
    )
    return {
        "analyst": analyst,
        # DbtCliResource.__init__ takes the DbtProject (its profiles and state too); the constructor
        # mypy derives for the subclass from the pydantic fields says str.
        "dbt": AnalystDbtCliResource(project_dir=analytics_dbt, dbt_executable=dbt_executable()),  # type: ignore[arg-type]
    }
