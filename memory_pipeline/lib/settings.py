"""Settings from the environment and the optional memory config file.

The embedded default needs nothing: SQLite under ``data/``, an in-process cache and the offline
model. Production sets ``MEMORY_DATABASE_URL``, ``REDIS_URL`` and ``MEMORY_LLM_MODEL``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
OFFLINE_MODEL = "offline/deterministic-headline-v1"


def data_dir() -> Path:
    return Path(os.environ.get("MEMORY_DATA_DIR", REPO_ROOT / "data"))


def database_url() -> str:
    url = os.environ.get("MEMORY_DATABASE_URL")
    if url:
        return url
    path = data_dir() / "memory.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def redis_url() -> str | None:
    return os.environ.get("REDIS_URL") or None


def timezone_name() -> str:
    return os.environ.get("MEMORY_TIMEZONE", "Asia/Shanghai")


def partition_start() -> str:
    """First day of the partitioned history (YYYY-MM-DD); the LoCoMo data starts in 2022."""
    return os.environ.get("MEMORY_PARTITION_START", "2022-01-01")


@dataclass(frozen=True)
class TemporalSummaryConfig:
    """``memory.temporal_summary`` (seed 000). Caps are prompt targets; output is hard-cut at
    ceil(max_chars * 1.5) (lib.text.hard_cut)."""

    enabled: bool = True
    chunk_max_chars: int = 50
    peer_roll_max_chars: int = 100
    global_day_max_chars: int = 100
    month_max_chars: int = 100
    year_max_chars: int = 100
    system_prompt_max_chars: int = 1500
    redis_key_prefix: str = "anima:temporal"
    peer_roll_ttl_seconds: int = 36 * 3600
    # Material sent to one day summary call; longer days keep their newest lines.
    day_material_max_chars: int = 12000

    def validate(self) -> TemporalSummaryConfig:
        for f in fields(self):
            if f.name.endswith("_chars") or f.name.endswith("_seconds"):
                value = getattr(self, f.name)
                if not isinstance(value, int) or value <= 0:
                    raise ValueError(f"memory.temporal_summary.{f.name} must be a positive integer, got {value!r}")
        if not self.redis_key_prefix:
            raise ValueError("memory.temporal_summary.redis_key_prefix must not be empty")
        return self


@dataclass(frozen=True)
class MemoryConfig:
    temporal_summary: TemporalSummaryConfig = field(default_factory=TemporalSummaryConfig)


def load_memory_config(path: str | os.PathLike | None = None) -> MemoryConfig:
    """Read ``memory.temporal_summary`` from YAML (``MEMORY_CONFIG_FILE``); unknown keys are errors."""
    path = path or os.environ.get("MEMORY_CONFIG_FILE")
    if not path:
        return MemoryConfig()
    with open(path, encoding="utf-8") as fh:
        doc: dict[str, Any] = yaml.safe_load(fh) or {}
    section = (doc.get("memory") or {}).get("temporal_summary") or {}
    known = {f.name for f in fields(TemporalSummaryConfig)}
    unknown = sorted(set(section) - known)
    if unknown:
        raise ValueError(f"{path}: unknown keys in memory.temporal_summary: {', '.join(unknown)}")
    return MemoryConfig(temporal_summary=replace(TemporalSummaryConfig(), **section).validate())
