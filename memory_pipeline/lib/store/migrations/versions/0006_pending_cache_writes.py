"""Platform: the write-behind of the key-value cache (writes Redis could not take while it was
unreachable, written through when it is back).

Revision ID: 0006_pending_cache_writes
Revises: 0005_partition_leases
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0006_pending_cache_writes"
down_revision = "0005_partition_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pending_cache_writes",
        sa.Column("key", sa.String(length=1024), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("ttl_seconds", sa.Integer(), nullable=False),
        sa.Column("expires_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.String(length=512), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_index("ix_pending_cache_writes_created_at", "pending_cache_writes", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_pending_cache_writes_created_at", table_name="pending_cache_writes")
    op.drop_table("pending_cache_writes")
