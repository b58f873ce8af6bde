"""Seed 004 (time tower): an entry records whether its caller sent `at` (an idempotent retry that
leaves it out again is a duplicate, not a conflict); the retry ledger records that the semantic tick
owns a window's retries (failed sub-day windows are retried with backoff and given up, not dropped).

Revision ID: 0020_tower_guardrail
Revises: 0019_conversation_failures
"""

import sqlalchemy as sa
from alembic import op

revision = "0020_tower_guardrail"
down_revision = "0019_conversation_failures"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Entries stored before this revision count as sent with their `at`: a retry must give it again.
    with op.batch_alter_table("tower_entries") as batch:
        batch.add_column(sa.Column("at_given", sa.Boolean(), nullable=False, server_default=sa.true()))
    with op.batch_alter_table("tower_summary_attempts") as batch:
        batch.add_column(sa.Column("scheduled", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("tower_summary_attempts") as batch:
        batch.drop_column("scheduled")
    with op.batch_alter_table("tower_entries") as batch:
        batch.drop_column("at_given")
