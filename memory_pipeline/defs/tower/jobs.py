"""Tower jobs: the structural ones (zero LLM) apart from the semantic ones (pool `llm`), so neither
blocks the other."""

from dagster import AssetSelection, define_asset_job

from memory_pipeline.defs.tower import assets

structural_job = define_asset_job(
    "tower_structural_job",
    selection=AssetSelection.assets(assets.tower_day_windows),
    description="Structural windows of CST days (the open day every minute): zero LLM.",
)
week_windows_job = define_asset_job(
    "tower_week_windows_job",
    selection=AssetSelection.assets(assets.tower_week_windows),
    description="Week windows (zero LLM).",
)
month_windows_job = define_asset_job(
    "tower_month_windows_job",
    selection=AssetSelection.assets(assets.tower_month_windows),
    description="Month windows (zero LLM).",
)
day_summaries_job = define_asset_job(
    "tower_day_summaries_job",
    selection=AssetSelection.assets(assets.tower_day_summaries),
    description="Day summaries of closed days (pool llm).",
)
week_summaries_job = define_asset_job(
    "tower_week_summaries_job",
    selection=AssetSelection.assets(assets.tower_week_summaries),
    description="Week summaries of closed weeks, bottom-up (pool llm).",
)
month_summaries_job = define_asset_job(
    "tower_month_summaries_job",
    selection=AssetSelection.assets(assets.tower_month_summaries),
    description="Month summaries (types whose cap is month; pool llm).",
)
semantic_tick_job = define_asset_job(
    "tower_semantic_tick_job",
    selection=AssetSelection.assets(assets.tower_semantic_tick),
    description="One round of the semantic tick under the five guardrails (pool llm).",
)

tower_jobs = [
    structural_job,
    week_windows_job,
    month_windows_job,
    day_summaries_job,
    week_summaries_job,
    month_summaries_job,
    semantic_tick_job,
]
