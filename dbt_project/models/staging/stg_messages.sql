-- Messages with their conversation's world, platform and debug flag.
select
    m.message_id,
    m.conversation_id,
    c.world_id,
    c.platform,
    c.debug,
    lower(c.platform) = 'cron' as is_cron,  -- "CRON" too, as the pipeline reads it
    m.role,
    m.content,
    length(m.content) as content_chars,
    m.tool_calls,
    m.tool_calls is not null and json_array_length(m.tool_calls) > 0 as has_tool_calls,
    -- recallable user/assistant text (seed 000's material)
    m.role in ('user', 'assistant') and trim(coalesce(m.content, '')) <> '' as is_material,
    -- a tool's answer, or an assistant turn that only calls tools
    m.role = 'tool'
        or (m.role = 'assistant' and trim(coalesce(m.content, '')) = ''
            and m.tool_calls is not null and json_array_length(m.tool_calls) > 0) as is_tool_only,
    m.at as sent_at,
    -- the line gave no timestamp: sent_at is the time of its ingest
    coalesce(m.at_from_ingest, false) as sent_at_is_ingest_time,
    timezone('{{ var("timezone") }}', m.at) as sent_at_local,
    m.cst_day,
    m.ingested_at,
    m.source
from {{ source('memory', 'messages') }} as m
left join {{ source('memory', 'conversations') }} as c using (conversation_id)
