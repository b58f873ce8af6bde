-- Seed 003: the state record of every sleep stage run, per world and partition day; world_id '*'
-- is the stage's record of the whole day. A world's deep_sleep record with status done is its
-- snapshot of that day (stg_semantic_memory_snapshots).
select
    stage || '|' || strftime("day", '%Y-%m-%d') || '|' || world_id as run_key,
    stage,
    "day" as sleep_day,
    world_id,
    world_id = '*' as is_day_record,
    status,
    model,
    prompt_version,
    sessions,
    sessions_truncated,
    input_chars,
    llm_calls,
    tool_calls,
    applied,
    rejected,
    created,
    detail,
    finished_at
from {{ source('memory', 'sleep_runs') }}
