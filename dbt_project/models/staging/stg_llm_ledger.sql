select
    call_id,
    "at" as called_at,
    cst_day,
    asset,
    "partition",
    task,
    world_id,
    model,
    prompt_version,
    tokens_in,
    tokens_out,
    -- USD where the model has a price (JSON number); NULL where it has none (JSON null)
    try_cast(cost_usd as double) as cost_usd,
    latency_ms,
    attempts,
    outcome,
    outcome in ('ok', 'error') as is_model_call,
    outcome = 'error' as is_failure,
    outcome = 'cache_hit' as is_cache_hit,
    error,
    cache_key
from {{ source('memory', 'llm_ledger') }}
