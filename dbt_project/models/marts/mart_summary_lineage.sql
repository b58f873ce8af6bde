-- One row per (summary row, raw message it covers): a day row lists its messages, a month row its
-- day rows, a year row its month rows; walking year -> months -> days -> messages here means an
-- analyst goes from any summary to its raw messages with one join on message_id.
with summaries as (
    select summary_id, world_id, grain, period_start, source_kind, source_ids
    from {{ ref('stg_temporal_summaries') }}
    where is_summary
),

day_messages as (
    select summary_id as day_summary_id, unnest(from_json(source_ids, '["VARCHAR"]')) as message_id
    from summaries
    where source_kind = 'message'
),

month_days as (
    select summary_id as month_summary_id, unnest(from_json(source_ids, '["BIGINT"]')) as day_summary_id
    from summaries
    where source_kind = 'day'
),

year_months as (
    select summary_id as year_summary_id, unnest(from_json(source_ids, '["BIGINT"]')) as month_summary_id
    from summaries
    where source_kind = 'month'
),

lineage as (
    select day_summary_id as summary_id, null::bigint as month_summary_id, day_summary_id, message_id
    from day_messages
    union all
    select md.month_summary_id, md.month_summary_id, md.day_summary_id, dm.message_id
    from month_days as md
    join day_messages as dm using (day_summary_id)
    union all
    select ym.year_summary_id, ym.month_summary_id, md.day_summary_id, dm.message_id
    from year_months as ym
    join month_days as md using (month_summary_id)
    join day_messages as dm using (day_summary_id)
)

select
    l.summary_id || ':' || l.message_id as lineage_key,
    s.world_id,
    s.grain,
    s.period_start,
    l.summary_id,
    l.month_summary_id,
    l.day_summary_id,
    l.message_id
from lineage as l
join summaries as s on s.summary_id = l.summary_id
