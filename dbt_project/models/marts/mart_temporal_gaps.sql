-- Seed 000 gaps, one row per world: over the days mart_temporal_coverage lists for it (from its
-- first event day to the newest day row of any world), the days without a day summary (a
-- placeholder, or no row at all), how many runs of consecutive such days there are, and the
-- longest run (the earliest, if several are as long) with its first and last day.
with days as (
    select world_id, period_start as day, has_summary, status
    from {{ ref('mart_temporal_coverage') }}
    where grain = 'day'
),

gap_days as (
    -- consecutive days without a summary share (day - row number): one island per run
    select
        world_id,
        day,
        day - cast(row_number() over (partition by world_id order by day) as integer) as island
    from days
    where not has_summary
),

runs as (
    select world_id, min(day) as run_start, max(day) as run_end, count(*) as run_days
    from gap_days
    group by world_id, island
),

longest as (
    select
        world_id,
        run_start,
        run_end,
        run_days,
        count(*) over (partition by world_id) as gap_runs
    from runs
    qualify row_number() over (partition by world_id order by run_days desc, run_start) = 1
),

per_world as (
    select
        world_id,
        min(day) as first_day,
        max(day) as last_day,
        count(*) as days,
        count(*) filter (where has_summary) as days_with_summary,
        count(*) filter (where not has_summary) as days_without_summary,
        count(*) filter (where status = 'placeholder') as placeholder_days,
        count(*) filter (where status = 'missing') as missing_days
    from days
    group by world_id
)

select
    p.world_id,
    p.first_day,
    p.last_day,
    p.days,
    p.days_with_summary,
    p.days_without_summary,
    p.placeholder_days,
    p.missing_days,
    coalesce(l.gap_runs, 0) as gap_runs,
    coalesce(l.run_days, 0) as longest_gap_days,
    l.run_start as longest_gap_start,
    l.run_end as longest_gap_end
from per_world as p
left join longest as l using (world_id)
