select
    conversation_id,
    world_id,
    platform,
    debug,
    -- seed 000: counted are non-debug conversations not on the cron platform (whatever its case)
    lower(platform) = 'cron' as is_cron,
    not debug and lower(platform) <> 'cron' as is_eligible,
    title,
    created_at,
    updated_at
from {{ source('memory', 'conversations') }}
