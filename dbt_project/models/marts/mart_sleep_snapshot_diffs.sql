-- Seed 003: one row per world and pair of consecutive snapshots (a day's deep sleep and the
-- world's previous one): the sizes of both sets and how many memories were added, removed
-- (merged ones counted apart as well), changed and kept unchanged; a pair with no change has its
-- row with zeros. The memories themselves are in mart_sleep_snapshot_changes.
-- depends_on: {{ ref('stg_sleep_runs') }}
-- depends_on: {{ ref('stg_semantic_memory_snapshots') }}
with pairs as (
    {{ sleep_snapshot_pairs() }}
),

sizes as (
    select world_id, snapshot_day, count(*) as memories
    from {{ ref('stg_semantic_memory_snapshots') }}
    group by all
),

changes as (
    select
        world_id,
        after_day,
        count(*) filter (where change = 'added') as added,
        count(*) filter (where change = 'removed') as removed,
        count(*) filter (where change = 'removed' and merged_into is not null) as merged,
        count(*) filter (where change = 'changed') as changed
    from {{ ref('mart_sleep_snapshot_changes') }}
    group by all
)

select
    p.world_id || '|' || strftime(p.after_day, '%Y-%m-%d') as diff_key,
    p.world_id,
    p.before_day,
    p.after_day,
    coalesce(b.memories, 0) as memories_before,
    coalesce(a.memories, 0) as memories_after,
    coalesce(c.added, 0) as added,
    coalesce(c.removed, 0) as removed,
    coalesce(c.merged, 0) as merged,
    coalesce(c.changed, 0) as changed,
    coalesce(b.memories, 0) - coalesce(c.removed, 0) - coalesce(c.changed, 0) as unchanged
from pairs as p
left join sizes as b on b.world_id = p.world_id and b.snapshot_day = p.before_day
left join sizes as a on a.world_id = p.world_id and a.snapshot_day = p.after_day
left join changes as c on c.world_id = p.world_id and c.after_day = p.after_day
