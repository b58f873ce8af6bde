"""The Habitat's system-roll slots (seed 000 系统合摘要页签): list each world's cached slots with
their sources_fp, age and TTL against the rows they should cover, and regenerate one on demand.
Listing reads only the store and the cache (never an LLM); regenerating asks the model through
the ledger like any other roll."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from sqlalchemy import select

from memory_pipeline.lib.cache import KVCache
from memory_pipeline.lib.jsontypes import JSONValue
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import worlds
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.temporal import logic
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.context import TemporalContext
from memory_pipeline.temporal.rolls import RollResult, regenerate_system_rolls, roll_sources, roll_sources_fp


def _text(value: JSONValue) -> str | None:
    """A cached roll's text field (written as a string or null)."""
    return value if isinstance(value, str) else None


class SlotState:
    FRESH = "fresh"  # cached, and its sources_fp matches the rows it covers
    STALE = "stale"  # cached, but the rows changed since: regenerate
    MISSING = "missing"  # rows exist, nothing cached: the read path skips this block
    EMPTY = "empty"  # no non-empty rows to cover (e.g. the 1st of a month for past_days)


@dataclass(frozen=True)
class RollSlot:
    world_id: str
    kind: str
    key: str
    state: str
    sources: int  # non-empty rows the slot covers today
    sources_fp: str | None  # of those rows
    cached_fp: str | None
    age_seconds: int | None
    ttl_seconds: int | None
    summary: str | None


def list_slots(
    store: Store,
    cache: KVCache,
    cfg: TemporalSummaryConfig,
    today: date,
    world_ids: list[str] | None = None,
    now: datetime | None = None,
) -> list[RollSlot]:
    """Every world's three slots for ``today``, in world then near-to-far order."""
    now = now or utcnow()
    with store.connect() as conn:
        q = select(worlds.c.world_id).order_by(worlds.c.world_id)
        if world_ids is not None:
            q = q.where(worlds.c.world_id.in_(world_ids))
        known = list(conn.execute(q).scalars())
        sources = {kind: roll_sources(conn, kind, today, world_ids) for kind in logic.SYS_ROLL_KINDS}
    out = []
    for world_id in known:
        for kind in logic.SYS_ROLL_KINDS:
            rows = sources[kind].get(world_id, [])
            fp = roll_sources_fp(rows) if rows else None
            key = logic.sys_roll_key(cfg.redis_key_prefix, world_id, kind, today)
            cached = cache.get_json(key)
            age = None
            if cached and isinstance(created := cached.get("created_at"), str) and created:
                age = int((now - datetime.fromisoformat(created)).total_seconds())
            if cached:
                state = SlotState.FRESH if cached.get("sources_fp") == fp else SlotState.STALE
            else:
                state = SlotState.MISSING if rows else SlotState.EMPTY
            out.append(
                RollSlot(
                    world_id,
                    str(kind),
                    key,
                    state,
                    len(rows),
                    fp,
                    _text(cached.get("sources_fp")) if cached else None,
                    age,
                    cache.ttl(key) if cached else None,
                    _text(cached.get("summary")) if cached else None,
                )
            )
    return out


def regenerate_slot(ctx: TemporalContext, world_id: str, kind: str, today: date) -> RollResult:
    """Regenerate one slot afresh (memory.temporalSystemRollRegenerate)."""
    if kind not in logic.SYS_ROLL_KINDS:
        raise ValueError(f"unknown roll kind {kind!r} (one of {', '.join(logic.SYS_ROLL_KINDS)})")
    return regenerate_system_rolls(ctx, today, [world_id], kinds=(kind,), force=True)
