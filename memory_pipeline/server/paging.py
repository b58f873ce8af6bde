"""Pages on the memory server's listing tools (no domain rules here): every tool that returns a list
takes ``limit`` (the page size, bounded per tool) and ``cursor`` (the previous page's
``next_cursor``), and answers with ``total`` (the items its query matches) and ``next_cursor``
(null on the last page).

A cursor is opaque to the client: base64url JSON of the tool, a digest of the call's query (its
arguments but ``limit`` and ``cursor``: world, group, query, filters) and the offset of the next
item. A cursor of another tool or another query is refused naming ``cursor``, so a cursor taken
from one world's answer cannot continue another's; and the world is checked against the token on
every call anyway, so a forged cursor moves only within the caller's own query."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memory_pipeline.tower.logic import TowerInputError

CURSOR_MAX_CHARS = 300
OFFSET_MAX = 2_147_483_647  # a database offset; never the database's overflow error
_NOT_OURS = "not a cursor returned by this tool's previous page"


def _scope(tool: str, query: Mapping[str, Any]) -> str:
    text = json.dumps([tool, dict(query)], sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def encode_cursor(tool: str, scope: str, offset: int) -> str:
    raw = json.dumps({"tool": tool, "scope": scope, "offset": offset}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(cursor: str) -> dict[str, Any]:
    if len(cursor) > CURSOR_MAX_CHARS:
        raise TowerInputError("cursor", _NOT_OURS)
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error):
        raise TowerInputError("cursor", _NOT_OURS) from None
    if not isinstance(data, dict) or set(data) != {"tool", "scope", "offset"}:
        raise TowerInputError("cursor", _NOT_OURS)
    return data


@dataclass(frozen=True)
class Page:
    """One page of one tool's query: where it starts and how many items it holds at most."""

    tool: str
    scope: str
    offset: int
    limit: int

    def answer(self, total: int, returned: int) -> dict[str, Any]:
        """``total`` and ``next_cursor`` for a page that returned ``returned`` of ``total`` items."""
        nxt = self.offset + returned
        more = returned > 0 and nxt < total
        return {"total": total, "next_cursor": encode_cursor(self.tool, self.scope, nxt) if more else None}

    def slice(self, items: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        """A page of a list computed whole: the page and its ``total`` and ``next_cursor``."""
        page = items[self.offset : self.offset + self.limit]
        return page, self.answer(len(items), len(page))


def page(
    tool: str, query: Mapping[str, Any], limit: int | None, cursor: str | None, *, default: int, maximum: int
) -> Page:
    """The page a call asks for; a limit out of range or a cursor not of this tool and query is
    refused with one line naming the argument."""
    if limit is None:
        limit = default
    elif not 1 <= limit <= maximum:
        raise TowerInputError("limit", f"must be 1-{maximum}, got {limit}")
    scope = _scope(tool, query)
    if cursor is None:
        return Page(tool, scope, 0, limit)
    data = _decode(cursor)
    if data["tool"] != tool:
        raise TowerInputError("cursor", f"returned by another tool ({str(data['tool'])[:60]}), not {tool}")
    if data["scope"] != scope:
        raise TowerInputError("cursor", "returned for other arguments: page on with the arguments of its first page")
    offset = data["offset"]
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= OFFSET_MAX:
        raise TowerInputError("cursor", _NOT_OURS)
    return Page(tool, scope, offset, limit)
