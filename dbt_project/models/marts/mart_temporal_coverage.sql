-- One row per world and period (day, month, year) from the world's first event to the newest
-- period of that grain written for any world: whether a summary exists, the placeholder's
-- empty_reason, the source count, the length against its cap, and when it was last written.
-- A period with no row at all is status 'missing' (never materialized, or the world was left out).
with summaries as (
    select * from {{ ref('stg_temporal_summaries') }}
),

worlds as (
    select world_id, first_event_day from {{ ref('stg_worlds') }} where first_event_day is not null
),

windows as (
    select grain, max(period_start) as last_period
    from summaries
    group by 1
),

spine as (
    select
        w.world_id,
        x.grain,
        cast(p.period_start as date) as period_start
    from worlds as w
    cross join windows as x
    cross join lateral (
        select unnest(generate_series(
            cast(date_trunc(x.grain, w.first_event_day) as timestamp),
            cast(x.last_period as timestamp),
            case x.grain
                when 'day' then interval 1 day
                when 'month' then interval 1 month
                else interval 1 year
            end
        )) as period_start
    ) as p
),

periods as (
    select world_id, grain, period_start from spine
    union
    select world_id, grain, period_start from summaries
),

caps as (
    select 'day' as grain, {{ var('summary_caps')['day'] }} as cap_chars
    union all select 'month', {{ var('summary_caps')['month'] }}
    union all select 'year', {{ var('summary_caps')['year'] }}
)

select
    p.world_id || ':' || p.grain || ':' || strftime(p.period_start, '%Y-%m-%d') as coverage_key,
    p.world_id,
    p.grain,
    p.period_start,
    case
        when s.summary_id is null then 'missing'
        when s.empty_reason is not null then 'placeholder'
        else 'summary'
    end as status,
    coalesce(s.is_summary, false) as has_summary,
    s.empty_reason,
    coalesce(s.source_count, 0) as source_count,
    coalesce(s.source_id_count, 0) as source_id_count,
    s.source_kind,
    coalesce(s.content_chars, 0) as content_chars,
    c.cap_chars,
    cast(ceil(c.cap_chars * 1.5) as integer) as hard_cap_chars,
    round(coalesce(s.content_chars, 0) / c.cap_chars, 3) as cap_ratio,
    coalesce(s.content_chars, 0) > c.cap_chars as over_cap,
    coalesce(s.content_chars, 0) > ceil(c.cap_chars * 1.5) as over_hard_cap,
    s.summary_id,
    s.model,
    s.prompt_version,
    s.created_at as first_written_at,
    s.updated_at as last_written_at
from periods as p
left join summaries as s
    on s.world_id = p.world_id and s.grain = p.grain and s.period_start = p.period_start
left join caps as c on c.grain = p.grain
