"""Seed 001: the organize queue gets an index in claim order holding only queued events.

A claim picks a world's next event (explicit requests first, then by occurrence). The only index
was (world, state, occurred_at): each claim read and sorted every queued event of the world, so a
backlog of n events cost n² to drain. The partial index below is read from its first entry.

Revision ID: 0033_objects_queue_index
Revises: 0032_recall_fts_per_world
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.objects.tables import QUEUE_PREDICATE

revision = "0033_objects_queue_index"
down_revision = "0032_recall_fts_per_world"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_objects_event_state_queue",
        "objects_event_state",
        ["world_id", sa.text("explicit DESC"), "occurred_at", "event_id"],
        postgresql_where=sa.text(QUEUE_PREDICATE),
        sqlite_where=sa.text(QUEUE_PREDICATE),
    )


def downgrade() -> None:
    op.drop_index("ix_objects_event_state_queue", table_name="objects_event_state")
