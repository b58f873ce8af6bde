"""Platform: the LLM ledger says where its token counts come from (provider-reported or
estimated, kept apart), the finish reason and the output tokens a call asked for.

Rows written before this revision are backfilled: an answer of the offline model counted
estimates, any other answer the provider's usage (the only source the client used then); cache
hits and errors carry no tokens and stay null.

Revision ID: 0017_ledger_tokens_source
Revises: 0016_sleep_rebuild
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_ledger_tokens_source"
down_revision = "0016_sleep_rebuild"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("llm_ledger") as batch:
        batch.add_column(sa.Column("tokens_source", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("finish_reason", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("max_tokens", sa.Integer(), nullable=True))
    op.execute(
        "UPDATE llm_ledger SET tokens_source = CASE WHEN model LIKE 'offline/%' THEN 'estimated' ELSE 'provider' END"
        " WHERE outcome = 'ok'"
    )


def downgrade() -> None:
    with op.batch_alter_table("llm_ledger") as batch:
        batch.drop_column("max_tokens")
        batch.drop_column("finish_reason")
        batch.drop_column("tokens_source")
