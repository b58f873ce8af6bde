select
    summary_id,
    world_id,
    "window" as grain,
    period_start,
    content,
    length(content) as content_chars,
    empty_reason,
    empty_reason is null and content <> '' as is_summary,
    source_count,
    source_kind,
    source_ids,
    cast(json_array_length(source_ids) as bigint) as source_id_count,  -- not UBIGINT
    material_fp,
    model,
    prompt_version,
    created_at,
    updated_at
from (
    -- exported per window, each along its own partitions (days, months, years)
    select * from {{ source('memory', 'temporal_day_summaries') }}
    union all by name
    select * from {{ source('memory', 'temporal_month_summaries') }}
    union all by name
    select * from {{ source('memory', 'temporal_year_summaries') }}
)
