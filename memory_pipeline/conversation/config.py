"""``memory.conversation`` (seed 002), a frozen dataclass validated strictly by type."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from memory_pipeline import domains
from memory_pipeline.conversation.logic import BACKOFF_MAX_MINUTES
from memory_pipeline.lib.settings import ConfigError, load_section

SECTION = "conversation"


@dataclass(frozen=True)
class ConversationConfig:
    enabled: bool = True
    min_entries: int = 30  # seed Step 0: MSG_COUNT < 30 -> exit
    # Seed Step 4: off until the summary is stable; off injects tail -49, on tail -20 + the summary.
    trim_history: bool = False
    history_tail: int = 49
    trimmed_tail: int = 20
    max_sentences: int = 10  # 单次压缩超过 10 句 is a format error
    entry_max_chars: int = 400  # one history line in the prompt
    # The self block holding the character's long_arc (seed: long_arc 优先): shown to the model and
    # put before the summary in the agent's context; read, never written.
    long_arc_block: str = "long_arc"
    # A failed conversation is retried after a backoff that doubles (10, 20, 40, 80 minutes ..., at
    # most a day) and held after this many failures in a row, until an operator runs `conversation retry`.
    retry_backoff_minutes: int = 10
    max_consecutive_failures: int = 5

    def validate(self) -> ConversationConfig:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ConfigError(f"memory.{SECTION}.{f.name}: must be a positive integer, got {value!r}")
        if self.retry_backoff_minutes > BACKOFF_MAX_MINUTES:
            raise ConfigError(
                f"memory.{SECTION}.retry_backoff_minutes: at most {BACKOFF_MAX_MINUTES} (a day), "
                f"got {self.retry_backoff_minutes}"
            )
        name = self.long_arc_block
        if not name.strip() or len(name) > 64 or name != name.strip() or "," in name:
            raise ConfigError(f"memory.{SECTION}.long_arc_block: a self block name, got {name!r}")
        return self


def load(path: str | os.PathLike[str] | None = None) -> ConversationConfig:
    return load_section(SECTION, ConversationConfig, path, domains.CONFIG_SECTIONS)
