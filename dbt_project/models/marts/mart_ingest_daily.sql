{{
    config(
        materialized='incremental',
        incremental_strategy='append',
        tags=['cst_day'],
        pre_hook="{{ delete_day_window() }}",
    )
}}
-- Messages per world, platform and CST day (of the message), with the shares of messages in debug
-- conversations, on the cron platform, and tool-only turns (a tool's answer, or an assistant turn
-- that only calls tools). Dagster runs it per partition range (its window: macros/day_window.sql).
with m as (
    select * from {{ ref('stg_messages') }}
    where {{ day_window_filter() }}
)

select
    cst_day || '|' || coalesce(world_id, '(unknown)') || '|' || coalesce(platform, '(unknown)') as ingest_key,
    cst_day,
    coalesce(world_id, '(unknown)') as world_id,
    coalesce(platform, '(unknown)') as platform,
    count(*) as messages,
    count(distinct conversation_id) as conversations,
    count(*) filter (where debug) as debug_messages,
    count(*) filter (where is_cron) as cron_messages,
    count(*) filter (where is_tool_only) as tool_only_messages,
    count(*) filter (where is_material) as material_messages,
    round(count(*) filter (where debug) / count(*), 4) as debug_share,
    round(count(*) filter (where is_cron) / count(*), 4) as cron_share,
    round(count(*) filter (where is_tool_only) / count(*), 4) as tool_only_share
from m
group by all
