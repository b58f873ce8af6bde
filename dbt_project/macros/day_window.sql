{#- The partition window of a daily model's run: `where cst_day between min_day and max_day` when
    the run passed one (Dagster passes its partition range), nothing otherwise. -#}
{% macro day_window_filter(column='cst_day') -%}
    {%- if var('min_day', none) is not none and var('max_day', none) is not none -%}
        {{ column }} between date '{{ var("min_day") }}' and date '{{ var("max_day") }}'
    {%- else -%}
        true
    {%- endif -%}
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
