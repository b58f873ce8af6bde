"""Temporal jobs: the */30 tick, the day / month / year cascade and the system rolls."""

from dagster import AssetSelection, define_asset_job

from memory_pipeline.defs.temporal import assets
from memory_pipeline.defs.temporal.checks import temporal_freshness_checks


def _without_freshness(selection: AssetSelection) -> AssetSelection:
    """Freshness checks run from their sensor, not inside every (back)fill run of old partitions."""
    return selection - AssetSelection.checks(*temporal_freshness_checks)


tick_job = define_asset_job(
    "temporal_tick_job",
    selection=_without_freshness(AssetSelection.assets(assets.temporal_day_chunks, assets.temporal_peer_rolls)),
    description="The */30 tick: append chunks of closed buckets, then warm peer rolls.",
)
day_job = define_asset_job(
    "temporal_day_job",
    selection=_without_freshness(AssetSelection.assets(assets.temporal_day_summaries)),
    description="Per-world day rows of one CST day (or a range).",
)
month_job = define_asset_job(
    "temporal_month_job",
    selection=_without_freshness(AssetSelection.assets(assets.temporal_month_summaries)),
    description="Cascade: per-world month rows from the month's day rows.",
)
year_job = define_asset_job(
    "temporal_year_job",
    selection=_without_freshness(AssetSelection.assets(assets.temporal_year_summaries)),
    description="Cascade: per-world year rows from the year's month rows.",
)
system_rolls_job = define_asset_job(
    "temporal_system_rolls_job",
    selection=AssetSelection.assets(assets.temporal_system_rolls),
    description="Regenerate past_days / past_months / past_years rolls for today.",
)


temporal_jobs = [tick_job, day_job, month_job, year_job, system_rolls_job]
