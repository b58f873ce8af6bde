"""Seed 004 (time tower): exact recall of one group walks a window's children by one range of
starts, and counts the group's entries of the window as they are now: an index on windows' (type,
level, group, start) and one on entries' (type, group, at) make those seeks, whatever the number of
groups (the primary key's order, start before group, and entries' (type, at) would read every
world's rows in the range).

Revision ID: 0029_tower_window_group_start
Revises: 0028_recall_doc_base
"""

from alembic import op

revision = "0029_tower_window_group_start"
down_revision = "0028_recall_doc_base"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_tower_windows_group_start", "tower_windows", ["type_name", "granularity", "group_value", "start"]
    )
    op.create_index("ix_tower_entries_group_at", "tower_entries", ["type_name", "group_value", "at"])


def downgrade() -> None:
    op.drop_index("ix_tower_entries_group_at", table_name="tower_entries")
    op.drop_index("ix_tower_windows_group_start", table_name="tower_windows")
