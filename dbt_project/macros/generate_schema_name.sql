{#- Models go to the schema they name (staging, marts) rather than main_staging, main_marts. -#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {{ custom_schema_name | trim if custom_schema_name is not none else target.schema }}
{%- endmacro %}
