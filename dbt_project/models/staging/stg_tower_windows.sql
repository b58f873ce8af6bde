select
    type_name || '|' || granularity || '|' || strftime("start", '%Y-%m-%dT%H:%M:%S') || '|' || group_value as window_key,
    type_name,
    granularity,
    "start" as window_start,
    "end" as window_end,
    group_value,
    entry_count,
    chars,
    ref_kind,
    materialized_at,
    cst_day
from {{ source('memory', 'tower_windows') }}
