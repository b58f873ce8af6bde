{#- Seed 003: each world's consecutive snapshots as (world_id, before_day, after_day). A world has a
    snapshot of a day when its deep sleep of that day is done (an empty set then has no row in
    stg_semantic_memory_snapshots, and still counts). Its first one is paired with the last day
    deep sleep ran before it (the day record), when it had nothing yet: an empty snapshot, as
    `memory-pipeline sleep diff` reads it, so the world's first memories count as added. -#}
{% macro sleep_snapshot_pairs() -%}
    with own as (
        select world_id, sleep_day as snapshot_day
        from {{ ref('stg_sleep_runs') }}
        where stage = 'deep_sleep' and status = 'done' and not is_day_record
        union
        select world_id, snapshot_day from {{ ref('stg_semantic_memory_snapshots') }}
    ),

    lead_in as (
        select firsts.world_id, max(ran.sleep_day) as snapshot_day
        from (select world_id, min(snapshot_day) as first_day from own group by world_id) as firsts
        join {{ ref('stg_sleep_runs') }} as ran
            on ran.stage = 'deep_sleep' and ran.status = 'done' and ran.is_day_record
            and ran.sleep_day < firsts.first_day
        group by firsts.world_id
    ),

    ordered as (
        select
            world_id,
            lag(snapshot_day) over (partition by world_id order by snapshot_day) as before_day,
            snapshot_day as after_day
        from (select * from own union select * from lead_in) as days
    )

    select world_id, before_day, after_day from ordered where before_day is not null
{%- endmacro %}
