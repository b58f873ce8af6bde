"""Pure rules of seed 000: inclusion, watermark gating, fingerprints, keys, TTLs, roll scopes and
the system block. No I/O, no Dagster."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from zoneinfo import ZoneInfo

from memory_pipeline.lib.kinds import CRON_PLATFORM, Window
from memory_pipeline.lib.text import hard_cap, short_hash, truncate
from memory_pipeline.lib.timeutil import (
    bucket_end,
    bucket_label,
    bucket_start,
    closed_buckets,
    day_start,
    local_date,
    month_start,
)

WINDOWS = tuple(Window)
# Partition keys as the Dagster partitions spell them (cst_day, cst_month, cst_year).
KEY_FORMAT = {Window.DAY: "%Y-%m-%d", Window.MONTH: "%Y-%m", Window.YEAR: "%Y"}


def period_key(window: str, period_start: date) -> str:
    """``2026-01-03``, ``2026-01`` or ``2026``: how a period is named in runs and messages."""
    return period_start.strftime(KEY_FORMAT[Window(window)])


class EmptyReason(StrEnum):
    """Why a placeholder row (content "", source_count usually 0) was written."""

    NO_SESSIONS = "no_sessions"  # no eligible conversation had a message that day
    EMPTY = "empty"  # conversations had messages but no recallable user/assistant text
    EMPTY_SUMMARY = "empty_summary"  # the model answered with nothing
    NO_DAYS = "no_days"  # a month without non-empty day rows
    NO_MONTHS = "no_months"  # a year without non-empty month rows


@dataclass(frozen=True)
class Audit:
    """What an audit looked at (rows or chunks of one partition) and the problems it found."""

    audited: int
    problems: list[str]


def missing_children_message(window: str, key: str, missing: Sequence[tuple[str, str]], shown: int = 10) -> str:
    """One line naming the (world, child period) rows a month/year lacks, and what to do: run those
    child partitions first or select them in the same launch (a backfill orders them before)."""
    child = CHILD_WINDOW[Window(window)]
    pairs = ", ".join(f"{w} {p}" for w, p in missing[:shown])
    more = f" (+{len(missing) - shown} more)" if len(missing) > shown else ""
    periods = sorted({p for _, p in missing})
    span = periods[0] if len(periods) == 1 else f"{periods[0]}...{periods[-1]}"
    where = f" in {len(periods)} {child} partition(s) {span}" if more else ""
    return (
        f"{window} {key}: {len(missing)} child row(s) missing{where}: {pairs}{more}; "
        f"run those {child} partitions first (or select them in the same launch)"
    )


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
    """Counted: every non-debug conversation not on the cron platform (local, remote:*, discord...);
    as ``counted_conversations`` in SQL, "CRON" is the cron platform too."""
    return not debug and platform.lower() != CRON_PLATFORM


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
    seq: int  # 0 for the bucket's first chunk, max(existing seq) + 1 for a further one
    message_ids: tuple[str, ...]
    watermark_message_id: str  # the chunk's last message
    watermark_at: datetime
    late: int = 0  # messages the seed's gate alone would lose: in a chunked bucket, or at/before the gate


def plan_chunks(
    messages: Sequence[tuple[str, datetime]],
    day: date,
    now: datetime,
    tz: ZoneInfo,
    *,
    chunked_ids: Collection[str] = (),
    bucket_seqs: Mapping[datetime, int] | None = None,
    watermark_at: datetime | None = None,
) -> list[PlannedChunk]:
    """The chunks one */30 tick appends for one conversation-day.

    ``messages`` are (message_id, at) of the conversation's material, any order; ``chunked_ids``
    the union of source_ids of its chunks of ``day`` so far, ``bucket_seqs`` their highest seq per
    bucket, ``watermark_at`` the newest chunk watermark. Every material message of ``day`` in a
    bucket closed at ``now`` that no chunk lists yet is planned, grouped by its own bucket (one
    chunk per bucket and tick); a bucket that already has chunks gets seq max+1: earlier chunks are
    never rewritten (append-only). The seed's gate max(watermark_at, day start) still marks the
    normal path (messages after it); messages at or before it are late arrivals (a file ingested
    after its bucket was chunked, a message sharing the watermark's timestamp) and are chunked the
    same way, so no message is lost and none is in two chunks: correctness comes from the source
    set, not from timestamps. The open bucket waits for the next tick."""
    seen = set(chunked_ids)
    seqs = bucket_seqs or {}
    closed = {b: bucket_end(b) for b in closed_buckets(day, now, tz)}
    by_bucket: dict[datetime, list[tuple[str, datetime]]] = {}
    for mid, at in messages:
        if mid in seen or local_date(at, tz) != day:
            continue
        b = bucket_start(at, tz)
        if b in closed:
            by_bucket.setdefault(b, []).append((mid, at))
    out = []
    for b in sorted(by_bucket):
        batch = sorted(by_bucket[b], key=lambda m: (m[1], m[0]))
        last = batch[-1]
        seq = seqs[b] + 1 if b in seqs else 0
        # Late: in a bucket chunked already, or at or before the gate (the seed's tick skips both).
        late = len(batch) if seq else sum(1 for _, at in batch if not after_gate(at, watermark_at, day, tz))
        out.append(PlannedChunk(b, seq, tuple(m[0] for m in batch), last[0], last[1], late))
    return out


def pack(sizes: Sequence[int], budget: int, min_group: int = 1) -> list[list[int]]:
    """Consecutive groups of item indexes whose sizes add up to at most ``budget``. A group holds
    at least ``min_group`` items even over the budget (only the last may hold fewer), so every item
    is placed and a reduction with ``min_group=2`` always shrinks."""
    groups: list[list[int]] = []
    cur: list[int] = []
    used = 0
    for i, size in enumerate(sizes):
        if cur and used + size > budget and len(cur) >= min_group:
            groups.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += size
    if cur:
        groups.append(cur)
    return groups


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
