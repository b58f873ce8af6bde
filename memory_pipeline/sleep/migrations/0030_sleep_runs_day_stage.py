"""Seed 003 day order: every stage run asks which records after its place are done (a rebuild's
restore, the later places it makes stale). That question is by day, and `sleep_runs`' key leads
with stage, so each run read the whole table, which grows by a row per world, stage and night. An
index on (day, stage) makes it a seek over the days after the place.

Revision ID: 0030_sleep_runs_day_stage
Revises: 0029_tower_window_group_start
"""

from alembic import op

revision = "0030_sleep_runs_day_stage"
down_revision = "0029_tower_window_group_start"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_sleep_runs_day_stage", "sleep_runs", ["day", "stage"])


def downgrade() -> None:
    op.drop_index("ix_sleep_runs_day_stage", table_name="sleep_runs")
