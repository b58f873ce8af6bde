-- Seed 003 semantic memory (live state), typed: is_active, is_merged.
select
    memory_id,
    world_id,
    type as memory_type,
    content,
    source_sessions,
    observed_at,
    status,
    status = 'active' as is_active,
    merged_into is not null as is_merged,
    merged_into,
    reason,
    version,
    created_by,
    created_day,
    created_at,
    updated_at
from {{ source('memory', 'semantic_memories') }}
