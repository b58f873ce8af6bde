-- Seed 000 30-minute chunks; cst_day is the chunk's CST day (the store's cst_date).
select
    chunk_id,
    conversation_id,
    world_id,
    bucket,
    "at" as effective_at,  -- the bucket end, where the chunk takes effect
    summary,
    length(summary) as summary_chars,
    watermark_message_id,
    watermark_at,
    source_ids,
    cast(json_array_length(source_ids) as bigint) as source_id_count,  -- not UBIGINT
    model,
    seq,
    cst_day
from {{ source('memory', 'temporal_day_chunks') }}
