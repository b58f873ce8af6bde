-- Seed 001: long-term objects (one current dossier per stable id <type>:<key>).
select
    world_id || '|' || object_id as object_key,
    world_id,
    object_id,
    type,
    name,
    status,
    length(summary) as summary_chars,
    length(body) as body_chars,
    version,
    revision,
    created_at,
    updated_at
from {{ source('memory', 'objects_objects') }}
