"""``memory.temporal_summary`` (seed 000 配置), a frozen dataclass validated strictly by type."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from memory_pipeline import domains
from memory_pipeline.lib.settings import ConfigError, load_section

SECTION = "temporal_summary"


@dataclass(frozen=True)
class TemporalSummaryConfig:
    """Caps are prompt targets; output is hard-cut at ceil(max_chars * 1.5) (lib.text.hard_cut)."""

    enabled: bool = True
    chunk_max_chars: int = 50
    peer_roll_max_chars: int = 100
    global_day_max_chars: int = 100
    month_max_chars: int = 100
    year_max_chars: int = 100
    system_prompt_max_chars: int = 1500
    redis_key_prefix: str = "anima:temporal"
    peer_roll_ttl_seconds: int = 36 * 3600
    # Material sent to one model call; a day with more is summarized per conversation first.
    day_material_max_chars: int = 12000

    def validate(self) -> TemporalSummaryConfig:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_chars") or f.name.endswith("_seconds"):
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise ConfigError(f"memory.{SECTION}.{f.name}: must be a positive integer, got {value!r}")
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"memory.{SECTION}.enabled: expected true or false, got {self.enabled!r}")
        prefix = self.redis_key_prefix
        if not isinstance(prefix, str) or not prefix or any(c.isspace() or c in "*?[]" for c in prefix):
            raise ConfigError(
                f"memory.{SECTION}.redis_key_prefix: must be a non-empty string without spaces or glob characters"
            )
        return self


def load(path: str | os.PathLike[str] | None = None) -> TemporalSummaryConfig:
    return load_section(SECTION, TemporalSummaryConfig, path, domains.CONFIG_SECTIONS)
