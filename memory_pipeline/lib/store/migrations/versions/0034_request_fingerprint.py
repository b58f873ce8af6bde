"""Platform: a request id records a fingerprint of its request's arguments, so a repeated id with
other arguments is refused (naming the id) instead of answering the first request's result while
the new content is silently dropped. Ids recorded before have none and replay as before.

Revision ID: 0034_request_fingerprint
Revises: 0033_objects_queue_index
"""

import sqlalchemy as sa
from alembic import op

revision = "0034_request_fingerprint"
down_revision = "0033_objects_queue_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("request_ids") as batch:
        batch.add_column(sa.Column("fingerprint", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("request_ids") as batch:
        batch.drop_column("fingerprint")
