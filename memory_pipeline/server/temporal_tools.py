"""``temporal/prompt_block`` on the memory server: seed 000's ``<temporal_summary>`` prompt block of
one world, as ``memory-pipeline read`` builds it (temporal.read.temporal_view over the roll cache at
settings.redis_url()), the world being one of the caller's token's. Never calls an LLM, and, being a
read tool, writes nothing to the store: a peer roll not cached yet is concatenated as on every read,
but no warm-up request is filed (the */30 tick warms every closed bucket's roll for each viewer of
the day and for none), and a truncated segment files no inbox warning (``memory-pipeline read``
does both)."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from memory_pipeline.lib import settings
from memory_pipeline.lib.cache import KVCache
from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.timeutil import parse_instant, utcnow
from memory_pipeline.server.auth import caller, require_known_world
from memory_pipeline.server.tools import Access, ToolRegistry
from memory_pipeline.temporal import config as temporal_config
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.read import conversation_owner, temporal_view
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.logic import TowerInputError

TOOL_NAMES = ("temporal/prompt_block",)


def register(reg: ToolRegistry, tower: Tower) -> None:
    cfg = temporal_config.load()
    cache = KVCache(settings.redis_url())
    store = tower.store

    @reg.tool(
        name="temporal/prompt_block",
        description="The `<temporal_summary>` prompt block of `world` (one of the token's worlds) at `at` (an "
        "ISO datetime with offset; default now): `system_block`, the system segment from the cached past days, "
        "months and years rolls (empty when none is cached), `truncated`, the `rolls` it came from, and "
        "`peer_messages`: one runtime-only assistant message per closed bucket of that day with chunks of the "
        "world's conversations other than `viewer` (a conversation id; none given: every conversation; "
        "`viewer_known` false: no conversation of the world has that id yet, so every one is a peer). "
        "Never calls an LLM and writes nothing: a peer roll not cached yet is concatenated (its message says "
        "cache: miss; `peer_roll_misses` counts them) and left to the background tick to warm.",
        access=Access.READ,
    )
    def prompt_block(world: str, viewer: str | None = None, at: str | None = None) -> dict[str, Any]:
        caller().require_world(world)
        return prompt_block_answer(store, cache, world, viewer, at, tower.tz, cfg)


def prompt_block_answer(
    store: Store,
    cache: KVCache,
    world: str,
    viewer: str | None,
    at: str | None,
    tz: ZoneInfo,
    cfg: TemporalSummaryConfig | None = None,
) -> dict[str, Any]:
    """The tool's answer once the caller may read ``world`` (bad input: TowerInputError)."""
    if viewer is not None and (problem := validate_id(viewer)):
        raise TowerInputError("viewer", problem)
    try:
        when = parse_instant(at) if at is not None else utcnow()
    except ValueError as exc:
        raise TowerInputError("at", str(exc)) from None
    require_known_world(store, world)
    view = temporal_view(store, cache, cfg or temporal_config.load(), world, viewer, when, tz, record=False)
    return {
        "world": world,
        "viewer": viewer,
        # False: no conversation of this world has that id yet (an agent's first turn, or a mistyped
        # id: every conversation of the world is then a peer). Another world's id reads the same.
        "viewer_known": viewer is not None and conversation_owner(store, viewer) == world,
        "at": view.at.astimezone(tz).isoformat(),  # the configured zone, whatever offset the caller wrote
        "system_block": view.system_block,
        "truncated": view.system_truncated,
        "rolls": view.rolls,
        "peer_messages": view.peer_messages,
        "peer_roll_misses": view.warmups_requested,  # record=False: misses, none filed
    }
