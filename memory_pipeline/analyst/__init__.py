"""The analyst layer: DuckDB and Parquet exports of every operational table, read by the dbt
project in ``dbt_project/`` and by analysts (core, no Dagster)."""
