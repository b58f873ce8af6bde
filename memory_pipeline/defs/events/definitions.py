"""The raw-events domain in Dagster: one external asset every consolidated form depends on."""

from dagster import AssetSpec, Definitions

from memory_pipeline.defs._shared.keys import RAW_EVENTS

raw_conversation_events = AssetSpec(
    key=RAW_EVENTS,
    description="Append-only worlds, conversations and messages, written by `memory-pipeline ingest` "
    "and `import-locomo` (never by a run).",
    group_name="events",
    tags={"memory_pipeline/store": ""},
)

defs = Definitions(assets=[raw_conversation_events])
