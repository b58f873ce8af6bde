{{
    config(
        materialized='incremental',
        incremental_strategy='append',
        tags=['cst_day'],
        pre_hook="{{ delete_day_window() }}",
    )
}}
-- Seed 003: per CST day of the change, world and stage, what sleep (and remember, and the memory
-- tool's delete, and an operator's rebuild) did to semantic memory: created, updated, deprecated
-- (merges counted apart), merged into a new memory, deleted, restored by a rebuild. Dagster runs it per partition range (its window: macros/day_window.sql).
with v as (
    select * from {{ ref('stg_semantic_memory_versions') }}
    where {{ day_window_filter() }}
)

select
    cst_day || '|' || world_id || '|' || stage as change_key,
    cst_day,
    world_id,
    stage,
    count(*) filter (where op = 'create') as created,
    count(*) filter (where op = 'update') as updated,
    count(*) filter (where op = 'deprecate' and merged_into is null) as deprecated,
    count(*) filter (where op = 'merge') as merges,
    count(*) filter (where op = 'deprecate' and merged_into is not null) as merged_sources,
    count(*) filter (where op = 'delete') as deleted,
    count(*) filter (where op = 'restore') as restored,
    count(*) as changes
from v
group by all
