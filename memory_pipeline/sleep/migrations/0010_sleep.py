"""Seed 003: semantic memory and its versions, self blocks, pinned facts, autobiographical memory, snapshots, stage state records.

Revision ID: 0010_sleep
Revises: 0009_tower
"""

import sqlalchemy as sa
from alembic import op

import memory_pipeline.lib.store.tables

revision = "0010_sleep"
down_revision = "0009_tower"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "autobiographical_memories",
        sa.Column("memory_id", sa.String(length=32), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("narrative", sa.Text(), nullable=False),
        sa.Column("significance", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("period", sa.String(length=32), nullable=True),
        sa.Column("source_memory_ids", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_day", sa.Date(), nullable=False),
        sa.Column("created_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("memory_id"),
    )
    op.create_table(
        "pinned_facts",
        sa.Column("fact_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("created_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("fact_id"),
        sa.UniqueConstraint("world_id", "content", name="uq_pinned_world_content"),
    )
    op.create_table(
        "self_blocks",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.Column("updated_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "name"),
    )
    op.create_table(
        "semantic_memories",
        sa.Column("memory_id", sa.String(length=32), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("source_sessions", sa.JSON(), nullable=False),
        sa.Column("observed_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("merged_into", sa.String(length=32), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_by", sa.String(length=32), nullable=False),
        sa.Column("created_day", sa.Date(), nullable=True),
        sa.Column("created_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("memory_id"),
    )
    op.create_table(
        "semantic_memory_snapshots",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("memory_id", sa.String(length=32), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("source_sessions", sa.JSON(), nullable=False),
        sa.Column("observed_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("day", "world_id", "memory_id"),
    )
    op.create_table(
        "semantic_memory_versions",
        sa.Column("version_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("memory_id", sa.String(length=32), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("source_sessions", sa.JSON(), nullable=False),
        sa.Column("observed_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("merged_into", sa.String(length=32), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column("day", sa.Date(), nullable=True),
        sa.Column("round", sa.String(length=16), nullable=True),
        sa.Column("at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("version_id"),
    )
    op.create_table(
        "sleep_runs",
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("input_fp", sa.String(length=64), nullable=True),
        sa.Column("sessions", sa.Integer(), nullable=False),
        sa.Column("sessions_truncated", sa.Integer(), nullable=False),
        sa.Column("input_chars", sa.Integer(), nullable=False),
        sa.Column("llm_calls", sa.Integer(), nullable=False),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("applied", sa.Integer(), nullable=False),
        sa.Column("rejected", sa.Integer(), nullable=False),
        sa.Column("created", sa.Integer(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("finished_at", memory_pipeline.lib.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("stage", "day", "world_id"),
    )
    op.create_index(
        "ix_autobiographical_world_status", "autobiographical_memories", ["world_id", "status"], unique=False
    )
    op.create_index("ix_semantic_world_status", "semantic_memories", ["world_id", "status"], unique=False)
    op.create_index("ix_semantic_versions_memory", "semantic_memory_versions", ["memory_id", "version"], unique=False)
    op.create_index("ix_semantic_versions_world_day", "semantic_memory_versions", ["world_id", "day"], unique=False)


def downgrade() -> None:
    op.drop_table("sleep_runs")
    op.drop_table("semantic_memory_snapshots")
    op.drop_table("autobiographical_memories")
    op.drop_table("pinned_facts")
    op.drop_table("self_blocks")
    op.drop_table("semantic_memory_versions")
    op.drop_table("semantic_memories")
