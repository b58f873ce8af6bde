-- Seed 003 every change of a semantic memory (create, update, deprecate, merge, delete, and a
-- rebuild's restore) by stage.
select
    version_id,
    memory_id,
    world_id,
    version,
    op,
    type as memory_type,
    status,
    merged_into,
    stage,
    day as partition_day,
    round,
    "at" as changed_at,
    cst_day
from {{ source('memory', 'semantic_memory_versions') }}
