"""Long-term memory consolidation for LLM agents as a Dagster asset graph."""
