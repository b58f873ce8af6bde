"""Raw-events domain: one row per ingested file.

Revision ID: 0002_events
Revises: 0001_platform
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0002_events"
down_revision = "0001_platform"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ingest_batches",
        sa.Column("batch_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("source", sa.String(length=1024), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("inserted", sa.Integer(), nullable=False),
        sa.Column("duplicates", sa.Integer(), nullable=False),
        sa.Column("rejected", sa.Integer(), nullable=False),
        sa.Column("at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("batch_id"),
    )


def downgrade() -> None:
    op.drop_table("ingest_batches")
