"""Seed 003 day order: a stage's state record names the model and prompt version it ran with (a
record made with another one is not reused), and `remember` rows carry the CST day they were made
on (a day's sleep sees only what existed at its end).

Rows written before this revision: records keep a null model and prompt version (so they are redone
when next asked, like a record of another model); a `remember` row without a day gets the CST day
(MEMORY_TIMEZONE) of its created_at.

Revision ID: 0022_sleep_as_of_day
Revises: 0021_objects_core_history
"""

from zoneinfo import ZoneInfo

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib import settings
from memory_pipeline.lib.store.tables import UTCDateTime

revision = "0022_sleep_as_of_day"
down_revision = "0021_objects_core_history"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Read before any DDL: on SQLite each ALTER commits by itself, so a bad MEMORY_TIMEZONE raised
    # after them left the columns added and the revision unstamped (every later start: "duplicate
    # column name").
    tz = ZoneInfo(settings.timezone_name())
    with op.batch_alter_table("sleep_runs") as batch:
        batch.add_column(sa.Column("model", sa.String(length=256), nullable=True))
        batch.add_column(sa.Column("prompt_version", sa.String(length=64), nullable=True))
    memories = sa.table(
        "semantic_memories",
        sa.column("memory_id", sa.String()),
        sa.column("created_at", UTCDateTime()),
        sa.column("created_day", sa.Date()),
    )
    conn = op.get_bind()
    rows = conn.execute(sa.select(memories.c.memory_id, memories.c.created_at).where(memories.c.created_day.is_(None)))
    days = [{"m": mid, "d": at.astimezone(tz).date()} for mid, at in rows]
    if days:
        conn.execute(
            memories.update().where(memories.c.memory_id == sa.bindparam("m")).values(created_day=sa.bindparam("d")),
            days,
        )


def downgrade() -> None:
    with op.batch_alter_table("sleep_runs") as batch:
        batch.drop_column("prompt_version")
        batch.drop_column("model")
