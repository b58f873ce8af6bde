"""Seed 002: the retry backoff of failing rolling summaries, and when a version was verified.

Revision ID: 0019_conversation_failures
Revises: 0018_message_at_from_ingest
"""

import sqlalchemy as sa
from alembic import op

import memory_pipeline.lib.store.tables

revision = "0019_conversation_failures"
down_revision = "0018_message_at_from_ingest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conversation_summary_backoff",
        sa.Column("conversation_id", sa.String(length=128), nullable=False),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("last_failure_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_id"),
    )
    op.add_column(
        "conversation_summaries",
        sa.Column("verified_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("conversation_summaries", "verified_at")
    op.drop_table("conversation_summary_backoff")
