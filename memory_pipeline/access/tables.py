"""Access tables: the bearer tokens the memory server accepts. Only a token's hash is stored (the
token itself is printed once, when it is created); a revoked token keeps its row, so its name is not
reused and `tokens list` still shows when it was revoked."""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, String, Table

from memory_pipeline.lib.store.tables import UTCDateTime, metadata, now_utc

access_tokens = Table(
    "access_tokens",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("token_hash", String(64), nullable=False, unique=True),  # sha256 hex of the token
    Column("worlds", JSON, nullable=False),  # the world ids the token may read (and write)
    Column("read_only", Boolean, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=now_utc),
    Column("revoked_at", UTCDateTime),  # null: in force
)
