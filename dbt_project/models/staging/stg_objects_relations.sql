-- Seed 001: relations; standard labels only for new ones (legacy free-text kept readable).
select
    world_id || '|' || src || '|' || label || '|' || dst as relation_key,
    world_id,
    src,
    label,
    dst,
    legacy,
    status,
    revision
from {{ source('memory', 'objects_relations') }}
