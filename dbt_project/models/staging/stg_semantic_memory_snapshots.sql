-- Seed 003: the active set of each world after a day's deep sleep, one row per memory in it (a
-- world whose set was empty that day has a deep-sleep record in stg_sleep_runs and no row here).
select
    world_id || '|' || strftime("day", '%Y-%m-%d') || '|' || memory_id as snapshot_key,
    "day" as snapshot_day,
    world_id,
    memory_id,
    type as memory_type,
    content,
    source_sessions,
    observed_at
from {{ source('memory', 'semantic_memory_snapshots') }}
