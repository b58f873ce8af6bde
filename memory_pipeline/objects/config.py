"""``memory.objects`` (seed 001 §5 参数), a frozen dataclass validated strictly by type and range."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from memory_pipeline import domains
from memory_pipeline.lib.llm.at_once import WORLDS_AT_ONCE_MAX
from memory_pipeline.lib.settings import ConfigError, load_section
from memory_pipeline.objects import logic

SECTION = "objects"


@dataclass(frozen=True)
class ObjectsConfig:
    enabled: bool = True
    # The seed gives no value for the compaction threshold (in estimated tokens); a threshold job
    # ends below 60% of it.
    compact_threshold_tokens: int = 4_000
    chars_per_token: float = 4.0
    transfer_budget_bytes: int = logic.BUDGET_DEFAULT_BYTES  # 24,000-200,000
    worker_timeout_seconds: int = logic.WORKER_TIMEOUT_DEFAULT_SECONDS  # lease = timeout + 60 s
    retry_backoff_seconds: float = 2.0  # doubled per consecutive failure of a batch
    hot_view_max_bytes: int = logic.HOT_VIEW_MAX_BYTES
    max_batches_per_run: int = 100_000
    # Worlds a run advances at once, each in a thread of its own (seed 001: a worker per agent, one
    # lease per world). A model's latency is waited out in parallel; on SQLite, whose writers wait
    # for each other, a run takes one world at a time whatever this says.
    worlds_at_once: int = 4
    projection_dir: str = ""  # empty: <data dir>/objects

    def validate(self) -> ObjectsConfig:
        for name in ("compact_threshold_tokens", "worker_timeout_seconds", "hot_view_max_bytes", "max_batches_per_run"):
            value = getattr(self, name)
            if value <= 0:
                raise ConfigError(f"memory.{SECTION}.{name}: must be a positive integer, got {value!r}")
            if value > logic.INT_MAX:
                raise ConfigError(f"memory.{SECTION}.{name}: must be at most {logic.INT_MAX:,}, got {value!r}")
        if not 1 <= self.worlds_at_once <= WORLDS_AT_ONCE_MAX:
            raise ConfigError(
                f"memory.{SECTION}.worlds_at_once: must be within 1-{WORLDS_AT_ONCE_MAX}, got {self.worlds_at_once!r}"
            )
        # .nan and .inf are YAML floats: NaN passed every comparison below and crashed each batch
        if not math.isfinite(self.chars_per_token) or self.chars_per_token <= 0:
            raise ConfigError(
                f"memory.{SECTION}.chars_per_token: must be a positive finite number, got {self.chars_per_token!r}"
            )
        if not math.isfinite(self.retry_backoff_seconds) or self.retry_backoff_seconds < 0:
            raise ConfigError(
                f"memory.{SECTION}.retry_backoff_seconds: must be a finite number, not negative, "
                f"got {self.retry_backoff_seconds!r}"
            )
        if not logic.BUDGET_MIN_BYTES <= self.transfer_budget_bytes <= logic.BUDGET_MAX_BYTES:
            raise ConfigError(
                f"memory.{SECTION}.transfer_budget_bytes: must be within "
                f"{logic.BUDGET_MIN_BYTES:,}-{logic.BUDGET_MAX_BYTES:,}, got {self.transfer_budget_bytes!r}"
            )
        return self

    @property
    def lease_seconds(self) -> int:
        return logic.lease_seconds(self.worker_timeout_seconds)


def load(path: str | os.PathLike[str] | None = None) -> ObjectsConfig:
    return load_section(SECTION, ObjectsConfig, path, domains.CONFIG_SECTIONS)
