"""Recall on SQLite: one FTS5 index per world (``search.fts_table``) instead of one for every world.

FTS5's bm25() takes its corpus statistics (how many documents, their average length, how many hold
each query term) from its whole table: with every world in one table, a world's scores and even its
order moved when another world wrote memory, and a token holder could read how common a word was in
other worlds off its own scores. The trigger-fed index of every world goes; each world's documents
are indexed into its own table by the search that next brings them up to date (the documents are
derived, so they are emptied here and rebuilt, as in 0028). PostgreSQL's ts_rank scores a document
by itself: nothing changes there.

Revision ID: 0032_recall_fts_per_world
Revises: 0031_tower_entry_id_per_group
"""

from alembic import op

from memory_pipeline.recall.tables import FTS_TABLE

revision = "0032_recall_fts_per_world"
down_revision = "0031_tower_entry_id_per_group"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for suffix in ("ai", "ad", "au"):
        op.execute(f"DROP TRIGGER IF EXISTS {FTS_TABLE}_{suffix}")
    op.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")
    op.execute("DELETE FROM recall_documents")
    op.execute("DELETE FROM recall_index_state")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    bind = op.get_bind()
    per_world = bind.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%' AND name LIKE ?",
        (f"{FTS_TABLE}_%",),
    ).scalars()
    for name in list(per_world):
        op.execute(f"DROP TABLE IF EXISTS {name}")
    op.execute("DELETE FROM recall_documents")
    op.execute("DELETE FROM recall_index_state")
    op.execute(
        f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(search_text, content='recall_documents', "
        "content_rowid='doc_id', tokenize='porter unicode61')"
    )
    op.execute(
        f"CREATE TRIGGER {FTS_TABLE}_ai AFTER INSERT ON recall_documents BEGIN "
        f"INSERT INTO {FTS_TABLE}(rowid, search_text) VALUES (new.doc_id, new.search_text); END"
    )
    op.execute(
        f"CREATE TRIGGER {FTS_TABLE}_ad AFTER DELETE ON recall_documents BEGIN "
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, search_text) VALUES ('delete', old.doc_id, old.search_text); END"
    )
    op.execute(
        f"CREATE TRIGGER {FTS_TABLE}_au AFTER UPDATE ON recall_documents BEGIN "
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, search_text) VALUES ('delete', old.doc_id, old.search_text); "
        f"INSERT INTO {FTS_TABLE}(rowid, search_text) VALUES (new.doc_id, new.search_text); END"
    )
