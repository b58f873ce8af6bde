"""The raw-events domain in Dagster: one external asset every consolidated form depends on."""

from dagster import AssetKey, AssetSpec, Definitions

raw_conversation_events = AssetSpec(
    key=AssetKey("raw_conversation_events"),
    description="Append-only worlds, conversations and messages, written by `memory-pipeline ingest` "
    "and `import-locomo` (never by a run).",
    group_name="events",
    tags={"memory_pipeline/store": ""},
)

defs = Definitions(assets=[raw_conversation_events])
