{#- The partition window of a daily model's run (inclusive CST days): `where cst_day between min_day
    and max_day`. A Dagster build writes its window into the file it builds, as the one-row table
    main.dbt_day_window (so the vars, and with them dbt's parse, stay the same from run to run); a
    hand-run `dbt build` passes the vars min_day/max_day instead; neither: every day. -#}
{% macro day_window_filter(column='cst_day') -%}
    {%- if var('min_day', none) is not none and var('max_day', none) is not none -%}
        {{ column }} between date '{{ var("min_day") }}' and date '{{ var("max_day") }}'
    {%- elif day_window_table() is not none -%}
        {{ column }} between (select min_day from {{ day_window_table() }})
            and (select max_day from {{ day_window_table() }})
    {%- else -%}
        true
    {%- endif -%}
{%- endmacro %}

{#- main.dbt_day_window when the file being built holds it (looked up only when dbt executes). -#}
{% macro day_window_table() -%}
    {%- if execute -%}
        {{ return(adapter.get_relation(database=target.database, schema='main', identifier='dbt_day_window')) }}
    {%- endif -%}
    {{ return(none) }}
{%- endmacro %}

{#- An incremental daily model replaces exactly its window's days: delete them before the insert
    (a day whose rows all disappeared is emptied too, which delete+insert by key would miss). -#}
{% macro delete_day_window(column='cst_day') -%}
    {%- if is_incremental() -%}
        delete from {{ this }} where {{ day_window_filter(column) }}
    {%- else -%}
        select 1
    {%- endif -%}
{%- endmacro %}
