{#- The measures of a group of stg_llm_ledger rows, the same in both cost marts (by the day of the
    call, mart_llm_cost_daily; by the data's partition, mart_llm_cost_by_data_day), so the two
    always add up alike: model calls (answers and failures), cache hits, failures, tokens in/out
    (all, then split: provider-reported apart from estimated, which is never billing), truncated
    answers, latency p50/p95 of the model calls, and cost where the model has a price (null for a
    group without any priced call). Token sums are BIGINT (DuckDB sums integers as HUGEINT, which
    pandas reads as float64). A select list's items, each line indented as in the models. -#}
{% macro llm_call_measures() -%}
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
{%- endmacro %}
