{#- Every non-empty summary row (no empty_reason) lists at least one source, and counts it. -#}
{% test non_empty_rows_have_sources(model, source_ids='source_ids', source_count='source_count') %}
select *
from {{ model }}
where empty_reason is null
  and (
    {{ source_count }} is null or {{ source_count }} < 1
    or {{ source_ids }} is null or json_array_length({{ source_ids }}) < 1
  )
{% endtest %}
