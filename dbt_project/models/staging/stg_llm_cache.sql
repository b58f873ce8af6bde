select
    cache_key,
    model,
    prompt_version,
    length(response) as response_chars,
    response,
    tokens_in,
    tokens_out,
    created_at,
    cst_day
from {{ source('memory', 'llm_cache') }}
