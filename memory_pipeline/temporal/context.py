"""What every seed 000 operation shares: the context (store, model, cache, config, zone), the one
way to ask the model for a summary, and the message queries by CST day."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, RowMapping, select

from memory_pipeline.lib.cache import KVCache
from memory_pipeline.lib.llm import LLMClient, LLMRequest
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import conversations, counted_conversations, messages, worlds
from memory_pipeline.lib.text import truncate
from memory_pipeline.lib.timeutil import day_bounds
from memory_pipeline.temporal import prompts
from memory_pipeline.temporal.config import TemporalSummaryConfig

MESSAGE_LINE_MAX_CHARS = 300


@dataclass
class TemporalContext:
    store: Store
    llm: LLMClient
    cache: KVCache
    cfg: TemporalSummaryConfig
    tz: ZoneInfo
    force_llm: bool = False  # bypass cached answers (fresh calls)
    rebuild: bool = False  # rewrite rows, never reusing a stored one as is (answers from the LLM cache)


@contextmanager
def buffered_llm(ctx: TemporalContext) -> Iterator[None]:
    """The client's ledger and cache rows are buffered while the body runs and written in one
    transaction after it (also when it raises: every call keeps its ledger row, best effort when
    the store itself is what failed). A body that writes its own transaction may write them there
    (``ctx.llm.write_pending(conn)``, then ``clear_pending()``)."""
    llm, buffering = ctx.llm, ctx.llm.buffering
    llm.buffering = True
    try:
        yield
    finally:
        llm.buffering = buffering
        if llm.pending:
            try:
                with ctx.store.begin() as conn:
                    llm.write_pending(conn)
                llm.clear_pending()
            except Exception:  # noqa: BLE001 - the store is what failed; the caller reports that error
                pass


def summary_request(task: str, material: str, max_chars: int, world_id: str | None) -> LLMRequest:
    """The request ``summarize`` sends (a batch prefetches the cached answers of many at once)."""
    return LLMRequest(
        task=task,
        system=prompts.spec(task, max_chars),
        user=material,
        prompt_version=prompts.PROMPT_VERSION,
        max_chars=max_chars,
        world_id=world_id,
    )


def summarize(ctx: TemporalContext, task: str, material: str, max_chars: int, world_id: str | None) -> str:
    req = summary_request(task, material, max_chars, world_id)
    return ctx.llm.complete(req, force=ctx.force_llm).text.strip()


def material_line(at: datetime, role: str, content: str, tz: ZoneInfo) -> str:
    text = truncate(" ".join(content.split()), MESSAGE_LINE_MAX_CHARS)
    return f"[{at.astimezone(tz):%H:%M}] {role}: {text}"


# One message as the summaries read it: message_id, conversation_id, role, content, at,
# ingested_at, world_id, platform (``messages_between``).
Message = RowMapping


def day_messages(conn: Connection, d: date, tz: ZoneInfo, world_ids: list[str] | None = None) -> Sequence[Message]:
    """Every message of eligible conversations timestamped in CST day ``d`` (by payload time,
    never by conversations.updated_at)."""
    start, end = day_bounds(d, tz)
    return messages_between(conn, start, end, world_ids)


def messages_between(
    conn: Connection, start: datetime, end: datetime, world_ids: list[str] | None = None
) -> Sequence[Message]:
    """Every message of eligible conversations timestamped in [start, end), ordered by (at,
    message_id): one read for a batch of days (group by ``local_date(at)``). No tool_calls: they
    never decide what is material (logic.is_material), and decoding them is most of a big read."""
    q = (
        select(
            messages.c.message_id,
            messages.c.conversation_id,
            messages.c.role,
            messages.c.content,
            messages.c.at,
            messages.c.ingested_at,
            conversations.c.world_id,
            conversations.c.platform,
        )
        .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
        .where(messages.c.at >= start, messages.c.at < end)
        .where(counted_conversations())
        .order_by(messages.c.at, messages.c.message_id)
    )
    if world_ids is not None:
        q = q.where(conversations.c.world_id.in_(world_ids))
    return conn.execute(q).mappings().all()


def worlds_alive(conn: Connection, end: datetime, world_ids: list[str] | None) -> list[str]:
    """Worlds whose first event is before the window's end: no placeholders before a world existed."""
    q = select(worlds.c.world_id).where(worlds.c.first_event_at < end).order_by(worlds.c.world_id)
    if world_ids is not None:
        q = q.where(worlds.c.world_id.in_(world_ids))
    return list(conn.execute(q).scalars())
