-- Seed 002 rolling summary versions (never overwritten): covered range, verification, trigger.
select
    conversation_id || '#' || version as summary_key,
    conversation_id,
    version,
    world_id,
    covered_start,
    covered_end,
    covered_end - covered_start + 1 as entries_covered,
    verified,
    trigger,
    model,
    last_updated,
    created_at,
    cst_day
from {{ source('memory', 'conversation_summaries') }}
