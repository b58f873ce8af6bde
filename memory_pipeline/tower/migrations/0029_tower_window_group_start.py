"""Seed 004 (time tower): exact recall walks a window's children by one range of starts in one
group; an index on (type, level, group, start) makes that a seek, whatever the number of groups
(the primary key's order, start before group, would scan every world's windows in the range).

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


def downgrade() -> None:
    op.drop_index("ix_tower_windows_group_start", table_name="tower_windows")
