"""``memory.tower`` (seed 004): the guardrail defaults, the token budget, recall pages and the MCP
address, a frozen dataclass validated strictly by type (lib.settings.load_section)."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from datetime import timedelta

from memory_pipeline import domains
from memory_pipeline.lib.settings import ConfigError, load_section

SECTION = "tower"


@dataclass(frozen=True)
class TowerConfig:
    # Structural windows of the open day: a zero-token refresh every minute (seed: 每分钟跑、零 token).
    structural_refresh_seconds: int = 60
    # The five guardrails (decision): semantic tick every 10 min; settle 5 min after close; backoff
    # doubling from 10 min; given up after 5 consecutive failures; at most 20 commits per round.
    semantic_tick_minutes: int = 10
    settle_minutes: int = 5
    backoff_minutes: int = 10
    give_up_after: int = 5
    max_commits_per_round: int = 20
    # Within the budget one direct call; over it map_reduce in chunks (at most max_chunks).
    input_budget_tokens: int = 4000
    max_chunks: int = 8
    summary_max_chars: int = 600
    recall_default_limit: int = 100
    recall_max_limit: int = 1000
    drift_sample: int = 3
    mcp_host: str = "127.0.0.1"
    mcp_port: int = 8900
    activity_type: str = "agent/activity"

    @property
    def settle(self) -> timedelta:
        return timedelta(minutes=self.settle_minutes)

    @property
    def backoff(self) -> timedelta:
        return timedelta(minutes=self.backoff_minutes)

    def validate(self) -> TowerConfig:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool):
                low = 0 if f.name == "settle_minutes" else 1
                if value < low:
                    raise ConfigError(f"memory.{SECTION}.{f.name}: must be an integer >= {low}, got {value!r}")
        if self.recall_default_limit > self.recall_max_limit:
            raise ConfigError(f"memory.{SECTION}.recall_default_limit: must not exceed recall_max_limit")
        if self.mcp_port > 65535:
            raise ConfigError(f"memory.{SECTION}.mcp_port: must be a TCP port (1-65535), got {self.mcp_port}")
        from memory_pipeline.tower.logic import name_problem

        if problem := name_problem(self.activity_type):
            raise ConfigError(f"memory.{SECTION}.activity_type: {problem}")
        if not self.mcp_host or any(c.isspace() for c in self.mcp_host):
            raise ConfigError(f"memory.{SECTION}.mcp_host: must be a host name or address")
        return self


def load(path: str | os.PathLike[str] | None = None) -> TowerConfig:
    return load_section(SECTION, TowerConfig, path, domains.CONFIG_SECTIONS)
