"""Access rules (pure): what a token looks like, how it is hashed, what a grant allows.

A token is ``mp_`` + 32 random bytes (``secrets.token_urlsafe``); the store keeps its sha256. A
grant is what a verified token carries into a call: its name, its worlds and whether it may write."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from memory_pipeline.lib.ids import MAX_ID_CHARS, validate_id
from memory_pipeline.lib.text import shown

PREFIX = "mp_"
NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
NAME_RULE = "1-64 characters of A-Z a-z 0-9 . _ -"
MAX_WORLDS = 1000
ALL_WORLDS = "*"  # stored as the token's one world: every world, and the memory of no world (never an id)


class AccessError(ValueError):
    """A refused token command or a refused call (one line, safe to show the caller)."""


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise AccessError(f"name {name!r}: must be {NAME_RULE}")
    return name


def check_worlds(worlds: object) -> tuple[str, ...]:
    if not isinstance(worlds, (list, tuple)) or not worlds:
        raise AccessError("a token needs at least one world (--world W, or --all-worlds)")
    if list(worlds) == [ALL_WORLDS]:
        return (ALL_WORLDS,)
    if len(worlds) > MAX_WORLDS:
        raise AccessError(f"at most {MAX_WORLDS} worlds per token, got {len(worlds)}")
    for w in worlds:
        if problem := validate_id(w):
            raise AccessError(f"world {w!r}: {problem}")
    return tuple(dict.fromkeys(worlds))  # in order, once each


@dataclass(frozen=True)
class Grant:
    """What the caller's token allows: read (and, unless ``read_only``, write) ``worlds``."""

    name: str
    worlds: frozenset[str]
    read_only: bool

    @property
    def all_worlds(self) -> bool:
        return ALL_WORLDS in self.worlds

    def holds(self, world: str) -> bool:
        return self.all_worlds or world in self.worlds

    def require_world(self, world: str) -> None:
        if not self.holds(world):
            # shown whole up to an id's longest; a 100 KB argument was repeated whole
            raise AccessError(f"world {shown(world, MAX_ID_CHARS)}: not one of this token's worlds")

    def require_write(self, tool: str) -> None:
        if self.read_only:
            raise AccessError(f"{tool}: writes, and this token is read-only")
