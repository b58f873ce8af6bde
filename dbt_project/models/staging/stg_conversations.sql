select
    conversation_id,
    world_id,
    platform,
    debug,
    platform = 'cron' as is_cron,
    -- seed 000: counted are non-debug conversations not on the cron platform
    not debug and platform <> 'cron' as is_eligible,
    title,
    created_at,
    updated_at
from {{ source('memory', 'conversations') }}
