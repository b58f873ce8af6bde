"""Recall: the documents `memory_search` ranks, with the store engine's full-text index (an FTS5
table kept in step by triggers on SQLite; a GIN index of the english tsvector on PostgreSQL).

Revision ID: 0024_recall_search
Revises: 0023_recall_eval
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store.tables import UTCDateTime

revision = "0024_recall_search"
down_revision = "0023_recall_eval"
branch_labels = None
depends_on = None

FTS = "recall_documents_fts"


def upgrade() -> None:
    op.create_table(
        "recall_documents",
        sa.Column("doc_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("ref", sa.String(length=128), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("start_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("end_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("event_ids", sa.JSON(), nullable=False),
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.Column("indexed_at", UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("doc_id"),
        sa.UniqueConstraint("world_id", "kind", "ref", name="uq_recall_documents_ref"),
    )
    op.create_index("ix_recall_documents_world", "recall_documents", ["world_id"])
    op.create_table(
        "recall_index_state",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("sources_fp", sa.String(length=32), nullable=False),
        sa.Column("documents", sa.Integer(), nullable=False),
        sa.Column("indexed_at", UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("world_id"),
    )
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            f"CREATE VIRTUAL TABLE {FTS} USING fts5(search_text, content='recall_documents', "
            "content_rowid='doc_id', tokenize='porter unicode61')"
        )
        op.execute(
            f"CREATE TRIGGER {FTS}_ai AFTER INSERT ON recall_documents BEGIN "
            f"INSERT INTO {FTS}(rowid, search_text) VALUES (new.doc_id, new.search_text); END"
        )
        op.execute(
            f"CREATE TRIGGER {FTS}_ad AFTER DELETE ON recall_documents BEGIN "
            f"INSERT INTO {FTS}({FTS}, rowid, search_text) VALUES ('delete', old.doc_id, old.search_text); END"
        )
        op.execute(
            f"CREATE TRIGGER {FTS}_au AFTER UPDATE ON recall_documents BEGIN "
            f"INSERT INTO {FTS}({FTS}, rowid, search_text) VALUES ('delete', old.doc_id, old.search_text); "
            f"INSERT INTO {FTS}(rowid, search_text) VALUES (new.doc_id, new.search_text); END"
        )
    else:
        op.execute(
            "CREATE INDEX ix_recall_documents_tsv ON recall_documents "
            "USING gin (to_tsvector('english'::regconfig, search_text))"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for suffix in ("ai", "ad", "au"):
            op.execute(f"DROP TRIGGER IF EXISTS {FTS}_{suffix}")
        op.execute(f"DROP TABLE IF EXISTS {FTS}")
    else:
        op.execute("DROP INDEX IF EXISTS ix_recall_documents_tsv")
    op.drop_index("ix_recall_documents_world", table_name="recall_documents")
    op.drop_table("recall_index_state")
    op.drop_table("recall_documents")
