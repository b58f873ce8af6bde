"""``memory/search`` on the memory server: one ranked recall over every domain's memory of one world
(recall.search.memory_search), the world being one of the caller's token's. Never calls an LLM."""

from __future__ import annotations

from typing import Any

from memory_pipeline.recall.search import K_MAX, SearchError, search_page
from memory_pipeline.server import paging
from memory_pipeline.server.auth import require_world
from memory_pipeline.server.tools import Access, ToolRegistry
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.logic import TowerInputError

TOOL_NAMES = ("memory/search",)


def register(reg: ToolRegistry, tower: Tower) -> None:
    @reg.tool(
        name="memory/search",
        description="Search one world's memory (day summaries, facts, the self's narratives, objects, "
        "conversation summaries, activity summaries) for `query`: the hits best first, each with its kind, "
        "text, time span and the raw event ids it comes from. `world`: one of the token's worlds. `limit` "
        f"(1-{K_MAX}, default 10) and `cursor` (the previous page's `next_cursor`) page the answer: `total` "
        "documents match, `next_cursor` is null on the last page. Never calls an LLM.",
        access=Access.READ,
    )
    def search(world: str, query: str, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        require_world(tower.store, world)
        p = paging.page("memory/search", {"world": world, "query": query}, limit, cursor, default=10, maximum=K_MAX)
        try:
            hits, total = search_page(
                tower.store, world, query, p.limit, p.offset, activity_type=tower.cfg.activity_type, tz=tower.tz
            )
        except SearchError as exc:  # "query: ...": as every other refusal, field '<name>': <problem>
            field, _, problem = str(exc).partition(": ")
            raise TowerInputError(field, problem) from None
        return {"world": world, "hits": [h.as_json() for h in hits], **p.answer(total, len(hits))}
