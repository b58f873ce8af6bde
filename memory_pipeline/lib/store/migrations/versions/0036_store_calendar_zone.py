"""Platform: the store records the calendar zone (MEMORY_TIMEZONE) its days are cut in, at its first
open after this revision, and every later open under another zone is refused (lib.store.calendar):
a store's day, week and month rows and its partitions were silently cut in two calendars when the
variable changed. A store upgraded here records the zone of the first process that opens it.

Revision ID: 0036_store_calendar_zone
Revises: 0035_tower_type_owner
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0036_store_calendar_zone"
down_revision = "0035_tower_type_owner"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "store_settings",
        sa.Column("name", sa.String(length=64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("recorded_at", tables.UTCDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("store_settings")
