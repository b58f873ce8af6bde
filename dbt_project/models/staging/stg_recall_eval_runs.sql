-- One row per `eval` run; complete = every Dagster run it launched succeeded.
select
    run_id,
    dataset,
    files,
    cast(coalesce(json_array_length(files), 0) as integer) as file_count,
    -- the store's engine (its masked URL's scheme): memory_search ranks with the engine's full text
    regexp_extract(store, '^([a-z0-9]+)', 1) as store_engine,
    model,
    prompt_versions,
    worlds,
    days,
    questions,
    llm_calls,
    tokens_in,
    tokens_out,
    cost_usd,
    wall_seconds,
    coalesce(json_array_length(failed_runs), 0) = 0 as complete,
    started_at,
    finished_at,
    cast(timezone('{{ var("timezone") }}', finished_at) as date) as cst_day
from {{ source('memory', 'recall_eval_runs') }}
