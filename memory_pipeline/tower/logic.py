"""Seed 004 (忆时塔, the time tower): pure rules. Type names, granularity chains and the calendar of
tower windows, entry validation, the guardrails' arithmetic, the token budget's plan, summary
sections and the drift score. No I/O, no Dagster."""

from __future__ import annotations

import base64
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.text import json_type, text_problem, unfenced
from memory_pipeline.lib.timeutil import elapsed_end, instant_problem, next_month, parse_instant, window_floor


class Granularity(StrEnum):
    """Seed: 粒度从 {10min, 30min, 1h, 3h, day, week, month} 里取."""

    MIN10 = "10min"
    MIN30 = "30min"
    H1 = "1h"
    H3 = "3h"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


ORDER: tuple[Granularity, ...] = tuple(Granularity)
RANK = {g: i for i, g in enumerate(ORDER)}
MINUTES = {Granularity.MIN10: 10, Granularity.MIN30: 30, Granularity.H1: 60, Granularity.H3: 180}
SUB_DAY = tuple(g for g in ORDER if RANK[g] <= RANK[Granularity.DAY])
DEFAULT_CHAIN: tuple[Granularity, ...] = (
    Granularity.MIN10,
    Granularity.MIN30,
    Granularity.H1,
    Granularity.DAY,
    Granularity.WEEK,
)
DEFAULT_CAP = Granularity.WEEK  # seed: week 是默认的语义总结封顶 (a year of weeks ≈ 52 rows)
# A window given by an explicit from/to (an irregular "task phase") instead of granularity + anchor.
RANGE = "range"


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    SKIPPED_EMPTY = "skipped_empty"
    FAILED = "failed"
    GIVEN_UP = "given_up"


class JobKind(StrEnum):
    SUMMARIZE = "summarize"
    RECOMPUTE = "recompute"
    SUMMARIZE_ON_MISS = "summarize_on_miss"


class Source(StrEnum):
    """How a summary was made: aggregated from the finer level's summaries, or from raw entries."""

    CHAIN = "chain"
    RAW = "raw"


class Strategy(StrEnum):
    DIRECT = "direct"
    MAP_REDUCE = "map_reduce"


SECTIONS = ("decisions", "conclusions", "todos", "state_changes", "keywords")


class TowerInputError(ValueError):
    """Bad input at an entry point; the message names where and which field."""

    def __init__(self, field: str, problem: str, where: str = ""):
        self.field, self.problem, self.where = field, problem, where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}field '{field}': {problem}")


# ---- type names ---------------------------------------------------------------------------------

NAME_RE = re.compile(r"[A-Za-z0-9_/-]+")
MAX_NAME_CHARS = 128


def name_problem(name: object) -> str | None:
    """Seed: 名字白名单 [A-Za-z0-9_/-] (防路径穿越). No dot (so no '..' and no clash with
    '<type>.summary'), no leading or trailing '/', no empty segment."""
    if not isinstance(name, str):
        return f"must be a string, got {json_type(name)}"
    if not name:
        return "must not be empty"
    if len(name) > MAX_NAME_CHARS:
        return f"too long: {len(name)} characters (limit {MAX_NAME_CHARS})"
    bad = re.search(r"[^A-Za-z0-9_/-]", name)
    if bad:
        return f"character {bad.group()!r} at position {bad.start()} is not allowed (names are [A-Za-z0-9_/-]+)"
    if name.startswith("/") or name.endswith("/"):
        return "must not start or end with '/'"
    if "//" in name:
        return "must not contain an empty segment ('//')"
    return None


def check_name(name: object, field: str = "name") -> str:
    problem = name_problem(name)
    if problem:
        raise TowerInputError(field, problem)
    assert isinstance(name, str)
    return name


def check_chain(chain: object, field: str = "chain") -> tuple[Granularity, ...]:
    """Non-empty, distinct, strictly increasing granularities (a month's children skip the week:
    weeks do not fit in months, see child_level)."""
    if not isinstance(chain, list | tuple) or not chain:
        raise TowerInputError(field, f"must be a non-empty list of granularities ({', '.join(ORDER)})")
    out: list[Granularity] = []
    for i, g in enumerate(chain):
        if not isinstance(g, str) or g not in ORDER:
            said = "empty" if g == "" else "unknown granularity"
            raise TowerInputError(f"{field}[{i}]", f"{said} (one of {', '.join(ORDER)})")
        out.append(Granularity(g))
    for a, b in zip(out, out[1:], strict=False):
        if RANK[b] <= RANK[a]:
            raise TowerInputError(field, f"must be strictly increasing and distinct: {a} then {b}")
    return tuple(out)


def check_cap(cap: object, field: str = "summary_cap") -> Granularity:
    if not isinstance(cap, str) or cap not in ORDER:
        raise TowerInputError(field, f"unknown granularity (one of {', '.join(ORDER)})")
    return Granularity(cap)


def child_level(chain: Sequence[Granularity], g: Granularity) -> Granularity | None:
    """The finer level whose windows a window of ``g`` refers to (None: the raw entries)."""
    finer = [c for c in chain if RANK[c] < RANK[g]]
    if g == Granularity.MONTH:
        finer = [c for c in finer if c != Granularity.WEEK]
    return finer[-1] if finer else None


def summary_levels(chain: Sequence[Granularity], cap: Granularity) -> list[Granularity]:
    """Levels that may carry a semantic summary: nothing above the cap."""
    return [g for g in chain if RANK[g] <= RANK[cap]]


# ---- the calendar of windows ----------------------------------------------------------------------


# Windows of at most 30 minutes tile elapsed time, as the chunks' buckets do: a DST fall-back day's
# repeated half-hours have windows of their own (a window of one ZoneInfo at 01:30 was the first
# 01:30 only, so an entry of the repeated one fell outside its own 10-minute window). Longer ones
# are wall-clock hours: the hour a clock repeats lasts longer that day (two hours, or 90 minutes).
ELAPSED_MAX_MINUTES = 30


def window_start(g: Granularity, at: datetime, tz: ZoneInfo) -> datetime:
    if g in MINUTES and MINUTES[g] <= ELAPSED_MAX_MINUTES:
        return window_floor(at, tz, MINUTES[g])
    local = at.astimezone(tz)
    if g in MINUTES:
        minute_of_day = local.hour * 60 + local.minute
        m = minute_of_day - minute_of_day % MINUTES[g]
        return datetime(local.year, local.month, local.day, m // 60, m % 60, tzinfo=tz)
    d = local.date()
    if g == Granularity.WEEK:
        d -= timedelta(days=d.weekday())  # weeks start Monday 00:00 (decision)
    elif g == Granularity.MONTH:
        d = d.replace(day=1)
    return datetime(d.year, d.month, d.day, tzinfo=tz)


def window_end(g: Granularity, start: datetime, tz: ZoneInfo) -> datetime:
    if g in MINUTES and MINUTES[g] <= ELAPSED_MAX_MINUTES:
        return elapsed_end(start, MINUTES[g])
    local = start.astimezone(tz)
    if g in MINUTES:
        naive = local.replace(tzinfo=None) + timedelta(minutes=MINUTES[g])
        return naive.replace(tzinfo=tz)
    d = local.date()
    if g == Granularity.DAY:
        d += timedelta(days=1)
    elif g == Granularity.WEEK:
        d += timedelta(days=7)
    else:
        d = next_month(d)
    return datetime(d.year, d.month, d.day, tzinfo=tz)


def windows_between(g: Granularity, start: datetime, end: datetime, tz: ZoneInfo) -> list[tuple[datetime, datetime]]:
    """Every window of ``g`` overlapping [start, end), in order."""
    out = []
    cur = window_start(g, start, tz)
    while cur < end:
        nxt = window_end(g, cur, tz)
        out.append((cur, nxt))
        cur = nxt
    return out


def is_settled(end: datetime, now: datetime, settle: timedelta) -> bool:
    """Guardrail 1: a window is summarized only once closed and quiet for the settle period."""
    return end + settle <= now


def day_of(start: datetime, tz: ZoneInfo) -> date:
    return start.astimezone(tz).date()


def window_label(g: str, start: datetime, tz: ZoneInfo, end: datetime | None = None) -> str:
    local = start.astimezone(tz)
    if g == RANGE and end is not None:
        return f"{local.isoformat(timespec='minutes')}..{end.astimezone(tz).isoformat(timespec='minutes')}"
    if g in (Granularity.DAY, Granularity.WEEK):
        return f"{g} {local.date().isoformat()}"
    if g == Granularity.MONTH:
        return f"month {local:%Y-%m}"
    return f"{g} {local.isoformat(timespec='minutes')}"


# ---- the window a call names ----------------------------------------------------------------------


@dataclass(frozen=True)
class WindowQuery:
    """The window arguments of windows, recall, get_summary, summarize and recompute, as the caller
    gave them: a level (``granularity``) and a moment inside one of its windows (``anchor``), or an
    explicit ``from_`` + ``to``; and the ``group`` (None: every group). A moment is a bare date (its
    midnight in the tower's zone) or an aware instant. Which levels exist is the type's chain, and
    where a date's day begins is the zone: both are checked where the window is resolved
    (recall.resolve). :meth:`parse` builds one from untrusted values (the CLI's options, the MCP
    tools' arguments); building one directly checks the same rules."""

    granularity: Granularity | None = None
    anchor: date | datetime | None = None
    from_: date | datetime | None = None
    to: date | datetime | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        _check_shape(self.granularity, self.anchor, self.from_, self.to)
        for field, value in (("anchor", self.anchor), ("from", self.from_), ("to", self.to)):
            if isinstance(value, datetime) and (problem := instant_problem(value)):
                raise TowerInputError(field, problem)
        _check_group(self.group)

    @classmethod
    def parse(
        cls,
        granularity: object = None,
        anchor: object = None,
        from_: object = None,
        to: object = None,
        group: object = None,
    ) -> WindowQuery:
        # The shape first: a call naming both kinds of window is refused as such, whatever its values.
        _check_shape(granularity, anchor, from_, to)
        return cls(
            granularity=_granularity(granularity),
            anchor=_moment(anchor, "anchor"),
            from_=_moment(from_, "from"),
            to=_moment(to, "to"),
            group=_check_group(group),
        )


def _check_shape(granularity: object, anchor: object, from_: object, to: object) -> None:
    if from_ is None and to is None:
        return
    if granularity is not None or anchor is not None:
        raise TowerInputError("from", "give either granularity + anchor or from + to, not both")
    if from_ is None or to is None:
        raise TowerInputError("to" if from_ is not None else "from", "from and to go together")


def _granularity(value: object) -> Granularity | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in ORDER:
        raise TowerInputError("granularity", f"unknown granularity (one of {', '.join(ORDER)})")
    return Granularity(value)


def _moment(value: object, field: str) -> date | datetime | None:
    """A bare date (YYYY-MM-DD, its midnight is the zone's) or an ISO instant with an offset."""
    if value is None:
        return None
    if isinstance(value, str) and len(value.strip()) == 10:
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            raise TowerInputError(field, "is not a date (YYYY-MM-DD) or an ISO 8601 datetime with an offset") from None
    try:
        return parse_instant(value)
    except ValueError as exc:
        raise TowerInputError(field, str(exc)) from None


def _check_group(value: object) -> str | None:
    """None (every group), the empty group (a type with no group field keeps its entries there), or
    an id."""
    if value is None:
        return None
    if value == "":
        return ""
    if problem := validate_id(value):
        raise TowerInputError("group", problem)
    assert isinstance(value, str)
    return value


# ---- entries ---------------------------------------------------------------------------------------

MAX_CONTENT_CHARS = 100_000
MAX_JSON_DEPTH = 32
FUTURE_TOLERANCE = timedelta(minutes=1)


def json_problem(value: Any) -> str | None:
    """Why ``value`` cannot be stored as a JSON entry: a non-JSON type, a non-finite number, a
    string with a NUL or lone surrogate, nesting deeper than MAX_JSON_DEPTH, or too large."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"{where}: nested deeper than {MAX_JSON_DEPTH} levels"
        if item is None or isinstance(item, bool | int):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{where}: non-finite number (NaN or Infinity is not JSON)"
            continue
        if isinstance(item, str):
            if problem := text_problem(item, MAX_CONTENT_CHARS, controls=True):
                return f"{where}: {problem}"
            continue
        if isinstance(item, dict):
            for key, sub in item.items():
                if not isinstance(key, str):
                    return f"{where}: object keys must be strings"
                if problem := text_problem(key, 256, controls=True):
                    return f"{where}: key: {problem}"
                stack.append((sub, f"{where}.{key[:20]}", depth + 1))
            continue
        if isinstance(item, list):
            stack.extend((sub, f"{where}[{i}]", depth + 1) for i, sub in enumerate(item))
            continue
        return f"{where}: not a JSON value ({type(item).__name__})"
    size = len(json.dumps(value, ensure_ascii=False))
    if size > MAX_CONTENT_CHARS:
        return f"too large: {size} characters as JSON (limit {MAX_CONTENT_CHARS})"
    return None


@dataclass(frozen=True)
class EntryIn:
    """One validated entry to append. ``at_given``: the caller sent ``at`` (else it is the time of
    the append), so a retry of the same request is recognised by what the caller sent."""

    entry_id: str | None
    at: datetime
    group: str
    content: Any
    chars: int
    at_given: bool = True


def validate_entry(raw: object, *, group_field: str | None, now: datetime, where: str = "") -> EntryIn:
    """``raw`` is ``{"content": <any JSON or text>, "at"?: ISO, "id"?: str, "group"?: str}``. The
    group falls back to ``content[group_field]`` when the content is an object that holds it; that
    field must then be a string, and an explicit ``group`` must agree with it."""
    if not isinstance(raw, dict):
        raise TowerInputError("entry", f"must be an object, got {json_type(raw)}", where)
    unknown = sorted(set(raw) - {"content", "at", "id", "group"})
    if unknown:
        # escaped as JSON (a key may hold a line break), without JSON's quotes: the message quotes
        # it (the empty key keeps them, a field is never named by nothing)
        raise TowerInputError(
            json.dumps(unknown[0])[1:-1][:40] or '""', "unknown field (allowed: content, at, id, group)", where
        )
    if "content" not in raw:
        raise TowerInputError("content", "is required (any JSON value or text)", where)
    content = raw["content"]
    if problem := json_problem(content):
        raise TowerInputError("content", problem, where)
    entry_id = raw.get("id")
    if entry_id is not None and (problem := validate_id(entry_id)):
        raise TowerInputError("id", problem, where)
    at, at_given = now, raw.get("at") is not None
    if at_given:
        try:
            at = parse_instant(raw["at"])
        except ValueError as exc:
            raise TowerInputError("at", str(exc), where) from None
        # The store keeps microseconds: finer digits were cut without a word, so a retry whose at
        # differed below a microsecond counted as the same entry, not as the conflict it is.
        if isinstance(raw["at"], str) and (frac := _SUBSECOND.search(raw["at"])) and len(frac.group(1)) > 6:
            raise TowerInputError("at", "is more precise than a microsecond (at most 6 fractional digits)", where)
    if at > now + FUTURE_TOLERANCE:
        raise TowerInputError("at", "is in the future (entries record what happened)", where)
    group = _entry_group(raw.get("group"), content, group_field, where)
    chars = len(content) if isinstance(content, str) else len(json.dumps(content, ensure_ascii=False))
    return EntryIn(entry_id, at, group, content, chars, at_given)


_SUBSECOND = re.compile(r"\d\d:\d\d:\d\d[.,](\d+)")


def _entry_group(given: Any, content: Any, group_field: str | None, where: str) -> str:
    """The explicit ``group``, else the content's group field. A group field that is not a string
    is refused, not turned into the empty group; so is an explicit group that contradicts it."""
    field_value = content.get(group_field) if group_field and isinstance(content, dict) else None
    if field_value is not None and not isinstance(field_value, str):
        raise TowerInputError(
            f"content.{group_field}",
            f"the type's group field must be a string, got {json_type(field_value)}",
            where,
        )
    field = "group"
    if given is None:
        given, field = field_value, f"content.{group_field}"
    elif field_value is not None and given != field_value:
        raise TowerInputError(
            "group", f"{given!r} contradicts the content's {group_field} {field_value!r}"[:300], where
        )
    if given is None:
        return ""
    if not group_field:
        raise TowerInputError("group", "this type has no group field", where)
    if problem := validate_id(given):
        raise TowerInputError(field, problem, where)
    assert isinstance(given, str)
    return given


def entry_text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, sort_keys=True)


# ---- recall pages --------------------------------------------------------------------------------


def check_limit(limit: object, default: int, maximum: int) -> int:
    if limit is None:
        return default
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise TowerInputError("limit", f"must be an integer from 1 to {maximum}")
    return limit


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o{offset}".encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> int:
    if cursor in (None, ""):
        return 0
    if not isinstance(cursor, str) or len(cursor) > 40:
        raise TowerInputError("cursor", "not a cursor returned by a previous page")
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not text.startswith("o"):
            raise ValueError
        offset = int(text[1:])
    except ValueError:
        raise TowerInputError("cursor", "not a cursor returned by a previous page") from None
    if offset < 0:
        raise TowerInputError("cursor", "not a cursor returned by a previous page")
    return offset


# ---- guardrails ----------------------------------------------------------------------------------


def backoff_delay(failures: int, base: timedelta) -> timedelta:
    """Guardrail 4: the wait after ``failures`` consecutive failures doubles from ``base``."""
    factor: int = 2 ** max(0, failures - 1)
    return base * factor


def approx_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4)) if text else 0


@dataclass(frozen=True)
class Plan:
    """How a window's material goes to the model within ``input_budget_tokens``."""

    strategy: Strategy
    chunks: list[list[int]]  # indexes of the items in each call
    clipped: int  # items dropped for the budget (each over the budget alone, or past max_chunks)
    input_tokens: int


def plan_chunks(token_counts: Sequence[int], budget: int, max_chunks: int) -> Plan:
    """Within budget: one direct call. Over: consecutive chunks of at most ``budget`` tokens
    (map_reduce); an item larger than the budget alone, or past ``max_chunks``, is clipped and
    counted, never dropped silently."""
    total = sum(token_counts)
    if total <= budget:
        return Plan(Strategy.DIRECT, [list(range(len(token_counts)))] if token_counts else [], 0, total)
    chunks: list[list[int]] = []
    cur: list[int] = []
    used = clipped = taken = 0
    for i, n in enumerate(token_counts):
        if n > budget:
            clipped += 1
            continue
        if used + n > budget and cur:
            chunks.append(cur)
            cur, used = [], 0
        if len(chunks) >= max_chunks:
            clipped += 1
            continue
        cur.append(i)
        used += n
        taken += n
    if cur and len(chunks) < max_chunks:
        chunks.append(cur)
    elif cur:
        clipped += len(cur)
        taken -= sum(token_counts[i] for i in cur)
    if len(chunks) == 1:
        return Plan(Strategy.DIRECT, chunks, clipped, taken)
    return Plan(Strategy.MAP_REDUCE, chunks, clipped, taken)


# ---- sections ------------------------------------------------------------------------------------

_KEYWORD_SPLIT = re.compile(r"\s*[·,;、，]\s*")


def empty_sections() -> dict[str, list[str]]:
    return {s: [] for s in SECTIONS}


def parse_sections(answer: str) -> dict[str, list[str]]:
    """The model's answer as the five fixed sections (always present, fixed order, empty when
    none). A JSON object with those keys, bare or in a Markdown code fence, is taken as it is; any
    other answer (the offline model's headline of content words) is keywords and one conclusion, so
    nothing the model said is lost."""
    out = empty_sections()
    text = unfenced(answer)
    try:
        doc = json.loads(text) if text.startswith("{") else None
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        for s in SECTIONS:
            value = doc.get(s) or []
            items = value if isinstance(value, list) else [value]
            out[s] = [" ".join(str(v).split()) for v in items if str(v).strip()]
        return out
    if text:
        out["keywords"] = [w for w in _KEYWORD_SPLIT.split(text) if w][:20]
        out["conclusions"] = [text]
    return out


def render_sections(sections: dict[str, list[str]]) -> str:
    lines = []
    for s in SECTIONS:
        items = sections.get(s) or []
        if items:
            lines.append(f"{s}: " + "; ".join(items))
    return "\n".join(lines)


def keyword_overlap(a: dict[str, list[str]], b: dict[str, list[str]]) -> float:
    """Drift score: Jaccard overlap of the words of two summaries' sections (1.0: same words)."""

    def words(sections: dict[str, list[str]]) -> set[str]:
        found: Counter[str] = Counter()
        for s in SECTIONS:
            for item in sections.get(s) or []:
                found.update(w.lower() for w in re.findall(r"\w{3,}", item))
        return set(found)

    wa, wb = words(a), words(b)
    if not wa and not wb:
        return 1.0
    return len(wa & wb) / len(wa | wb)


def provenance(strategy: str, chunks: int, input_tokens: int, clipped: int) -> dict[str, Any]:
    """Seed: {strategy, chunks, inputTokens, clippedEntries}, those keys on every client surface."""
    return {"strategy": strategy, "chunks": chunks, "inputTokens": input_tokens, "clippedEntries": clipped}
