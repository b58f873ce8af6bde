"""Platform tables: raw worlds, conversations and messages; the LLM ledger and cache; the Inbox.

Revision ID: 0001_platform
Revises:
"""

import sqlalchemy as sa
from alembic import op

from memory_pipeline.lib.store import tables

revision = "0001_platform"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inbox",
        sa.Column("inbox_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("subject", sa.String(length=256), nullable=False),
        sa.Column("source_ref", sa.String(length=256), nullable=False),
        sa.Column("title", sa.String(length=512), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("inbox_id"),
        sa.UniqueConstraint("subject", "source_ref", name="uq_inbox_subject_ref"),
    )
    op.create_table(
        "llm_cache",
        sa.Column("cache_key", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("prompt_version", sa.String(length=64), nullable=True),
        sa.Column("response", sa.Text(), nullable=False),
        sa.Column("tokens_in", sa.Integer(), nullable=False),
        sa.Column("tokens_out", sa.Integer(), nullable=False),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("cache_key"),
    )
    op.create_table(
        "llm_ledger",
        sa.Column("call_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("asset", sa.String(length=256), nullable=True),
        sa.Column("partition", sa.String(length=256), nullable=True),
        sa.Column("task", sa.String(length=64), nullable=True),
        sa.Column("world_id", sa.String(length=128), nullable=True),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("prompt_version", sa.String(length=64), nullable=True),
        sa.Column("tokens_in", sa.Integer(), nullable=False),
        sa.Column("tokens_out", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.JSON(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("cache_key", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("call_id"),
    )
    op.create_index("ix_ledger_asset_partition", "llm_ledger", ["asset", "partition"], unique=False)
    op.create_table(
        "worlds",
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=True),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("first_event_at", tables.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("world_id"),
    )
    op.create_table(
        "conversations",
        sa.Column("conversation_id", sa.String(length=128), nullable=False),
        sa.Column("world_id", sa.String(length=128), nullable=False),
        sa.Column("platform", sa.String(length=64), nullable=False),
        sa.Column("debug", sa.Boolean(), nullable=False),
        sa.Column("title", sa.String(length=512), nullable=True),
        sa.Column("created_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["world_id"],
            ["worlds.world_id"],
        ),
        sa.PrimaryKeyConstraint("conversation_id"),
    )
    op.create_index(op.f("ix_conversations_world_id"), "conversations", ["world_id"], unique=False)
    op.create_table(
        "messages",
        sa.Column("message_id", sa.String(length=128), nullable=False),
        sa.Column("conversation_id", sa.String(length=128), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tool_calls", sa.JSON(), nullable=True),
        sa.Column("at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("ingested_at", tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(length=1024), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.conversation_id"],
        ),
        sa.PrimaryKeyConstraint("message_id"),
    )
    op.create_index("ix_messages_at", "messages", ["at"], unique=False)
    op.create_index("ix_messages_conversation_at", "messages", ["conversation_id", "at"], unique=False)


def downgrade() -> None:
    op.drop_table("inbox")
    op.drop_table("llm_cache")
    op.drop_table("llm_ledger")
    op.drop_table("messages")
    op.drop_table("conversations")
    op.drop_table("worlds")
