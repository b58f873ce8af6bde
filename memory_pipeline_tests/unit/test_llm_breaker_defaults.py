"""The provider breaker's defaults, as docs/configuration.md states them: 5 consecutive failed
calls open it, 60 s of cooldown; the environment overrides both, and 0 turns it off."""

from __future__ import annotations

from memory_pipeline.lib import settings
from memory_pipeline.lib.llm.client import LLMClient
from memory_pipeline.lib.store import Store

UNSET = {"MEMORY_LLM_BREAKER_FAILURES": None, "MEMORY_LLM_BREAKER_COOLDOWN_SECONDS": None}


def test_the_breaker_opens_after_5_failures_and_cools_down_60_seconds_by_default(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    with settings.overridden(UNSET):
        assert (settings.llm_breaker_failures(), settings.llm_breaker_cooldown_seconds()) == (5, 60.0)
        client = LLMClient(store, model="openai/any")
        assert (client.breaker_failures, client.breaker_cooldown_seconds) == (5, 60.0)
    with settings.overridden({"MEMORY_LLM_BREAKER_FAILURES": "0", "MEMORY_LLM_BREAKER_COOLDOWN_SECONDS": "2.5"}):
        client = LLMClient(store, model="openai/any")
        assert (client.breaker_failures, client.breaker_cooldown_seconds) == (0, 2.5)
