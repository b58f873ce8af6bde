"""Seed 001 (object memory): hot timeline, event states, objects, versions, relations,
attachments, core documents, jobs, failures, receipts and the Markdown projection state.

Revision ID: 0012_objects
Revises: 0010_conversation
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0012_objects"
down_revision = "0010_conversation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "objects_attachments",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("object_id", sa.String(length=128), nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "object_id", "event_id"),
    )
    op.create_index("ix_objects_attachments_event", "objects_attachments", ["event_id"], unique=False)
    op.create_table(
        "objects_core",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("updated_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "name"),
    )
    op.create_table(
        "objects_event_state",
        sa.Column("event_id", sa.String(length=128), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("occurred_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("event_day", sa.Date(), nullable=False),
        sa.Column("chars", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("page_cursor", sa.Integer(), nullable=False),
        sa.Column("progress", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("queued_at", tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("explicit", sa.Boolean(), nullable=False),
        sa.Column("finished_at", tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("updated_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("event_id"),
    )
    op.create_index("ix_objects_event_state_day", "objects_event_state", ["event_day", "state"], unique=False)
    op.create_index(
        "ix_objects_event_state_world_state", "objects_event_state", ["world_id", "state", "occurred_at"], unique=False
    )
    op.create_table(
        "objects_failures",
        sa.Column("failure_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("batch", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("failure_id"),
    )
    op.create_table(
        "objects_hot_nodes",
        sa.Column("node_id", sa.String(length=160), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=True),
        sa.Column("slice_index", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("est_tokens", sa.Integer(), nullable=False),
        sa.Column("first_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("last_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("parent_id", sa.String(length=160), nullable=True),
        sa.Column("children", sa.JSON(), nullable=True),
        sa.Column("receipt_token", sa.String(length=128), nullable=True),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("node_id"),
    )
    op.create_index("ix_objects_hot_nodes_event", "objects_hot_nodes", ["event_id"], unique=False)
    op.create_index(
        "ix_objects_hot_nodes_world_active_seq", "objects_hot_nodes", ["world_id", "active", "seq"], unique=False
    )
    op.create_table(
        "objects_jobs",
        sa.Column("job_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("retry_blocked", sa.Boolean(), nullable=False),
        sa.Column("request_token", sa.String(length=128), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("last_claimed_at", tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("not_before", tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("claims", sa.Integer(), nullable=False),
        sa.Column("batches_done", sa.Integer(), nullable=False),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("range_end_seq", sa.Integer(), nullable=True),
        sa.Column("inventory", sa.JSON(), nullable=True),
        sa.Column("inventory_pos", sa.Integer(), nullable=False),
        sa.Column("local_date", sa.Date(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("finished_at", tables.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("job_id"),
        sa.UniqueConstraint("request_token"),
    )
    op.create_index("ix_objects_jobs_world_status", "objects_jobs", ["world_id", "status"], unique=False)
    op.create_table(
        "objects_objects",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("object_id", sa.String(length=128), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("aliases", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("cues", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("purpose", sa.Text(), nullable=True),
        sa.Column("reference", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "object_id"),
    )
    op.create_index("ix_objects_objects_world_type", "objects_objects", ["world_id", "type"], unique=False)
    op.create_table(
        "objects_projection",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("object_id", sa.String(length=128), nullable=False),
        sa.Column("path", sa.String(length=256), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("projected_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("world_id", "object_id"),
    )
    op.create_table(
        "objects_receipts",
        sa.Column("token", sa.String(length=128), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=True),
        sa.Column("event_day", sa.Date(), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("token"),
    )
    op.create_index("ix_objects_receipts_day", "objects_receipts", ["event_day"], unique=False)
    op.create_table(
        "objects_relations",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("src", sa.String(length=128), nullable=False),
        sa.Column("label", sa.String(length=256), nullable=False),
        sa.Column("dst", sa.String(length=128), nullable=False),
        sa.Column("legacy", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "src", "label", "dst"),
    )
    op.create_index("ix_objects_relations_dst", "objects_relations", ["world_id", "dst"], unique=False)
    op.create_table(
        "objects_versions",
        sa.Column("version_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("object_id", sa.String(length=128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=False),
        sa.Column("receipt_token", sa.String(length=128), nullable=True),
        sa.Column("at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("version_id"),
        sa.UniqueConstraint("world_id", "object_id", "version", name="uq_objects_versions"),
    )
    op.create_table(
        "objects_worlds",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("graph_revision", sa.Integer(), nullable=False),
        sa.Column("busy", sa.Boolean(), nullable=False),
        sa.Column("stopped", sa.Boolean(), nullable=False),
        sa.Column("auto_suppressed_until", tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("worker_error", sa.Text(), nullable=True),
        sa.Column("worker_error_at", tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_deep_date", sa.Date(), nullable=True),
        sa.Column("next_seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("world_id"),
    )


def downgrade() -> None:
    op.drop_table("objects_worlds")
    op.drop_table("objects_versions")
    op.drop_index("ix_objects_relations_dst", table_name="objects_relations")
    op.drop_table("objects_relations")
    op.drop_index("ix_objects_receipts_day", table_name="objects_receipts")
    op.drop_table("objects_receipts")
    op.drop_table("objects_projection")
    op.drop_index("ix_objects_objects_world_type", table_name="objects_objects")
    op.drop_table("objects_objects")
    op.drop_index("ix_objects_jobs_world_status", table_name="objects_jobs")
    op.drop_table("objects_jobs")
    op.drop_index("ix_objects_hot_nodes_world_active_seq", table_name="objects_hot_nodes")
    op.drop_index("ix_objects_hot_nodes_event", table_name="objects_hot_nodes")
    op.drop_table("objects_hot_nodes")
    op.drop_table("objects_failures")
    op.drop_index("ix_objects_event_state_world_state", table_name="objects_event_state")
    op.drop_index("ix_objects_event_state_day", table_name="objects_event_state")
    op.drop_table("objects_event_state")
    op.drop_table("objects_core")
    op.drop_index("ix_objects_attachments_event", table_name="objects_attachments")
    op.drop_table("objects_attachments")
