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
-- partition range (vars min_day, max_day): the run replaces exactly those days.
-- Token sums are BIGINT (DuckDB sums integers as HUGEINT, which pandas reads as float64).
select
    cst_day || '|' || coalesce(asset, '(none)') || '|' || model as cost_key,
    cst_day,
    coalesce(asset, '(none)') as asset,
    model,
    count(*) filter (where is_model_call) as calls,
    count(*) filter (where is_cache_hit) as cache_hits,
    count(*) filter (where is_failure) as failures,
    cast(coalesce(sum(tokens_in), 0) as bigint) as tokens_in,
    cast(coalesce(sum(tokens_out), 0) as bigint) as tokens_out,
    cast(coalesce(sum(tokens_in) filter (where tokens_source = 'provider'), 0) as bigint) as provider_tokens_in,
    cast(coalesce(sum(tokens_out) filter (where tokens_source = 'provider'), 0) as bigint) as provider_tokens_out,
    cast(coalesce(sum(tokens_in) filter (where tokens_source = 'estimated'), 0) as bigint) as estimated_tokens_in,
    cast(coalesce(sum(tokens_out) filter (where tokens_source = 'estimated'), 0) as bigint) as estimated_tokens_out,
    count(*) filter (where is_truncated) as truncated_calls,
    quantile_cont(latency_ms, 0.5) filter (where is_model_call) as latency_p50_ms,
    quantile_cont(latency_ms, 0.95) filter (where is_model_call) as latency_p95_ms,
    count(cost_usd) as priced_calls,
    sum(cost_usd) as cost_usd
from {{ ref('stg_llm_ledger') }}
where {{ day_window_filter() }}
group by all
