"""Seed 000: conversation day chunks, per-world day/month/year rows, peer-roll warm-ups.

Revision ID: 0003_temporal
Revises: 0002_events
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0003_temporal"
down_revision = "0002_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "warmup_requests",
        sa.Column("request_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("cst_date", sa.Date(), nullable=False),
        sa.Column("bucket", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("viewer_conversation_id", sa.String(length=128), nullable=False),
        sa.Column("sources_fp", sa.String(length=32), nullable=False),
        sa.Column("requested_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("done_at", tables.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("request_id"),
        sa.UniqueConstraint("kind", "world_id", "bucket", "sources_fp", name="uq_warmup_key"),
    )
    op.create_table(
        "temporal_summaries",
        sa.Column("summary_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("window", sa.String(length=8), nullable=False),
        sa.Column("period_start", sa.Date(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("empty_reason", sa.String(length=32), nullable=True),
        sa.Column("source_count", sa.Integer(), nullable=False),
        sa.Column("source_kind", sa.String(length=16), nullable=False),
        sa.Column("source_ids", sa.JSON(), nullable=False),
        sa.Column("material_fp", sa.String(length=64), nullable=True),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("prompt_version", sa.String(length=64), nullable=True),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["world_id"],
            ["worlds.world_id"],
        ),
        sa.PrimaryKeyConstraint("summary_id"),
        sa.UniqueConstraint("world_id", "window", "period_start", name="uq_temporal_world_window_period"),
    )
    op.create_index("ix_temporal_window_period", "temporal_summaries", ["window", "period_start"], unique=False)
    op.create_table(
        "temporal_day_chunks",
        sa.Column("chunk_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=128), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("cst_date", sa.Date(), nullable=False),
        sa.Column("bucket", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("watermark_message_id", sa.String(length=128), nullable=False),
        sa.Column("watermark_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("source_ids", sa.JSON(), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.conversation_id"],
        ),
        sa.PrimaryKeyConstraint("chunk_id"),
        sa.UniqueConstraint("conversation_id", "cst_date", "bucket", name="uq_chunk_conversation_bucket"),
    )
    op.create_index("ix_chunks_world_date", "temporal_day_chunks", ["world_id", "cst_date"], unique=False)


def downgrade() -> None:
    op.drop_table("temporal_day_chunks")
    op.drop_table("temporal_summaries")
    op.drop_table("warmup_requests")
