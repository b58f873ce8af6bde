"""Seed 000, temporal summaries.

Pure: ``logic`` (inclusion, watermark gating, fingerprints, keys, TTLs, the system block) and
``prompts``. I/O without Dagster: ``context`` (shared queries and the model call), ``chunks``
(the */30 tick), ``summaries`` (day / month / year rows), ``rolls`` (system and peer rolls),
``read`` (the read path, never an LLM) and ``reconcile`` (which materialized periods late data or a
new world made stale). The thin Dagster layer: ``partitions``, ``assets``,
``checks``, ``schedules``, ``sensors``."""
