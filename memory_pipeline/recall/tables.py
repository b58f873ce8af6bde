"""Recall tables: one row per `eval` run (what was measured, with which model, what it cost) and one
per (run, index) with its R@1, R@5 and characters per day. Analysts follow them across models and
prompt versions in the DuckDB export (``mart_recall_quality``)."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from memory_pipeline.lib.store.tables import ID, UTCDateTime, metadata, now_utc

recall_eval_runs = Table(
    "recall_eval_runs",
    metadata,
    Column("run_id", String(32), primary_key=True),
    Column("dataset", String(32), nullable=False),  # locomo
    Column("files", JSON, nullable=False),  # file names measured
    Column("model", String(256), nullable=False),
    Column("prompt_versions", JSON, nullable=False),  # task -> prompt version, from the ledger
    Column("store", Text, nullable=False),  # where the run's memory was built (password masked)
    Column("worlds", Integer, nullable=False),
    Column("days", Integer, nullable=False),  # candidate days over every world
    Column("questions", Integer, nullable=False),  # questions measured
    Column("questions_left_out", JSON, nullable=False),  # reason -> count
    Column("llm_calls", Integer, nullable=False),
    Column("tokens_in", Integer, nullable=False),
    Column("tokens_out", Integer, nullable=False),
    Column("cost_usd", Float),  # null: the model has no known price
    Column("wall_seconds", Float, nullable=False),
    Column("failed_runs", JSON, nullable=False),  # Dagster runs that failed (their memory is missing)
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=False, default=now_utc),
)

recall_eval_results = Table(
    "recall_eval_results",
    metadata,
    Column("run_id", String(32), ForeignKey("recall_eval_runs.run_id"), primary_key=True),
    Column("index_name", String(64), primary_key=True),  # metric.Index
    Column("questions", Integer, nullable=False),
    Column("r_at_1", Float, nullable=False),
    Column("r_at_5", Float, nullable=False),
    Column("chars_per_day", Float),  # null for the random ranking
)

# What `memory_search` ranks: every domain's memory of each world as one document (recall.documents),
# kept up to date by comparing each world's sources with ``recall_index_state``. Full-text indexed by
# the store's engine: an FTS5 table per world over ``search_text`` on SQLite, a GIN index of its
# tsvector on PostgreSQL (migrations 0024, 0032).
recall_documents = Table(
    "recall_documents",
    metadata,
    Column("doc_id", Integer, primary_key=True, autoincrement=True),  # the FTS5 rowid on SQLite
    Column("world_id", ID, nullable=False),
    Column("kind", String(32), nullable=False),  # documents.MemoryKind
    Column("ref", String(128), nullable=False),
    Column("text", Text, nullable=False),
    Column("search_text", Text, nullable=False),  # text as the tokenizer should see it (CJK spaced)
    Column("start_at", UTCDateTime),
    Column("end_at", UTCDateTime),
    Column("event_ids", JSON, nullable=False),
    Column("fingerprint", String(32), nullable=False),
    Column("indexed_at", UTCDateTime, nullable=False, default=now_utc),
    UniqueConstraint("world_id", "kind", "ref", name="uq_recall_documents_ref"),
    Index("ix_recall_documents_world", "world_id"),
)

# SQLite only: the prefix of each world's FTS5 index of search_text (and of its shadow tables);
# search.fts_table names one world's (migration 0032).
FTS_TABLE = "recall_documents_fts"

# Per world: the fingerprint of its sources when its documents were last brought up to date.
recall_index_state = Table(
    "recall_index_state",
    metadata,
    Column("world_id", ID, primary_key=True),
    Column("sources_fp", String(32), nullable=False),
    Column("documents", Integer, nullable=False),
    Column("indexed_at", UTCDateTime, nullable=False, default=now_utc),
    # SQLite: the first rowid of the world's documents (search.DOC_SPAN of them; migration 0028)
    Column("doc_base", BigInteger),
)
