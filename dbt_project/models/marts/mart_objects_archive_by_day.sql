-- Seed 001: per world and CST day of the events, how far archiving got: events by state, the
-- objects their evidence reaches, and the day's status. A day is complete only when every event
-- is linked or archive_only; anything blocked, queued, still in the hot timeline or oversized (over
-- 32,000 characters, never organized) makes it partial.
with e as (
    select * from {{ ref('stg_objects_event_state') }}
),

objects_reached as (
    select e.world_id, e.event_day, count(distinct a.object_id) as objects
    from e
    join {{ ref('stg_objects_attachments') }} as a on a.event_id = e.event_id
    group by all
)

select
    e.world_id || '|' || cast(e.event_day as varchar) as archive_day_key,
    e.world_id,
    e.event_day,
    count(*) as events,
    count(*) filter (where e.state = 'linked') as linked,
    count(*) filter (where e.state = 'archive_only') as archive_only,
    count(*) filter (where e.state in ('pending', 'in_progress')) as queued,
    count(*) filter (where e.state = 'hot') as hot,
    count(*) filter (where e.state = 'blocked') as blocked,
    count(*) filter (where e.state = 'oversized') as oversized,
    coalesce(max(o.objects), 0) as objects_reached,
    case
        when count(*) filter (where not e.is_final) = 0 then 'complete'
        else 'partial'
    end as status
from e
left join objects_reached as o on o.world_id = e.world_id and o.event_day = e.event_day
group by e.world_id, e.event_day
