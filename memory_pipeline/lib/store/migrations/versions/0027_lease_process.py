"""Platform: a partition lease records the process holding it (host and pid), so a run on the
same host can tell a holder that died (kill -9) from one that is working, and take over at once.

Revision ID: 0027_lease_process
Revises: 0026_request_ids
"""

import sqlalchemy as sa
from alembic import op

revision = "0027_lease_process"
down_revision = "0026_request_ids"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("partition_leases") as batch:
        batch.add_column(sa.Column("host", sa.String(length=256), nullable=True))
        batch.add_column(sa.Column("pid", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("partition_leases") as batch:
        batch.drop_column("pid")
        batch.drop_column("host")
