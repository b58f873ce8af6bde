"""Seed 001: core documents keep every version (who wrote it, the graph revision, when); the
Markdown projection records its pages and what its last check found on disk; a compacted raw
hot-timeline slice keeps only its reference to the raw event, not a second copy of its text.

Existing core documents become version 1 of their history, written by ``unknown`` (before history
was kept). The text of raw slices already compacted is cleared: it is in the raw table.

Revision ID: 0021_objects_core_history
Revises: 0020_tower_guardrail
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0021_objects_core_history"
down_revision = "0020_tower_guardrail"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("objects_core") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("written_by", sa.String(length=16), nullable=False, server_default="unknown"))
    op.create_table(
        "objects_core_versions",
        sa.Column("version_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("written_by", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("receipt_token", sa.String(length=128), nullable=True),
        sa.Column("at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("version_id"),
        sa.UniqueConstraint("world_id", "name", "version", name="uq_objects_core_versions"),
    )
    op.execute(
        "INSERT INTO objects_core_versions (world_id, name, version, revision, written_by, content, at)"
        " SELECT world_id, name, version, revision, written_by, content, updated_at FROM objects_core"
    )
    with op.batch_alter_table("objects_projection") as batch:
        batch.add_column(sa.Column("pages", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("drift", sa.String(length=16), nullable=True))
    op.execute(
        sa.text("UPDATE objects_hot_nodes SET text = '' WHERE level = 0 AND active = :inactive").bindparams(
            inactive=False
        )
    )


def downgrade() -> None:
    # Cleared slice texts are not restored: they are in the raw table (messages).
    with op.batch_alter_table("objects_projection") as batch:
        batch.drop_column("drift")
        batch.drop_column("pages")
    op.drop_table("objects_core_versions")
    with op.batch_alter_table("objects_core") as batch:
        batch.drop_column("written_by")
        batch.drop_column("version")
