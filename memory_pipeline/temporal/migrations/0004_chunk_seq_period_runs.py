"""Seed 000: late messages append further chunks to a bucket (seq); the record of each period's
materialization for the late-data reconcile.

Revision ID: 0004_chunk_seq_period_runs
Revises: 0003_temporal
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0004_chunk_seq_period_runs"
down_revision = "0003_temporal"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("temporal_day_chunks") as batch:
        batch.add_column(sa.Column("seq", sa.Integer(), nullable=False, server_default="0"))
        batch.drop_constraint("uq_chunk_conversation_bucket", type_="unique")
        batch.create_unique_constraint(
            "uq_chunk_conversation_bucket_seq", ["conversation_id", "cst_date", "bucket", "seq"]
        )
    op.create_table(
        "temporal_period_runs",
        sa.Column("window", sa.String(length=8), nullable=False),
        sa.Column("period_start", sa.Date(), nullable=False),
        sa.Column("materialized_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("material_ingested_at", tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("worlds", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("window", "period_start"),
    )


def downgrade() -> None:
    op.drop_table("temporal_period_runs")
    with op.batch_alter_table("temporal_day_chunks") as batch:
        batch.drop_constraint("uq_chunk_conversation_bucket_seq", type_="unique")
        batch.create_unique_constraint("uq_chunk_conversation_bucket", ["conversation_id", "cst_date", "bucket"])
        batch.drop_column("seq")
