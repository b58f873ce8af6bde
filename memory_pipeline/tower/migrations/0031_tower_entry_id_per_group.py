"""Seed 004 (time tower): an entry id is idempotent within its group, not across the type. With ids
unique per type, a world appending an id another world had stored was refused, and the refusal said
whether its content matched the stored one: a token of one world could test guesses of another
world's entries. Each group's ids are now its own (unique on type, group, id); existing rows, unique
per type, stay as they are.

Revision ID: 0031_tower_entry_id_per_group
Revises: 0030_sleep_runs_day_stage
"""

from alembic import op

revision = "0031_tower_entry_id_per_group"
down_revision = "0030_sleep_runs_day_stage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # On SQLite the batch copies the table (a constraint cannot be dropped in place), indexes kept.
    with op.batch_alter_table("tower_entries") as batch:
        batch.drop_constraint("uq_tower_entry_id", type_="unique")
        batch.create_unique_constraint("uq_tower_entry_group_id", ["type_name", "group_value", "entry_id"])


def downgrade() -> None:
    # Fails if two groups of a type now share an id: that history cannot be narrowed back.
    with op.batch_alter_table("tower_entries") as batch:
        batch.drop_constraint("uq_tower_entry_group_id", type_="unique")
        batch.create_unique_constraint("uq_tower_entry_id", ["type_name", "entry_id"])
