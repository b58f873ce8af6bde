"""Platform: caller-given request ids of repeatable writes, with each write's first result.

Revision ID: 0026_request_ids
Revises: 0025_access_tokens
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0026_request_ids"
down_revision = "0025_access_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "request_ids",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("request_id", sa.String(length=128), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "kind", "request_id"),
    )


def downgrade() -> None:
    op.drop_table("request_ids")
