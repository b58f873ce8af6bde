-- Seed 004: per memory type, level and group (the value of the type's group field: the world of
-- agent/activity, the project of worklog, '' for a type without one), how many non-empty windows
-- carry a current summary, by which path (chain or raw) and strategy, with the tokens sent and the
-- entries clipped for the budget (sums cast to BIGINT: DuckDB sums integers as HUGEINT).
with w as (
    select type_name, granularity, window_start, window_end, group_value, entry_count
    from {{ ref('stg_tower_windows') }}
),

s as (
    select * from {{ ref('stg_tower_summaries') }} where is_current
)

select
    w.type_name || '|' || w.granularity || '|' || w.group_value as tower_coverage_key,
    w.type_name,
    w.granularity,
    w.group_value,
    count(*) as windows,
    cast(sum(w.entry_count) as bigint) as entries,
    count(s.record_id) as summarized_windows,
    round(count(s.record_id) / count(*), 4) as summary_coverage,
    count(s.record_id) filter (where s.source = 'chain') as from_chain,
    count(s.record_id) filter (where s.source = 'raw') as from_raw,
    count(s.record_id) filter (where s.strategy = 'map_reduce') as map_reduce,
    cast(coalesce(sum(s.input_tokens), 0) as bigint) as input_tokens,
    cast(coalesce(sum(s.clipped_entries), 0) as bigint) as clipped_entries,
    cast(coalesce(sum(greatest(w.entry_count - s.entry_count, 0)), 0) as bigint) as entries_missing_from_summaries
from w
left join s
    on s.type_name = w.type_name
    and s.granularity = w.granularity
    and s.window_start = w.window_start
    and s.window_end = w.window_end
    and s.group_value = w.group_value
group by all
