select
    batch_id,
    source,
    sha256,
    lines,
    inserted,
    duplicates,
    rejected,
    "at" as ingested_at,
    cst_day
from {{ source('memory', 'ingest_batches') }}
