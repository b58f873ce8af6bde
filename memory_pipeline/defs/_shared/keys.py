"""Asset keys one domain's defs refer to in another's: a dependency is declared by key, so no
``defs/<domain>`` module imports another domain's (the graph is joined in ``definitions.py``;
a test checks every key named here is an asset of the code location)."""

from dagster import AssetKey

# The events domain's source asset: every consolidated form of memory depends on the raw events.
RAW_EVENTS = AssetKey("raw_conversation_events")
