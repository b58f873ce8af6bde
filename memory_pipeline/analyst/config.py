"""``memory.analyst``: where the exports go besides the DuckDB file, and how DuckDB may use the
machine. A frozen dataclass validated strictly by type (core, no Dagster)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from memory_pipeline import domains
from memory_pipeline.lib.settings import ConfigError, load_section

SECTION = "analyst"
_MEMORY_LIMIT = re.compile(r"^\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$", re.IGNORECASE)


@dataclass(frozen=True)
class AnalystConfig:
    """The DuckDB file itself is MEMORY_DUCKDB_PATH (default data/analytics.duckdb); the Parquet
    folder and the report picture sit beside it unless set here."""

    parquet: bool = True  # also write Parquet, one file per table and CST day
    parquet_dir: str = ""  # default: <duckdb file folder>/<stem>_parquet
    report_file: str = ""  # the coverage and cost picture; default: <duckdb file folder>/<stem>_report.png
    duckdb_threads: int = 2  # DuckDB worker threads of one export
    duckdb_memory_limit: str = ""  # e.g. "2GB"; empty: DuckDB's default (80% of RAM)
    # each dbt build's target folder (run_results.json, compiled SQL, dbt.log: 3-8 MB) is kept
    # beside the file for whoever looks into a build; only the newest this many
    dbt_builds_kept: int = 10

    def validate(self) -> AnalystConfig:
        if isinstance(self.duckdb_threads, bool) or not isinstance(self.duckdb_threads, int) or self.duckdb_threads < 1:
            raise ConfigError(
                f"memory.{SECTION}.duckdb_threads: must be a positive integer, got {self.duckdb_threads!r}"
            )
        kept = self.dbt_builds_kept
        if isinstance(kept, bool) or not isinstance(kept, int) or kept < 1:
            raise ConfigError(f"memory.{SECTION}.dbt_builds_kept: must be a positive integer, got {kept!r}")
        if self.duckdb_memory_limit and not _MEMORY_LIMIT.match(self.duckdb_memory_limit):
            raise ConfigError(
                f"memory.{SECTION}.duckdb_memory_limit: expected a size such as '2GB', got {self.duckdb_memory_limit!r}"
            )
        for key in ("parquet_dir", "report_file"):
            value = getattr(self, key)
            if "\x00" in value:
                raise ConfigError(f"memory.{SECTION}.{key}: must be a path")
        return self


def load(path: str | os.PathLike[str] | None = None) -> AnalystConfig:
    return load_section(SECTION, AnalystConfig, path, domains.CONFIG_SECTIONS)
