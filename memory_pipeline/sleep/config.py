"""``memory.sleep`` (seed 003), a frozen dataclass validated strictly by type."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

from memory_pipeline import domains
from memory_pipeline.lib import settings
from memory_pipeline.lib.llm.at_once import WORLDS_AT_ONCE_MAX
from memory_pipeline.lib.settings import ConfigError, load_section

SECTION = "sleep"
# The seeds name autobiography_summary (003) and long_arc (002: the character's own long-running
# concern, read by the rolling summary, never written by it); the other four are this configuration's.
DEFAULT_SELF_BLOCKS = "identity,personality,values,relationships,long_arc,autobiography_summary"


@dataclass(frozen=True)
class SleepConfig:
    enabled: bool = True
    # Comma-separated names of the six self blocks (must include autobiography_summary).
    self_blocks: str = DEFAULT_SELF_BLOCKS
    pinned_top: int = 20
    light_input_max_chars: int = 120_000  # seed: 约 120k 字符, oldest-updated sessions dropped first
    deep_warn_chars: int = 10_000
    deep_batch_chars: int = 100_000
    deep_refuse_chars: int = 300_000
    max_tool_turns: int = 3  # model turns per stage call (rejected calls go back as error results)
    autobiography_window_days: int = 7
    autobiography_recent_days: int = 30  # phase B: finer within, only milestone / turning_point before
    autobiography_summary_max_chars: int = 1500
    log_dir: str = ""  # deep sleep's per-round JSON logs; empty: <data dir>/logs/sleep
    # Worlds a light or deep sleep asks the model about at once, each in a thread of its own; every
    # world's writes stay in the run's thread, in order. A provider's latency is waited out in
    # parallel; on SQLite, whose writers wait for each other, one world at a time whatever this says.
    worlds_at_once: int = 4

    def block_names(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.self_blocks.split(","))

    def logs(self) -> Path:
        return Path(self.log_dir) if self.log_dir else settings.data_dir() / "logs" / "sleep"

    def validate(self) -> SleepConfig:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ConfigError(f"memory.{SECTION}.{f.name}: must be a positive integer, got {value!r}")
        if self.worlds_at_once > WORLDS_AT_ONCE_MAX:
            raise ConfigError(
                f"memory.{SECTION}.worlds_at_once: must be within 1-{WORLDS_AT_ONCE_MAX}, got {self.worlds_at_once!r}"
            )
        names = self.block_names()
        if len(names) != 6 or len(set(names)) != 6 or not all(names):
            raise ConfigError(
                f"memory.{SECTION}.self_blocks: expected six distinct names in one comma-separated string "
                f"(the default: {DEFAULT_SELF_BLOCKS!r}), got {self.self_blocks!r}"
            )
        if "autobiography_summary" not in names:
            raise ConfigError(f"memory.{SECTION}.self_blocks: must include autobiography_summary")
        if not self.deep_warn_chars < self.deep_batch_chars < self.deep_refuse_chars:
            raise ConfigError(
                f"memory.{SECTION}.deep_warn_chars < deep_batch_chars < deep_refuse_chars must hold, got "
                f"{self.deep_warn_chars}, {self.deep_batch_chars}, {self.deep_refuse_chars}"
            )
        return self


def load(path: str | os.PathLike[str] | None = None) -> SleepConfig:
    return load_section(SECTION, SleepConfig, path, domains.CONFIG_SECTIONS)
