"""Seed 001: an event's attachments are looked up by (event, world), the objects in the index.

Each organize claim reads the objects its event is attached to in its world. With an index on the
event alone, SQLite always, and PostgreSQL before the table had statistics (a new store's first
backlog), answered it from the primary key (world, object, event), which holds the objects: every
attachment of the world read, so a claim's cost grew with each event organized (over 4,000 events
of one world on PostgreSQL, 0.5 ms to 3.9 ms a claim; over 3,000 on SQLite, 0.3 to 2.2 ms). This index leads with both of the lookup's conditions and holds its
answer too, so no other index can answer it for less.

Revision ID: 0037_objects_attachment_lookup
Revises: 0036_store_calendar_zone
"""

from alembic import op

revision = "0037_objects_attachment_lookup"
down_revision = "0036_store_calendar_zone"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_objects_attachments_event_world", "objects_attachments", ["event_id", "world_id", "object_id"])
    op.drop_index("ix_objects_attachments_event", table_name="objects_attachments")


def downgrade() -> None:
    op.create_index("ix_objects_attachments_event", "objects_attachments", ["event_id"])
    op.drop_index("ix_objects_attachments_event_world", table_name="objects_attachments")
