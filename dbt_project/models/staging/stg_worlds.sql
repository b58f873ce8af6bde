select
    world_id,
    name,
    created_at,
    first_event_at,
    cast(timezone('{{ var("timezone") }}', first_event_at) as date) as first_event_day
from {{ source('memory', 'worlds') }}
