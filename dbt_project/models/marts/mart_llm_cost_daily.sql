{{
    config(
        materialized='incremental',
        incremental_strategy='append',
        tags=['cst_day'],
        pre_hook="{{ delete_day_window() }}",
        on_schema_change='append_new_columns',
    )
}}
-- Per asset, model and CST day of the call: model calls (answers and failures), cache hits,
-- failures, truncated answers, tokens in/out (all, then split: provider-reported apart from
-- estimated, which is never billing), latency p50/p95 of the model calls, and cost where the model
-- has a price (cost_usd is null for a day and model without any priced call). Dagster runs it per
-- partition range (its window: macros/day_window.sql): the run replaces exactly those days.
-- Token sums are BIGINT (DuckDB sums integers as HUGEINT, which pandas reads as float64).
select
    cst_day || '|' || coalesce(asset, '(none)') || '|' || model as cost_key,
    cst_day,
    coalesce(asset, '(none)') as asset,
    model,
    {{ llm_call_measures() }}
from {{ ref('stg_llm_ledger') }}
where {{ day_window_filter() }}
group by all
