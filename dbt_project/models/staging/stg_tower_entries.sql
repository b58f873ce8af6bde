select
    entry_pk,
    type_name,
    entry_id,
    "at" as entry_at,
    group_value,
    chars,
    ingested_at,
    source,
    cst_day
from {{ source('memory', 'tower_entries') }}
