"""Seed 003 on the memory server: ``sleep/remember`` (the in-conversation ``remember``: a semantic
memory whose source is the current session and observed now, sleep.memory.remember) and
``sleep/self`` (the self layer: the six self blocks and the top pinned facts every sleep stage
carries), each for one world of the caller's token. Never calls an LLM."""

from __future__ import annotations

from typing import Any

from memory_pipeline.server.auth import require_text, require_world
from memory_pipeline.server.conversation_tools import REQUEST_DOC, domain_error, owned_conversation, request_id_problem
from memory_pipeline.server.tools import Access, ToolRegistry
from memory_pipeline.sleep import config as sleep_config
from memory_pipeline.sleep import memory
from memory_pipeline.sleep.logic import MemoryType
from memory_pipeline.tower.api import Tower

TOOL_NAMES = ("sleep/remember", "sleep/self")

WORLD_DOC = " `world`: one of the token's worlds."


def register(reg: ToolRegistry, tower: Tower) -> None:
    store = tower.store
    cfg = sleep_config.load()

    @reg.tool(
        name="sleep/remember",
        description="Remember `content` in `world`: a new active semantic memory of `type` ("
        + ", ".join(MemoryType)
        + "; default experience) whose source is the current session `session_id` (a conversation of the "
        "world) and observed now; the nightly sleep takes it from there. Answers its `memory_id`. Never "
        "calls an LLM." + WORLD_DOC + REQUEST_DOC,
        access=Access.WRITE,
    )
    def remember(
        world: str, session_id: str, content: str, request_id: str, type: str = str(MemoryType.EXPERIENCE)
    ) -> dict[str, Any]:
        require_world(store, world)
        require_text("content", content)
        owned_conversation(store, world, "session_id", session_id)
        request_id_problem(request_id)
        try:
            memory_id, replayed = memory.remember_request(
                store, world, session_id, content, type=type, tz=tower.tz, request_id=request_id
            )
        except memory.InputError as exc:
            raise domain_error(exc, {"world_id": "world"}) from None
        return {"world": world, "memory_id": memory_id, "replayed": replayed}

    @reg.tool(
        name="sleep/self",
        description="The self layer of `world`: its six self blocks by name ("
        + ", ".join(cfg.block_names())
        + "; empty when not written yet) and its top pinned facts (at most "
        f"{cfg.pinned_top}, highest priority first), what every sleep stage carries as identity. Never "
        "calls an LLM." + WORLD_DOC,
        access=Access.READ,
    )
    def self_layer(world: str) -> dict[str, Any]:
        require_world(store, world)
        with store.connect() as conn:
            blocks, pinned = memory.load_self_layer(conn, [world], cfg.pinned_top)
        held = blocks.get(world, {})
        return {
            "world": world,
            "blocks": {name: held.get(name, "") for name in cfg.block_names()},
            "pinned_facts": pinned.get(world, []),
        }
