select
    inbox_id,
    subject,
    split_part(subject, ':', 1) as recipient_kind,
    split_part(subject, ':', 2) as world_id,
    source_ref,
    title,
    body,
    created_at,
    cst_day
from {{ source('memory', 'inbox') }}
