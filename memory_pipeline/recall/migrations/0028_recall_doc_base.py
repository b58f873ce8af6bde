"""Recall: on SQLite each world's documents take rowids from a range of their own
(``recall_index_state.doc_base``), so the full-text index seeks the caller's world.

The documents are derived (every domain's memory, re-read at each world's next search), so on
SQLite they are emptied here, the FTS5 index through its triggers, and each world is rebuilt in its
range at its next search. PostgreSQL keeps its documents: the column stays empty there.

Revision ID: 0028_recall_doc_base
Revises: 0027_lease_process
"""

import sqlalchemy as sa
from alembic import op

revision = "0028_recall_doc_base"
down_revision = "0027_lease_process"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("recall_index_state") as batch:
        batch.add_column(sa.Column("doc_base", sa.BigInteger(), nullable=True))
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DELETE FROM recall_documents")
        op.execute("DELETE FROM recall_index_state")


def downgrade() -> None:
    with op.batch_alter_table("recall_index_state") as batch:
        batch.drop_column("doc_base")
