select
    "window" as grain,
    period_start,
    "window" || ':' || strftime(period_start, '%Y-%m-%d') as period_key,
    materialized_at,
    material_ingested_at,
    worlds
from {{ source('memory', 'temporal_period_runs') }}
