"""Seed 002 in Dagster: the conversation domain's one Definitions (resources injected by the root)."""

from dagster import Definitions

from memory_pipeline.defs.conversation.assets import conversation_rolling_summaries
from memory_pipeline.defs.conversation.checks import rolling_summaries_in_seed_layout
from memory_pipeline.defs.conversation.sensors import conversation_rolling_summary_sensor, rolling_summary_job

defs = Definitions(
    assets=[conversation_rolling_summaries],
    asset_checks=[rolling_summaries_in_seed_layout],
    jobs=[rolling_summary_job],
    sensors=[conversation_rolling_summary_sensor],
)
