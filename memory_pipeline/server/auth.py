"""Bearer tokens on the MCP endpoint, through the SDK's own auth: a ``TokenVerifier`` over the access
domain's tokens (checked against the store on every HTTP request, so a revoked token is refused from
its next request on), and the caller's grant read back inside a tool call.

On a SQLite file a token's answer is kept until the next commit to the file (``watch.stamp``): a
revocation, by this process or another, is such a commit, so the next request is checked again."""

from __future__ import annotations

from typing import Any

import anyio

from memory_pipeline.access import tokens
from memory_pipeline.access.logic import AccessError, Grant, token_hash
from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.store import Store, watch, world_ingested
from memory_pipeline.lib.text import text_problem
from memory_pipeline.tower.logic import TowerInputError

WRITE_SCOPE = "write"
ALL_WORLDS_SCOPE = "all_worlds"  # an --all-worlds token: the operator's (``/metrics`` needs it)


class StoreTokenVerifier:
    """``mcp.server.auth.provider.TokenVerifier``: a token in force becomes an ``AccessToken`` whose
    client id is the token's name, whose claims carry its worlds, and whose scopes say whether it
    may write and whether it holds every world; anything else is None (the SDK answers HTTP 401 before any tool runs)."""

    KEPT = 10_000  # answers kept at most (unknown tokens' too): past it, all are dropped

    def __init__(self, store: Store):
        self.store = store
        self._known: dict[str, tuple[watch.Stamp, Grant | None]] = {}

    async def verify_token(self, token: str) -> Any:
        from mcp.server.auth.provider import AccessToken

        stamp = watch.stamp(self.store)
        key = token_hash(token) if isinstance(token, str) else ""
        seen = self._known.get(key)
        if stamp is not None and seen is not None and seen[0] == stamp:
            grant = seen[1]
        else:
            grant = await anyio.to_thread.run_sync(tokens.verify, self.store, token)
            if stamp is not None:
                if len(self._known) >= self.KEPT:
                    self._known.clear()
                self._known[key] = (stamp, grant)
        if grant is None:
            return None
        scopes = ["read"] if grant.read_only else ["read", WRITE_SCOPE]
        if grant.all_worlds:
            scopes.append(ALL_WORLDS_SCOPE)
        return AccessToken(token=token, client_id=grant.name, scopes=scopes, claims={"worlds": sorted(grant.worlds)})


def require_known_world(store: Store, world: str) -> None:
    """After the token's check: a world nothing has been ingested for is refused, never answered
    as an empty memory nor given one by a write. An --all-worlds token's world is checked as an id
    here first (a NUL in it reached the database)."""
    if problem := validate_id(world):
        raise TowerInputError("world", problem)
    if not world_ingested(store, world):
        raise TowerInputError("world", f"{world!r}: nothing has been ingested for it")


def require_world(store: Store, world: str) -> None:
    """What every tool with a ``world`` argument checks first: one of the caller's token's worlds,
    a well-formed id, and a world something has been ingested for."""
    caller().require_world(world)
    require_known_world(store, world)


def require_text(field: str, value: object) -> None:
    """A free-text argument the store can hold (no NUL, no lone surrogate; line breaks allowed):
    refused by name here, before a driver's encoding error becomes an internal one. Its length is
    the domain's to check."""
    if problem := text_problem(value, 10**7, controls=True):
        raise TowerInputError(field, problem)


def caller() -> Grant:
    """The grant of the token this tool call came with (none: refused, never open)."""
    from mcp.server.auth.middleware.auth_context import get_access_token

    at = get_access_token()
    if at is None or not at.claims or "worlds" not in at.claims:
        raise AccessError("no access token with this call")
    return Grant(at.client_id, frozenset(at.claims["worlds"]), WRITE_SCOPE not in at.scopes)
