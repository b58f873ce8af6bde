select
    record_id,
    type_name,
    granularity,
    "start" as window_start,
    "end" as window_end,
    group_value,
    source,
    ref_kind,
    entry_count,
    model,
    strategy,
    chunks,
    input_tokens,
    clipped_entries,
    created_at,
    cst_day,
    -- append-only series: the newest record per (window, group) is the one a read returns
    row_number() over (
        partition by type_name, granularity, "start", "end", group_value order by record_id desc
    ) = 1 as is_current
from {{ source('memory', 'tower_summaries') }}
