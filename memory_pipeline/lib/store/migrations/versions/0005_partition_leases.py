"""Platform: partition leases, so that two runs never work on the same (asset, partition) at once.

The history is one line across the platform's and the domains' folders: this platform revision
follows the newest one before it, whichever folder that lives in.

Revision ID: 0005_partition_leases
Revises: 0004_chunk_seq_period_runs
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0005_partition_leases"
down_revision = "0004_chunk_seq_period_runs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "partition_leases",
        sa.Column("asset", sa.String(length=256), nullable=False),
        sa.Column("partition", sa.String(length=256), nullable=False),
        sa.Column("holder", sa.String(length=256), nullable=False),
        sa.Column("acquired_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("asset", "partition"),
    )


def downgrade() -> None:
    op.drop_table("partition_leases")
