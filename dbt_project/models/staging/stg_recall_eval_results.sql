-- R@1, R@5 and characters per day of each index in an `eval` run.
select
    run_id || '|' || index_name as result_key,
    run_id,
    index_name,
    questions,
    r_at_1,
    r_at_5,
    chars_per_day
from {{ source('memory', 'recall_eval_results') }}
