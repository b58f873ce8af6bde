"""Access: the memory server's bearer tokens (hash only), their worlds and read-only flag.

Revision ID: 0025_access_tokens
Revises: 0024_recall_search
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store.tables import UTCDateTime

revision = "0025_access_tokens"
down_revision = "0024_recall_search"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "access_tokens",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("worlds", sa.JSON(), nullable=False),
        sa.Column("read_only", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name"),
        sa.UniqueConstraint("token_hash"),
    )


def downgrade() -> None:
    op.drop_table("access_tokens")
