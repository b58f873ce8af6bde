"""Recall: `eval` runs and their results per index.

Revision ID: 0023_recall_eval
Revises: 0022_sleep_as_of_day
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store.tables import UTCDateTime

revision = "0023_recall_eval"
down_revision = "0022_sleep_as_of_day"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "recall_eval_runs",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("dataset", sa.String(length=32), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("prompt_versions", sa.JSON(), nullable=False),
        sa.Column("store", sa.Text(), nullable=False),
        sa.Column("worlds", sa.Integer(), nullable=False),
        sa.Column("days", sa.Integer(), nullable=False),
        sa.Column("questions", sa.Integer(), nullable=False),
        sa.Column("questions_left_out", sa.JSON(), nullable=False),
        sa.Column("llm_calls", sa.Integer(), nullable=False),
        sa.Column("tokens_in", sa.Integer(), nullable=False),
        sa.Column("tokens_out", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("wall_seconds", sa.Float(), nullable=False),
        sa.Column("failed_runs", sa.JSON(), nullable=False),
        sa.Column("started_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_table(
        "recall_eval_results",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("index_name", sa.String(length=64), nullable=False),
        sa.Column("questions", sa.Integer(), nullable=False),
        sa.Column("r_at_1", sa.Float(), nullable=False),
        sa.Column("r_at_5", sa.Float(), nullable=False),
        sa.Column("chars_per_day", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["recall_eval_runs.run_id"]),
        sa.PrimaryKeyConstraint("run_id", "index_name"),
    )


def downgrade() -> None:
    op.drop_table("recall_eval_results")
    op.drop_table("recall_eval_runs")
