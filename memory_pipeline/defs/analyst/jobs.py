"""Analyst jobs: the exports of a range of CST days (and the whole tables), then the dbt models
and the picture. Automation runs the same assets after their upstream; these are for operators,
the demo and backfills."""

from dagster import AssetSelection, define_asset_job

from memory_pipeline.defs.analyst.assets import (
    analyst_coverage_report,
    analyst_day_exports,
    analyst_month_exports,
    analyst_table_exports,
    analyst_year_exports,
)
from memory_pipeline.defs.analyst.dbt import analyst_dbt_assets

export_job = define_asset_job(
    "analyst_export_job",
    selection=AssetSelection.assets(analyst_day_exports, analyst_table_exports),
    description="Export the operational tables to the DuckDB file and Parquet: the tables by day for the "
    "partition range (replacing exactly those days), the others whole.",
)
month_export_job = define_asset_job(
    "analyst_month_export_job",
    selection=AssetSelection.assets(analyst_month_exports),
    description="Export the month rows of the partition range (replacing exactly those months).",
)
year_export_job = define_asset_job(
    "analyst_year_export_job",
    selection=AssetSelection.assets(analyst_year_exports),
    description="Export the year rows of the partition range (replacing exactly those years).",
)
marts_job = define_asset_job(
    "analyst_marts_job",
    selection=AssetSelection.assets(*analyst_dbt_assets, analyst_coverage_report),
    description="dbt build of the staging views and marts (daily models for the partition range) with their "
    "tests as checks, then the coverage and cost picture.",
)

analyst_jobs = [export_job, month_export_job, year_export_job, marts_job]
