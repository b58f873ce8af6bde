"""Seed 004 (time tower): memory types, entries, structural windows, summaries, the retry ledger,
summarize jobs and the window partitions' materialization record.

Revision ID: 0009_tower
Revises: 0007_period_run_settings
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0009_tower"
down_revision = "0007_period_run_settings"
branch_labels = None
depends_on = None

NAME = sa.String(length=128)
GRAIN = sa.String(length=8)


def _dt(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, tables.UTCDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "tower_types",
        sa.Column("name", NAME, nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("chain", sa.JSON(), nullable=False),
        sa.Column("summary_cap", GRAIN, nullable=False),
        sa.Column("summaries_enabled", sa.Boolean(), nullable=False),
        _dt("summaries_enabled_at", True),
        sa.Column("group_field", sa.String(length=64), nullable=True),
        sa.Column("retention", sa.String(length=64), nullable=True),
        sa.Column("builtin", sa.Boolean(), nullable=False),
        _dt("archived_at", True),
        _dt("created_at"),
        _dt("updated_at"),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "tower_entries",
        sa.Column("entry_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("type_name", NAME, nullable=False),
        sa.Column("entry_id", sa.String(length=128), nullable=False),
        _dt("at"),
        sa.Column("group_value", sa.String(length=128), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.Column("chars", sa.Integer(), nullable=False),
        _dt("ingested_at"),
        sa.Column("source", sa.String(length=1024), nullable=True),
        sa.ForeignKeyConstraint(["type_name"], ["tower_types.name"]),
        sa.PrimaryKeyConstraint("entry_pk"),
        sa.UniqueConstraint("type_name", "entry_id", name="uq_tower_entry_id"),
    )
    op.create_index("ix_tower_entries_type_at", "tower_entries", ["type_name", "at"])
    op.create_index("ix_tower_entries_ingested_at", "tower_entries", ["ingested_at"])
    op.create_table(
        "tower_windows",
        sa.Column("type_name", NAME, nullable=False),
        sa.Column("granularity", GRAIN, nullable=False),
        _dt("start"),
        sa.Column("group_value", sa.String(length=128), nullable=False),
        _dt("end"),
        sa.Column("entry_count", sa.Integer(), nullable=False),
        sa.Column("chars", sa.Integer(), nullable=False),
        sa.Column("ref_kind", sa.String(length=8), nullable=False),
        sa.Column("refs", sa.JSON(), nullable=False),
        _dt("materialized_at"),
        sa.PrimaryKeyConstraint("type_name", "granularity", "start", "group_value"),
    )
    op.create_index("ix_tower_windows_grain_start", "tower_windows", ["granularity", "start"])
    op.create_table(
        "tower_summaries",
        sa.Column("record_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("type_name", NAME, nullable=False),
        sa.Column("granularity", GRAIN, nullable=False),
        _dt("start"),
        _dt("end"),
        sa.Column("group_value", sa.String(length=128), nullable=False),
        sa.Column("sections", sa.JSON(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("ref_kind", sa.String(length=8), nullable=False),
        sa.Column("refs", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(length=8), nullable=False),
        sa.Column("entry_count", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("prompt_version", sa.String(length=64), nullable=False),
        sa.Column("strategy", sa.String(length=16), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("clipped_entries", sa.Integer(), nullable=False),
        sa.Column("material_fp", sa.String(length=64), nullable=False),
        _dt("created_at"),
        sa.ForeignKeyConstraint(["type_name"], ["tower_types.name"]),
        sa.PrimaryKeyConstraint("record_id"),
    )
    op.create_index(
        "ix_tower_summaries_window", "tower_summaries", ["type_name", "granularity", "start", "group_value"]
    )
    op.create_table(
        "tower_summary_attempts",
        sa.Column("type_name", NAME, nullable=False),
        sa.Column("granularity", GRAIN, nullable=False),
        _dt("start"),
        _dt("end"),
        sa.Column("group_value", sa.String(length=128), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        _dt("next_attempt_at"),
        _dt("given_up_at", True),
        _dt("updated_at"),
        sa.PrimaryKeyConstraint("type_name", "granularity", "start", "end", "group_value"),
    )
    op.create_table(
        "tower_jobs",
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=24), nullable=False),
        sa.Column("type_name", NAME, nullable=False),
        sa.Column("granularity", GRAIN, nullable=False),
        _dt("start"),
        _dt("end"),
        sa.Column("group_value", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("record_id", sa.Integer(), nullable=True),
        sa.Column("llm_calls", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        _dt("created_at"),
        _dt("updated_at"),
        sa.PrimaryKeyConstraint("job_id"),
    )
    op.create_index("ix_tower_jobs_created", "tower_jobs", ["created_at"])
    op.create_table(
        "tower_window_runs",
        sa.Column("grain", GRAIN, nullable=False),
        sa.Column("period_start", sa.Date(), nullable=False),
        _dt("materialized_at"),
        sa.Column("windows", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("grain", "period_start"),
    )


def downgrade() -> None:
    for name in ("tower_window_runs", "tower_jobs", "tower_summary_attempts", "tower_summaries", "tower_windows"):
        op.drop_table(name)
    op.drop_table("tower_entries")
    op.drop_table("tower_types")
