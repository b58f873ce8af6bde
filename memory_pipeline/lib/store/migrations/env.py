"""Alembic environment: runs on the connection the caller hands in (lib.store.migrate)."""

from alembic import context
from sqlalchemy import create_engine

config = context.config
connection = config.attributes.get("connection")


def _run(conn) -> None:
    # Our own version table: a Dagster instance on the same database keeps its own alembic_version.
    context.configure(
        connection=conn,
        target_metadata=None,
        render_as_batch=conn.dialect.name == "sqlite",
        version_table=config.get_main_option("version_table") or "alembic_version",
    )
    with context.begin_transaction():
        context.run_migrations()


if connection is not None:
    _run(connection)
else:  # the alembic command line, given sqlalchemy.url
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as conn:
        _run(conn)
