-- Seed 003: what changed in each world's semantic memory between two consecutive snapshots (the
-- active set after a day's deep sleep, and the one after the world's previous deep sleep), one row
-- per memory added, removed or changed (content, type or source sessions), as `sleep diff` reads
-- them. A removed memory merged into another names it (merged_into, from the live memory).
-- depends_on: {{ ref('stg_sleep_runs') }}
-- depends_on: {{ ref('stg_semantic_memory_snapshots') }}
with pairs as (
    {{ sleep_snapshot_pairs() }}
),

snaps as (
    select *, cast(source_sessions as varchar) as sessions_text
    from {{ ref('stg_semantic_memory_snapshots') }}
),

before_rows as (
    select p.world_id, p.before_day, p.after_day, s.memory_id, s.memory_type, s.content, s.sessions_text
    from pairs as p
    join snaps as s on s.world_id = p.world_id and s.snapshot_day = p.before_day
),

after_rows as (
    select p.world_id, p.before_day, p.after_day, s.memory_id, s.memory_type, s.content, s.sessions_text
    from pairs as p
    join snaps as s on s.world_id = p.world_id and s.snapshot_day = p.after_day
),

changes as (
    select
        coalesce(a.world_id, b.world_id) as world_id,
        coalesce(a.before_day, b.before_day) as before_day,
        coalesce(a.after_day, b.after_day) as after_day,
        coalesce(a.memory_id, b.memory_id) as memory_id,
        case
            when b.memory_id is null then 'added'
            when a.memory_id is null then 'removed'
            else 'changed'
        end as change,
        coalesce(a.memory_type, b.memory_type) as memory_type,
        b.content as content_before,
        a.content as content_after,
        a.sessions_text is distinct from b.sessions_text as sessions_changed
    from before_rows as b
    full outer join after_rows as a
        on a.world_id = b.world_id and a.after_day = b.after_day and a.memory_id = b.memory_id
    where b.memory_id is null
        or a.memory_id is null
        or a.content is distinct from b.content
        or a.memory_type is distinct from b.memory_type
        or a.sessions_text is distinct from b.sessions_text
)

select
    c.world_id || '|' || strftime(c.after_day, '%Y-%m-%d') || '|' || c.memory_id as change_key,
    c.world_id,
    c.before_day,
    c.after_day,
    c.memory_id,
    c.change,
    c.memory_type,
    c.content_before,
    c.content_after,
    c.sessions_changed,
    case when c.change = 'removed' then m.merged_into end as merged_into
from changes as c
left join {{ ref('stg_semantic_memories') }} as m using (memory_id)
