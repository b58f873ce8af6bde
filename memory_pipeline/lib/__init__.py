"""Shared code: settings, time, the store, the cache and the LLM client (no Dagster imports)."""
