-- One row per `eval` run; complete = every Dagster run it launched succeeded.
select
    run_id,
    dataset,
    files,
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
