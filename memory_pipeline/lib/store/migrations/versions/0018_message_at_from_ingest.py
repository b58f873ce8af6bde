"""Platform: a message whose line gave no timestamp keeps the time of its ingest as ``at`` and says
so (``at_from_ingest``); rows written before this revision all had a timestamp (null: from the line).

Revision ID: 0018_message_at_from_ingest
Revises: 0017_ledger_tokens_source
"""

import sqlalchemy as sa
from alembic import op

revision = "0018_message_at_from_ingest"
down_revision = "0017_ledger_tokens_source"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("at_from_ingest", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("at_from_ingest")
