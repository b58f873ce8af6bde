"""Seed 000: the period record carries the model, prompt version and settings the rows were built
with, so a run can tell from the record alone that nothing changed (incremental by default).

Revision ID: 0007_period_run_settings
Revises: 0006_pending_cache_writes
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_period_run_settings"
down_revision = "0006_pending_cache_writes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("temporal_period_runs") as batch:
        batch.add_column(sa.Column("model", sa.String(length=256), nullable=True))
        batch.add_column(sa.Column("prompt_version", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("config_fp", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("temporal_period_runs") as batch:
        batch.drop_column("config_fp")
        batch.drop_column("prompt_version")
        batch.drop_column("model")
