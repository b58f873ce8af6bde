"""Seed 002 tables: each conversation's initialization status (the Step-0 gate), the versions of its
rolling summary (never overwritten), explicit triggers, the failure log and the retry backoff, and
the user-profile store the summary's preferences section draws on (most recent wins)."""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, Index, Integer, String, Table, Text

from memory_pipeline.lib.store.tables import ID, UTCDateTime, metadata, now_utc

# seed: MEMORY.md initialization_status (pending | phase1_done | phase2_done | done); missing = not done.
conversation_init_status = Table(
    "conversation_init_status",
    metadata,
    Column("conversation_id", ID, primary_key=True),
    Column("status", String(16), nullable=False),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
)

# session_summary.md, one row per version: a rolling update appends a version, never rewrites one.
conversation_summaries = Table(
    "conversation_summaries",
    metadata,
    Column("conversation_id", ID, primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("world_id", ID, nullable=False),
    Column("content", Text, nullable=False),
    Column("covered_start", Integer, nullable=False),  # L numbers of the history entries covered
    Column("covered_end", Integer, nullable=False),
    Column("last_updated", UTCDateTime, nullable=False),
    Column("verified", Boolean, nullable=False, default=False),
    Column("verified_at", UTCDateTime),  # when the user confirmed the check line (or wrote the correction)
    Column("check_line", Text),
    Column("trigger", String(32), nullable=False),  # entries | user_check | preference_override | correction
    Column("model", String(256)),
    Column("sections", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
)

# Explicit triggers: the user's memory check and a user-preference override; done when served.
conversation_summary_requests = Table(
    "conversation_summary_requests",
    metadata,
    Column("request_id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", ID, nullable=False),
    Column("trigger", String(32), nullable=False),
    Column("requested_at", UTCDateTime, nullable=False, default=now_utc),
    Column("done_at", UTCDateTime),
    Column("outcome", String(32)),
    Index("ix_summary_requests_open", "conversation_id", "done_at"),
)

# The failure log (seed: .life_sim_events.jsonl), append-only.
conversation_summary_failures = Table(
    "conversation_summary_failures",
    metadata,
    Column("failure_id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", ID, nullable=False),
    Column("at", UTCDateTime, nullable=False, default=now_utc),
    Column("trigger", String(32), nullable=False),
    Column("error", Text, nullable=False),
    Column("model", String(256)),
)

# Where a conversation stands after failures in a row: the next attempt backs off, and after
# memory.conversation.max_consecutive_failures it is held. A success or an operator's retry removes
# the row; the failure log above keeps every event.
conversation_summary_backoff = Table(
    "conversation_summary_backoff",
    metadata,
    Column("conversation_id", ID, primary_key=True),
    Column("consecutive_failures", Integer, nullable=False),
    Column("last_failure_at", UTCDateTime, nullable=False),
    Column("last_error", Text, nullable=False),
)

# The user-profile store (seed: user_profile.md): one value per (world, key), the newest wins.
user_profile_facts = Table(
    "user_profile_facts",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("key", String(128), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False, default=now_utc),
)
