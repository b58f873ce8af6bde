-- Seed 001: one row per raw event the objects domain saw, its archive state and page cursor.
select
    event_id,
    world_id,
    occurred_at,
    event_day,
    chars,
    state,
    page_cursor,
    progress,
    reason,
    queued_at,
    explicit,
    finished_at,
    state in ('linked', 'archive_only') as is_final,
    state = 'blocked' as is_blocked
from {{ source('memory', 'objects_event_state') }}
