"""Seed 003 rebuild: the day whose autobiography run deprecated a narrative (a rebuild of that day undoes it).

Revision ID: 0016_sleep_rebuild
Revises: 0012_objects
"""

import sqlalchemy as sa
from alembic import op

revision = "0016_sleep_rebuild"
down_revision = "0012_objects"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("autobiographical_memories", sa.Column("deprecated_day", sa.Date(), nullable=True))


def downgrade() -> None:
    op.drop_column("autobiographical_memories", "deprecated_day")
