"""Seed 000, temporal summaries: 30-minute chunks, per-world day/month/year rows, peer and system
rolls, and the read path. ``logic`` and ``prompts`` are pure; ``service`` does the I/O; the
Dagster layer (``partitions``, ``assets``, ``checks``, ``schedules``, ``sensors``) stays thin."""
