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
from {{ source('memory', 'llm_ledger') }}
