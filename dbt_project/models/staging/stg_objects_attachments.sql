-- Seed 001: object -> raw event evidence (the same rows read event -> object).
select
    world_id || '|' || object_id || '|' || event_id as attachment_key,
    world_id,
    object_id,
    event_id,
    revision,
    created_at
from {{ source('memory', 'objects_attachments') }}
