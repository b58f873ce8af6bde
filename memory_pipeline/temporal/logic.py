"""Pure rules of seed 000: inclusion, watermark gating, fingerprints, keys, TTLs, roll scopes and
the system block. No I/O, no Dagster."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from zoneinfo import ZoneInfo

from memory_pipeline.lib.kinds import Window
from memory_pipeline.lib.text import hard_cap, short_hash, truncate
from memory_pipeline.lib.timeutil import (
    bucket_end,
    bucket_label,
    closed_buckets,
    day_start,
    local_date,
    month_start,
)

WINDOWS = tuple(Window)


class EmptyReason(StrEnum):
    """Why a placeholder row (content "", source_count usually 0) was written."""

    NO_SESSIONS = "no_sessions"  # no eligible conversation had a message that day
    EMPTY = "empty"  # conversations had messages but no recallable user/assistant text
    EMPTY_SUMMARY = "empty_summary"  # the model answered with nothing
    NO_DAYS = "no_days"  # a month without non-empty day rows
    NO_MONTHS = "no_months"  # a year without non-empty month rows


class RollKind(StrEnum):
    """The three system-roll slots of the <temporal_summary> block, near to far."""

    PAST_DAYS = "past_days"
    PAST_MONTHS = "past_months"
    PAST_YEARS = "past_years"


# disabled, a cascade with no trigger and an LLM hard failure write nothing at all.
CHILD_EMPTY_REASON = {Window.MONTH: EmptyReason.NO_DAYS, Window.YEAR: EmptyReason.NO_MONTHS}
CHILD_WINDOW = {Window.MONTH: Window.DAY, Window.YEAR: Window.MONTH}

SYS_ROLL_KINDS = tuple(RollKind)
SYS_ROLL_TTL_SECONDS = {RollKind.PAST_DAYS: 86400, RollKind.PAST_MONTHS: 31 * 86400, RollKind.PAST_YEARS: 366 * 86400}
SYS_ROLL_WINDOW = {RollKind.PAST_DAYS: Window.DAY, RollKind.PAST_MONTHS: Window.MONTH, RollKind.PAST_YEARS: Window.YEAR}
SYS_ROLL_LABEL = {
    RollKind.PAST_DAYS: "Past days",
    RollKind.PAST_MONTHS: "Past months",
    RollKind.PAST_YEARS: "Past years",
}
PEER_MESSAGE_NAME = "temporal_summary_peers"


def is_eligible_conversation(platform: str, debug: bool) -> bool:
    """Counted: every non-debug conversation not on the cron platform (local, remote:*, discord...)."""
    return not debug and platform != "cron"


def is_material(role: str, content: str | None, tool_calls: object = None) -> bool:
    """Recallable user/assistant body text; tool turns and empty assistant+tool_calls turns are not."""
    return role in ("user", "assistant") and bool((content or "").strip())


def watermark_gate(watermark_at: datetime | None, day: date, tz: ZoneInfo) -> datetime:
    """max(watermark_at, CST day start)."""
    start = day_start(day, tz)
    return start if watermark_at is None or watermark_at < start else watermark_at


def after_gate(at: datetime, watermark_at: datetime | None, day: date, tz: ZoneInfo) -> bool:
    gate = watermark_gate(watermark_at, day, tz)
    # The day start is inclusive; a watermark is the last message already summarized, so exclusive.
    return at > gate if gate == watermark_at else at >= gate


@dataclass(frozen=True)
class PlannedChunk:
    bucket: datetime
    message_ids: tuple[str, ...]
    watermark_message_id: str
    watermark_at: datetime


def plan_chunks(
    messages: Sequence[tuple[str, datetime]],
    watermark_at: datetime | None,
    day: date,
    now: datetime,
    tz: ZoneInfo,
) -> list[PlannedChunk]:
    """Replay the */30 tick over the closed buckets of ``day`` up to ``now``.

    ``messages`` are (message_id, at) of one conversation's material, any order. Each closed
    bucket whose end is reached pushes one chunk when material newer than the gate exists; the
    open bucket waits for the next tick. Existing chunks are never rewritten (append-only)."""
    msgs = sorted((m for m in messages if local_date(m[1], tz) == day), key=lambda m: (m[1], m[0]))
    out: list[PlannedChunk] = []
    wm = watermark_at
    for b in closed_buckets(day, now, tz):
        end = bucket_end(b)
        batch = [m for m in msgs if m[1] < end and after_gate(m[1], wm, day, tz)]
        if not batch:
            continue
        last = batch[-1]
        out.append(PlannedChunk(b, tuple(m[0] for m in batch), last[0], last[1]))
        wm = last[1]
    return out


def peer_sources_fp(chunks: Iterable[tuple[str, datetime | str, str]], viewer_conversation_id: str | None) -> str:
    """Short hash over the canonically sorted (conversation_id, at, summary), viewer excluded."""
    rows = sorted(
        (c, a.isoformat() if isinstance(a, datetime) else a, s) for c, a, s in chunks if c != viewer_conversation_id
    )
    return short_hash(rows)


def rows_fp(rows: Iterable[tuple[str, date | str, str]]) -> str:
    """Fingerprint of the source rows of a system roll: (window, period_start, content)."""
    return short_hash(sorted((w, p.isoformat() if isinstance(p, date) else p, c) for w, p, c in rows))


def peer_roll_key(prefix: str, world_id: str, cst_date: date, bucket: datetime, sources_fp: str) -> str:
    # The seed's key has no world segment (one habitat per agent); the world scopes the prefix here.
    return f"{prefix}:{world_id}:peer_roll:{cst_date.isoformat()}:{bucket_label(bucket)}:{sources_fp}"


def sys_roll_key(prefix: str, world_id: str, kind: str, today: date) -> str:
    stamp = {"past_days": today.isoformat(), "past_months": today.strftime("%Y-%m"), "past_years": str(today.year)}[
        kind
    ]
    return f"{prefix}:{world_id}:sys_roll:{kind}:{stamp}"


def sys_roll_scope(kind: str, today: date) -> tuple[str, date | None, date]:
    """(window, first period_start or None, exclusive end) a system roll covers on ``today``:
    past_days = this month's days before today; past_months = this year's months before this
    month; past_years = every year before this one."""
    if kind == "past_days":
        return "day", month_start(today), today
    if kind == "past_months":
        return "month", date(today.year, 1, 1), month_start(today)
    if kind == "past_years":
        return "year", None, date(today.year, 1, 1)
    raise ValueError(f"unknown system roll {kind!r}")


@dataclass(frozen=True)
class SystemBlock:
    text: str  # "" when every roll missed: the block is skipped
    truncated: bool
    rolls_used: tuple[str, ...]


def assemble_system_block(rolls: dict[str, str | None], max_chars: int) -> SystemBlock:
    """At most three reversed rolls (near to far) wrapped in <temporal_summary>; a segment over
    ``max_chars`` (system_prompt_max_chars) is cut and flagged."""
    lines, used = [], []
    for kind in SYS_ROLL_KINDS:
        summary = (rolls.get(kind) or "").strip()
        if summary:
            lines.append(f"{SYS_ROLL_LABEL[kind]}: {summary}")
            used.append(kind)
    if not lines:
        return SystemBlock("", False, ())
    open_tag, close_tag = "<temporal_summary>\n", "\n</temporal_summary>"
    body = "\n".join(lines)
    text = open_tag + body + close_tag
    if len(text) <= max_chars:
        return SystemBlock(text, False, tuple(used))
    room = max(0, max_chars - len(open_tag) - len(close_tag))
    return SystemBlock(open_tag + truncate(body, room) + close_tag, True, tuple(used))


def truncation_source_ref(cst_date: date) -> str:
    return f"temporal_summary:system_truncated:{cst_date.isoformat()}"


def concat_peer_chunks(summaries: Sequence[str], max_chars: int) -> str:
    """Miss path of a peer roll: concatenate and truncate to the hard cap, no LLM."""
    return truncate(" / ".join(s.strip() for s in summaries if s.strip()), hard_cap(max_chars))
