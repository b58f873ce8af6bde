-- Only the time-partitioned domains' partitions are periods of data (temporal, tower, sleep): a
-- rolling summary's partition is its conversation id, which may be any text, "2025-11" too.
with ledger as (
    select
        *,
        coalesce(
            starts_with(asset, 'temporal_') or starts_with(asset, 'tower_') or starts_with(asset, 'sleep_'), false
        ) as of_period
    from {{ source('memory', 'llm_ledger') }}
)

select
    call_id,
    "at" as called_at,
    cst_day,
    asset,
    -- The Dagster partition the call was made for (the data it worked on), as the run named it:
    -- a day 2025-10-01, a week by its Monday (the tower's week assets), a month 2025-10, a year
    -- 2025; null for calls outside a partition (system rolls); another unit of work's name for the
    -- rest (an objects batch's "job <id>", a rolling summary's conversation id, a tower job's window).
    "partition" as partition_key,
    case
        when "partition" is null then null
        when not of_period then 'other'
        when regexp_full_match("partition", '\d{4}') then 'year'
        when regexp_full_match("partition", '\d{4}-\d{2}') then 'month'
        when regexp_full_match("partition", '\d{4}-\d{2}-\d{2}') and asset like '%week%' then 'week'
        when regexp_full_match("partition", '\d{4}-\d{2}-\d{2}') then 'day'
        else 'other'
    end as data_grain,
    -- the first CST day of that period (null without a partition, or one of another shape or domain)
    case
        when not of_period then null
        when regexp_full_match("partition", '\d{4}') then make_date(cast("partition" as integer), 1, 1)
        when regexp_full_match("partition", '\d{4}-\d{2}') then cast("partition" || '-01' as date)
        when regexp_full_match("partition", '\d{4}-\d{2}-\d{2}') then try_cast("partition" as date)
    end as data_day,
    task,
    world_id,
    model,
    prompt_version,
    tokens_in,
    tokens_out,
    -- provider: the provider's usage report; estimated: counted by the pipeline (the offline model,
    -- or an answer without usage). Null on rows without tokens (cache hits, errors).
    tokens_source,
    -- USD where the model has a price (JSON number); NULL where it has none (JSON null)
    try_cast(cost_usd as double) as cost_usd,
    latency_ms,
    attempts,
    -- breaker_open: refused without a request (the provider kept failing): no model call, no failure
    outcome,
    outcome in ('ok', 'error') as is_model_call,
    outcome = 'error' as is_failure,
    outcome = 'cache_hit' as is_cache_hit,
    finish_reason,
    -- the answer stopped at the output tokens asked for (the caller may ask again for more)
    coalesce(finish_reason = 'length', false) as is_truncated,
    max_tokens,
    error,
    cache_key
from ledger
