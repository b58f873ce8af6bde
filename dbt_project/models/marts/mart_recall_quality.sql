-- One row per `eval` run, index and model: recall next to what it costs to hold and to build. The
-- raw anchor (full text of each day) is the yardstick of its own run: r_at_5_vs_raw = 1 means the
-- index recalls as well as the raw days; chars_share_of_raw is its size against theirs.
with r as (
    select * from {{ ref('stg_recall_eval_results') }}
),

raw as (
    select run_id, r_at_5 as raw_r_at_5, chars_per_day as raw_chars_per_day
    from r where index_name = 'raw messages'
)

select
    r.run_id || '|' || r.index_name || '|' || e.model as recall_key,
    r.run_id,
    e.cst_day,
    e.finished_at,
    e.dataset,
    e.files,
    e.file_count,
    e.store_engine,
    e.model,
    e.prompt_versions,
    r.index_name,
    r.questions,
    r.r_at_1,
    r.r_at_5,
    r.chars_per_day,
    r.r_at_5 / nullif(raw.raw_r_at_5, 0) as r_at_5_vs_raw,
    r.chars_per_day / nullif(raw.raw_chars_per_day, 0) as chars_share_of_raw,
    e.llm_calls,
    e.tokens_in,
    e.tokens_out,
    e.cost_usd,
    e.wall_seconds,
    e.complete
from r
join {{ ref('stg_recall_eval_runs') }} e using (run_id)
left join raw using (run_id)
