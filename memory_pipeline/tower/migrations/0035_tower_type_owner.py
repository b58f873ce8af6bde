"""Seed 004 (time tower): a type created through the server by a token of some worlds is theirs. Before,
any world's token could change or archive a type another world had created and not yet written to,
and learned from which refusal came back whether another world had written to it. The creating
token's worlds are kept (``owner_worlds``); a type with none (created by an --all-worlds token, the
command line or the Python API, built in, or made before this revision) is the operator's.

Revision ID: 0035_tower_type_owner
Revises: 0034_request_fingerprint
"""

import sqlalchemy as sa
from alembic import op

revision = "0035_tower_type_owner"
down_revision = "0034_request_fingerprint"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tower_types", sa.Column("owner_worlds", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tower_types") as batch:
        batch.drop_column("owner_worlds")
