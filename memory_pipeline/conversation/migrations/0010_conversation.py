"""Seed 002: conversation initialization status, rolling summary versions, requests, failure log, user profile.

Revision ID: 0010_conversation
Revises: 0010_sleep
"""

import sqlalchemy as sa
from alembic import op

import memory_pipeline.lib.store.tables

revision = "0010_conversation"
down_revision = "0010_sleep"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conversation_init_status",
        sa.Column("conversation_id", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("updated_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("conversation_id"),
    )
    op.create_table(
        "conversation_summaries",
        sa.Column("conversation_id", sa.String(length=128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("covered_start", sa.Integer(), nullable=False),
        sa.Column("covered_end", sa.Integer(), nullable=False),
        sa.Column("last_updated", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("verified", sa.Boolean(), nullable=False),
        sa.Column("check_line", sa.Text(), nullable=True),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("sections", sa.JSON(), nullable=False),
        sa.Column("created_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", "version"),
    )
    op.create_table(
        "conversation_summary_failures",
        sa.Column("failure_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=128), nullable=False),
        sa.Column("at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.PrimaryKeyConstraint("failure_id"),
    )
    op.create_table(
        "conversation_summary_requests",
        sa.Column("request_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=128), nullable=False),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("requested_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("done_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=True),
        sa.PrimaryKeyConstraint("request_id"),
    )
    op.create_table(
        "user_profile_facts",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "key"),
    )
    op.create_index(
        "ix_summary_requests_open", "conversation_summary_requests", ["conversation_id", "done_at"], unique=False
    )


def downgrade() -> None:
    op.drop_table("user_profile_facts")
    op.drop_table("conversation_summary_failures")
    op.drop_table("conversation_summary_requests")
    op.drop_table("conversation_summaries")
    op.drop_table("conversation_init_status")
