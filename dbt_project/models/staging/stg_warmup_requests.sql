-- Peer-roll warm-up requests; cst_day is the requested CST day (the store's cst_date).
select
    request_id,
    kind,
    world_id,
    bucket,
    viewer_conversation_id,
    sources_fp,
    requested_at,
    done_at,
    done_at is not null as is_done,
    cst_day
from {{ source('memory', 'warmup_requests') }}
