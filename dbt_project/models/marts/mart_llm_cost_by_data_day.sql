-- Per data partition, asset and model: what the LLM calls made for that partition cost (the day,
-- week, month or year of the data they worked on, stg_llm_ledger.partition_key), whichever days
-- the calls were made on: a backfill of October run in December counts for October here, and for
-- December in mart_llm_cost_daily. The measures are that mart's (macro llm_call_measures). Calls
-- outside a partition (objects, rolling summaries, system rolls) are one row per asset and model
-- with data_grain null. Rebuilt whole from the ledger on every build (a late call for an old
-- partition changes that partition's row).
select
    coalesce(partition_key, '(none)') || '|' || coalesce(asset, '(none)') || '|' || model as data_cost_key,
    data_day,
    data_grain,
    partition_key,
    coalesce(asset, '(none)') as asset,
    model,
    {{ llm_call_measures() }},
    min(cst_day) as first_call_day,
    max(cst_day) as last_call_day
from {{ ref('stg_llm_ledger') }}
group by all
