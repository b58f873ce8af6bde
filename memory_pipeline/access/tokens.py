"""Access tokens (I/O): create (the token is returned once; only its hash is stored), list, revoke,
and verify a presented token against the store (unknown or revoked: None)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from memory_pipeline.access.logic import AccessError, Grant, check_name, check_worlds, new_token, token_hash
from memory_pipeline.access.tables import access_tokens
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.timeutil import utcnow


@dataclass(frozen=True)
class TokenInfo:
    name: str
    worlds: tuple[str, ...]
    read_only: bool
    created_at: datetime
    revoked_at: datetime | None

    def as_dict(self, tz: ZoneInfo) -> dict[str, Any]:
        """The token as `tokens list --json` shows it; its times in ``tz`` to the second, as the table's."""
        return {
            "name": self.name,
            "worlds": list(self.worlds),
            "read_only": self.read_only,
            "created_at": self.created_at.astimezone(tz).isoformat(timespec="seconds"),
            "revoked_at": self.revoked_at.astimezone(tz).isoformat(timespec="seconds") if self.revoked_at else None,
        }


def create(store: Store, worlds: list[str], *, read_only: bool = False, name: str | None = None) -> tuple[str, str]:
    """A new token for ``worlds``: (name, token). The token is not stored and cannot be shown again."""
    held = check_worlds(worlds)
    token = new_token()
    digest = token_hash(token)
    name = check_name(name) if name is not None else f"token-{digest[:8]}"
    row = {
        "name": name,
        "token_hash": digest,
        "worlds": list(held),
        "read_only": read_only,
        "created_at": utcnow(),
        "revoked_at": None,
    }
    try:
        with store.begin() as conn:
            conn.execute(access_tokens.insert().values(row))
    except IntegrityError:
        raise AccessError(f"a token named {name!r} exists already (names are never reused)") from None
    return name, token


def list_tokens(store: Store) -> list[TokenInfo]:
    t = access_tokens.c
    with store.connect() as conn:
        rows = conn.execute(
            select(t.name, t.worlds, t.read_only, t.created_at, t.revoked_at).order_by(t.created_at, t.name)
        )
        return [TokenInfo(r.name, tuple(r.worlds), bool(r.read_only), r.created_at, r.revoked_at) for r in rows]


def revoke(store: Store, name: str, tz: ZoneInfo | None = None) -> TokenInfo:
    """Revoke a token in force; AccessError for an unknown one, or one revoked already (when, in
    ``tz``, to the second, as `tokens list` shows it)."""
    t = access_tokens.c
    with store.begin() as conn:
        done = conn.execute(
            update(access_tokens).where(t.name == name, t.revoked_at.is_(None)).values(revoked_at=utcnow())
        ).rowcount
        row = conn.execute(select(access_tokens).where(t.name == name)).first()
    if row is None:
        raise AccessError(f"no token named {name!r}")
    if not done:
        when = row.revoked_at.astimezone(tz).isoformat(timespec="seconds")
        raise AccessError(f"token {name!r} was revoked already ({when})")
    return TokenInfo(row.name, tuple(row.worlds), bool(row.read_only), row.created_at, row.revoked_at)


def active_count(store: Store) -> int:
    t = access_tokens.c
    with store.connect() as conn:
        return int(conn.execute(select(func.count()).where(t.revoked_at.is_(None))).scalar_one())


def verify(store: Store, token: str) -> Grant | None:
    """The grant of a token in force, else None (unknown, revoked or malformed: the same answer)."""
    if not isinstance(token, str) or not 0 < len(token) <= 256:
        return None
    t = access_tokens.c
    with store.connect() as conn:
        row = conn.execute(
            select(t.name, t.worlds, t.read_only).where(t.token_hash == token_hash(token), t.revoked_at.is_(None))
        ).first()
    if row is None:
        return None
    return Grant(row.name, frozenset(row.worlds), bool(row.read_only))
