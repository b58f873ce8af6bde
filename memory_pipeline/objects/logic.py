"""Seed 001 (object memory): the pure rules. No I/O, no Dagster, no clock: every function takes
what it needs. The numbers are the seed's (section 5, 参数与恢复); the core I/O modules
(timeline, graph, worker) apply them inside transactions."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

# --- limits (seed 001 §1, §2, §5) -------------------------------------------------------------
EVENT_MAX_CHARS = 32_000
SLICE_MAX_CHARS = 2_000
COMPACT_BATCH_MAX = 8
# Nodes of at most this many characters in all cannot be summarized shorter ("好", "ok"): their head
# may be as long as they are (never longer), or a lone short reply would never leave the timeline.
COMPACT_TINY_CHARS = 16
THRESHOLD_END_RATIO = 0.6
PAGE_MAX_CHARS = 8_000
PAGE_MIN_CHARS = 256
BUDGET_DEFAULT_BYTES = 96_000
BUDGET_MIN_BYTES = 24_000
BUDGET_MAX_BYTES = 200_000
PROPOSAL_MAX_BYTES = 900_000
SUMMARY_MAX_CHARS = 400
BODY_MAX_CHARS = 16_000
PROGRESS_MAX_CHARS = 2_000
REASON_MAX_CHARS = 1_000
MAX_OBJECTS_PER_WRITE = 32
MAX_RELATIONS_PER_WRITE = 64
MAX_CORE_PER_WRITE = 3
DEEP_BATCH_MAX = 4
WORKER_TIMEOUT_DEFAULT_SECONDS = 300
LEASE_EXTRA_SECONDS = 60
MAX_CONSECUTIVE_FAILURES = 5
AUTO_SUPPRESS = timedelta(hours=1)
MAX_MODEL_ROUNDS = 16
MAX_FIELD_CORRECTIONS = 3
OUTPUT_TOKENS_DEFAULT = 32_768
OUTPUT_TOKENS_MAX = 131_072
STATUS_EARLIEST = 20
PROJECTION_PER_PASS = 10
PROJECTION_PAGE = 50
HOT_VIEW_MAX_BYTES = 350_000
DEEP_AT = time(2, 50)
DEEP_QUIET = timedelta(minutes=5)
NAME_MAX_CHARS = 200
ALIAS_MAX = 32
CUE_MAX = 32
SHORT_MAX_CHARS = 200  # one alias, one cue, purpose, reference
# The largest value of a PostgreSQL INTEGER column (revisions, page cursors, counts): an integer
# taken from outside (an offset, a revision, a count) past it is refused up-front by name, never
# left to the database's overflow error.
INT_MAX = 2_147_483_647


def int_problem(value: int, minimum: int = 0) -> str | None:
    """Why an integer is outside ``minimum``..INT_MAX (None when it is within)."""
    if value < minimum:
        return f"must be at least {minimum:,}, got {value}"
    if value > INT_MAX:
        return f"must be at most {INT_MAX:,}, got {value}"
    return None


def shown_at(at: datetime, tz: ZoneInfo | None) -> str:
    """A time as an objects answer gives it: in ``tz`` to the second, as operators and agents read
    every time (the memory server, the command line); with None as stored (UTC, to the
    microsecond), what the organize model's prompts, the Markdown projection and find's index hold."""
    return at.isoformat() if tz is None else at.astimezone(tz).isoformat(timespec="seconds")


class ObjectType(StrEnum):
    PERSON = "person"
    TASK = "task"
    TO_DO = "todo"  # seed 001's 待办 (to-do) object type: a value, not a marker
    SCHEDULE = "schedule"
    KNOWLEDGE = "knowledge"
    PROJECT = "project"
    CREDENTIAL = "credential"


class ObjectStatus(StrEnum):
    """Memory lifecycle (object.status); business states (to-do/done) live in the body."""

    CANDIDATE = "candidate"
    ACTIVE = "active"
    ARCHIVED = "archived"


class RelationLabel(StrEnum):
    MEMBER_OF = "member_of"  # object -> project; an object may be member of many projects
    RELATED_TO = "related_to"
    ASSIGNED_TO = "assigned_to"
    DEPENDS_ON = "depends_on"
    ABOUT = "about"
    SUPERSEDES = "supersedes"
    KNOWS = "knows"


class Outcome(StrEnum):
    CONTINUE = "continue"
    LINKED = "linked"
    ARCHIVE_ONLY = "archive_only"


class EventState(StrEnum):
    """Where an event is: still in the hot timeline, queued for archiving (pending), partly read
    (in_progress, after a continue), final (linked / archive_only), or blocked after 5 failures.
    ``oversized``: longer than 32,000 characters (the seed's event limit), so never organized: its
    own outcome, which status, the range status and the day check count as not organized (never
    complete); the raw event stays readable by time."""

    HOT = "hot"
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    LINKED = "linked"
    ARCHIVE_ONLY = "archive_only"
    BLOCKED = "blocked"
    OVERSIZED = "oversized"


FINAL_STATES = (EventState.LINKED, EventState.ARCHIVE_ONLY)
QUEUED_STATES = (EventState.PENDING, EventState.IN_PROGRESS)
NOT_ORGANIZED_STATES = (EventState.OVERSIZED,)  # final for the pipeline, yet never organized


class JobMode(StrEnum):
    COMPACT = "compact"
    ORGANIZE = "organize"
    DEEP = "deep"


class JobOrigin(StrEnum):
    THRESHOLD = "threshold"
    HOURLY = "hourly"
    NIGHTLY = "nightly"
    EXPLICIT = "explicit"


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class DayStatus(StrEnum):
    COMPLETE = "complete"
    PARTIAL = "partial"
    OPEN = "open"
    EMPTY = "empty"


CORE_NAMES = ("AGENTS.md", "SOUL.md", "USER.md")


class CoreAuthor(StrEnum):
    """Who wrote a version of a core document."""

    MODEL = "model"  # an organize / deep commit (its receipt token kept)
    HUMAN = "human"  # a human edit, imported
    UNKNOWN = "unknown"  # written before core history was kept


BUILTIN_DAILY = "project:daily"


def _unknown_field(where: str, keys: Iterable[Any], allowed: set[str]) -> None:
    extra = sorted(str(k) for k in set(keys) - allowed)
    if extra:
        name = extra[0]
        field = f"{where}.{name}" if where and name else (name or where or "submission")
        raise SubmissionError(field, f"unknown field {name!r} (fields: {', '.join(sorted(allowed))})")


class SubmissionError(ValueError):
    """A refused submission: ``field`` names what is wrong (a field path such as
    ``objects[2].summary``), ``problem`` says how. Nothing of it is written."""

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


# --- the hot timeline ---------------------------------------------------------------------------
def slices(text: str, size: int = SLICE_MAX_CHARS) -> list[str]:
    """Raw hot-timeline slices of an event: consecutive, each at most ``size`` characters."""
    if not text:
        return [""]
    return [text[i : i + size] for i in range(0, len(text), size)]


def slice_range(index: int, size: int = SLICE_MAX_CHARS) -> tuple[int, int]:
    """The characters [start, stop) of its event that raw slice ``index`` covers (``slices``)."""
    return index * size, (index + 1) * size


def estimate_tokens(text: str, chars_per_token: float) -> int:
    """The one estimator of the hot timeline (seed: 沿用估算 token 口径): characters / ratio."""
    return math.ceil(len(text) / chars_per_token) if text else 0


def threshold_done(estimate: int, threshold: int) -> bool:
    """A threshold compaction ends once the estimate is below 60% of the threshold."""
    return estimate < THRESHOLD_END_RATIO * threshold


def kept_hot_on_enable(lengths_newest_first: Iterable[int], chars_per_token: float, threshold_tokens: int) -> int:
    """Enabling the domain on a store that had no object memory: how many of a world's newest
    events (their lengths, newest first) stay in the hot timeline. As many as keep the estimate
    below 60% of the compaction threshold, where a threshold compaction would have stopped; every
    older event counts as already compacted (queued for archiving, no hot slices)."""
    budget = THRESHOLD_END_RATIO * threshold_tokens
    used = kept = 0
    for length in lengths_newest_first:
        est = math.ceil(length / chars_per_token)
        if used + est >= budget:
            break
        used += est
        kept += 1
    return kept


def shrink(size: int, floor: int = 1) -> int:
    """The next smaller batch after a capacity failure (halving, never below ``floor``)."""
    return max(floor, size // 2)


def head_level(child_levels: Iterable[int]) -> int:
    """A head sits one level above its highest child, so heads expand level by level."""
    return max(child_levels, default=0) + 1


def compact_pick(level_counts: Mapping[int, int], size: int, *, whole_range: bool) -> tuple[int, int] | None:
    """What the next compact batch merges, from the number of active nodes per level in the
    job's range: ``(level, count)``, the oldest ``count`` nodes of that one level; None when the
    job is done. A batch never mixes levels, so heads form a tree of fan-out 8 whose depth grows
    with log8 of the slices (a head is never folded into the next batch as a chain would).

    First a full group of 8 at the lowest level that has one; then an explicit compact (which
    covers its whole range) takes the raw slices left, fewer than 8; a threshold job (which only
    needs the estimate down) the lowest level with at least 2 nodes. ``size`` (8, halved after a
    capacity failure) caps the count."""
    full = [lv for lv, n in level_counts.items() if n >= COMPACT_BATCH_MAX]
    if full:
        return min(full), min(size, COMPACT_BATCH_MAX)
    if whole_range:
        raw = level_counts.get(0, 0)
        return (0, min(size, raw)) if raw else None
    several = [lv for lv, n in level_counts.items() if n >= 2]
    if not several:
        return None
    level = min(several)
    return level, min(size, level_counts[level])


def check_compact_submission(args: Any, batch_ids: Sequence[str], batch_chars: int) -> str:
    """The compact submit tool's arguments -> the summary. Refused: any key but summary/covers (an
    object write during compact), coverage other than exactly the batch, a result not shorter (nodes
    of at most COMPACT_TINY_CHARS characters in all: a result longer)."""
    if not isinstance(args, Mapping):
        raise SubmissionError("submit_compact", f"arguments must be an object, got {_json_type(args)}")
    extra = sorted(str(k) for k in set(args) - {"summary", "covers"})
    if extra:
        raise SubmissionError(
            extra[0] or "submit_compact",
            f"unknown field {extra[0]!r}: compact only submits a summary of its nodes; object writes are refused during compact",
        )
    summary = args.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise SubmissionError("summary", "must be a non-empty string")
    covers = args.get("covers")
    if not isinstance(covers, list) or any(not isinstance(c, str) for c in covers):
        raise SubmissionError("covers", "must be a list of node ids")
    if sorted(covers) != sorted(batch_ids) or len(set(covers)) != len(covers):
        missing = sorted(set(batch_ids) - set(covers))
        foreign = sorted(set(covers) - set(batch_ids))
        raise SubmissionError(
            "covers", f"must cover exactly the batch's nodes (missing {missing}, not in batch {foreign})"
        )
    if len(summary) > batch_chars or (len(summary) == batch_chars and batch_chars > COMPACT_TINY_CHARS):
        raise SubmissionError("summary", f"not shorter than its nodes: {len(summary)} >= {batch_chars} characters")
    return summary


# --- organize pages and the transfer budget ----------------------------------------------------
def page_chars(budget_left_bytes: int, failures: int) -> int:
    """Characters of the next page: 8,000, halved per failure, shrunk to the budget left (a
    character may take 4 UTF-8 bytes), never below 256."""
    size = PAGE_MAX_CHARS
    for _ in range(failures):
        size = shrink(size, PAGE_MIN_CHARS)
    size = min(size, max(0, budget_left_bytes) // 4)
    return max(PAGE_MIN_CHARS, size)


def check_budget(value: int) -> int:
    if not BUDGET_MIN_BYTES <= value <= BUDGET_MAX_BYTES:
        raise SubmissionError(
            "transfer_budget_bytes", f"must be within {BUDGET_MIN_BYTES:,}–{BUDGET_MAX_BYTES:,}, got {value:,}"
        )
    return value


def json_bytes(value: Any) -> int:
    """What a value takes in the transfer budget: its JSON as sent (UTF-8, not ASCII-escaped)."""
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


def fit_objects(objects: Sequence[Mapping[str, Any]], budget_bytes: int) -> list[Mapping[str, Any]]:
    """Related objects in order while their JSON fits the bytes left (the claim's transfer budget)."""
    out, used = [], 0
    for obj in objects:
        size = json_bytes(obj)
        if used + size > budget_bytes:
            break
        out.append(obj)
        used += size
    return out


def fitting_prefix(sizes: Sequence[int], budget_bytes: int) -> int:
    """How many of ``sizes``, in order, fit ``budget_bytes`` together (a prefix: a deep review
    batch takes its objects in inventory order, which advances by the objects reviewed)."""
    used = 0
    for n, size in enumerate(sizes):
        used += size
        if used > budget_bytes:
            return n
    return len(sizes)


def fit_result(result: Mapping[str, Any], left: int, budget: int, offset: int = 0) -> tuple[dict[str, Any], int]:
    """A read-tool result as a batch sends it within the ``left`` bytes of its transfer budget, and
    its size: whole when it fits; a list result cut to the first items that fit (saying so, with
    ``next_offset`` to read on when the tool pages); otherwise refused with a note of the numbers."""
    whole = dict(result)
    size = json_bytes(whole)
    if size <= left:
        return whole, size
    items = whole.get("items")
    if isinstance(items, list):
        for k in range(len(items) - 1, 0, -1):
            cut = {
                **whole,
                "items": items[:k],
                "truncated": f"the first {k} of {len(items)} items: {left:,} bytes were left of this batch's "
                f"transfer budget of {budget:,}",
            }
            if "next_offset" in whole:
                cut["next_offset"] = offset + k
            cut_size = json_bytes(cut)
            if cut_size <= left:
                return cut, cut_size
    refused = {
        "refused": f"the result is {size:,} bytes and {max(0, left):,} bytes are left of this batch's transfer "
        f"budget of {budget:,}: not sent"
    }
    return refused, json_bytes(refused)


# --- objects, relations, graph writes ------------------------------------------------------------
# fullmatch: "$" alone matches before a final newline. Control characters (C0, DEL, C1) and lone
# surrogates (which no UTF-8 store or JSON answer can carry) are never part of a key.
_KEY = re.compile(r"[^\s:/\\#?*\[\]\x00-\x1f\x7f-\x9f\ud800-\udfff]{1,96}")
# Secrets look like provider keys, tokens, private keys or password assignments, or a long
# unbroken run of letters and digits mixing classes (entropy). A reference names where the secret
# lives ("1Password: GitHub deploy key"), never the secret itself. A placeholder ("password:
# unknown") is no secret.
_PLACEHOLDER = r"(?!(?:unknown|none|null|n/a|redacted|hidden|not set|<[^>]*>|\*+)(?:\W|$))"
_SECRET_PATTERNS = [
    re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    re.compile(r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key)\s*[:=]\s*" + _PLACEHOLDER + r"\S{4,}"),
    re.compile(r"(?i)(密码|口令|密钥|令牌)\s*[:：=]\s*" + _PLACEHOLDER + r"\S{4,}"),
]
_LONG_RUN = re.compile(r"[A-Za-z0-9+/_=-]{24,}")


def looks_like_secret(value: str, *, strict: bool = True) -> bool:
    """A value that looks like a secret. ``strict`` (a credential's fields) adds the entropy rule;
    in other objects only the unmistakable shapes count, so a commit hash or an id in a knowledge
    body is not taken for a key."""
    if any(p.search(value) for p in _SECRET_PATTERNS):
        return True
    if not strict:
        return False
    for run in _LONG_RUN.findall(value):
        classes = sum(bool(re.search(p, run)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]"))
        if classes >= 3 or (classes == 2 and re.search(r"[0-9]", run) and len(run) >= 32):
            return True
    return False


def parse_object_id(value: object, where: str) -> tuple[ObjectType, str]:
    """``<type>:<key>``, the stable id (seed 001 §1)."""
    if not isinstance(value, str) or ":" not in value:
        raise SubmissionError(where, f"must be '<type>:<key>', got {_shown(value)}")
    kind, key = value.split(":", 1)
    try:
        otype = ObjectType(kind)
    except ValueError:
        raise SubmissionError(where, f"unknown type {kind!r} (types: {', '.join(ObjectType)})") from None
    if not _KEY.fullmatch(key):
        raise SubmissionError(
            where,
            f"key {_shown(key)} must be 1-96 characters without spaces, control characters, "
            "':', '/', '#', '?', '*', brackets",
        )
    return otype, key


@dataclass(frozen=True)
class ObjectWrite:
    object_id: str
    type: ObjectType
    name: str
    aliases: tuple[str, ...]
    summary: str
    body: str
    cues: tuple[str, ...]
    status: ObjectStatus | None
    purpose: str | None = None
    reference: str | None = None

    def content(self) -> dict[str, Any]:
        """The fields compared to tell an unchanged object from a rewrite."""
        return {
            "name": self.name,
            "aliases": list(self.aliases),
            "summary": self.summary,
            "body": self.body,
            "cues": list(self.cues),
            "purpose": self.purpose,
            "reference": self.reference,
        }


@dataclass(frozen=True)
class RelationWrite:
    src: str
    label: RelationLabel
    dst: str


@dataclass(frozen=True)
class CoreWrite:
    name: str
    content: str


@dataclass(frozen=True)
class GraphWrite:
    """A validated graph-write submission (organize and deep share it)."""

    token: str
    graph_revision: int
    outcome: Outcome | None
    page_end: int | None
    progress: str
    reason: str
    objects: tuple[ObjectWrite, ...] = ()
    relations: tuple[RelationWrite, ...] = ()
    attach: tuple[str, ...] = ()
    core: tuple[CoreWrite, ...] = ()
    reviewed: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()  # event ids cited as evidence (must be the claimed event)
    event_id: str | None = None  # organize: the claimed event this write disposes of
    archive_relations: tuple[tuple[str, str, str], ...] = ()  # deep only: legacy relations to archive

    @property
    def object_targets(self) -> set[str]:
        return {o.object_id for o in self.objects} | set(self.attach)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def _shown(value: Any, limit: int = 40) -> str:
    if not isinstance(value, str):
        return _json_type(value)
    return repr(value[:limit]) + ("…" if len(value) > limit else "")


def _text(raw: Mapping[str, Any], key: str, where: str, limit: int, *, required: bool = False) -> str:
    value = raw.get(key, "")
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise SubmissionError(f"{where}.{key}" if where else key, f"must be a string, got {_json_type(value)}")
    if required and not value.strip():
        raise SubmissionError(f"{where}.{key}" if where else key, "must not be empty")
    if len(value) > limit:
        # Refused, never cut (the ceil(1.5x) rule of seed 000 does not apply to dossiers).
        raise SubmissionError(
            f"{where}.{key}" if where else key, f"too long: {len(value):,} characters (limit {limit:,})"
        )
    if "\x00" in value:
        raise SubmissionError(f"{where}.{key}" if where else key, "contains a NUL character")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise SubmissionError(f"{where}.{key}" if where else key, "contains a lone surrogate")
    return value


def _strings(raw: Mapping[str, Any], key: str, where: str, most: int) -> tuple[str, ...]:
    value = raw.get(key) or []
    if not isinstance(value, list):
        raise SubmissionError(f"{where}.{key}", f"must be a list of strings, got {_json_type(value)}")
    if len(value) > most:
        raise SubmissionError(f"{where}.{key}", f"at most {most} entries, got {len(value)}")
    out = []
    for i, item in enumerate(value):
        out.append(_text({f"{key}[{i}]": item}, f"{key}[{i}]", where, SHORT_MAX_CHARS, required=True))
    return tuple(out)


def check_object(raw: Any, where: str) -> ObjectWrite:
    if not isinstance(raw, Mapping):
        raise SubmissionError(where, f"must be an object, got {_json_type(raw)}")
    allowed = {"id", "name", "aliases", "summary", "body", "cues", "status", "purpose", "reference"}
    _unknown_field(where, raw, allowed)
    object_id = raw.get("id")
    otype, _ = parse_object_id(object_id, f"{where}.id")
    status_raw = raw.get("status")
    status = None
    if status_raw is not None:
        try:
            status = ObjectStatus(status_raw)
        except ValueError:
            raise SubmissionError(
                f"{where}.status", f"unknown status {_shown(status_raw)} (statuses: {', '.join(ObjectStatus)})"
            ) from None
    purpose = reference = None
    if otype is ObjectType.CREDENTIAL:
        purpose = _text(raw, "purpose", where, SHORT_MAX_CHARS, required=True)
        reference = _text(raw, "reference", where, SHORT_MAX_CHARS, required=True)
    elif "purpose" in raw or "reference" in raw:
        raise SubmissionError(f"{where}.purpose", "only a credential has purpose and reference")
    obj = ObjectWrite(
        object_id=str(object_id),
        type=otype,
        name=_text(raw, "name", where, NAME_MAX_CHARS, required=True),
        aliases=_strings(raw, "aliases", where, ALIAS_MAX),
        summary=_text(raw, "summary", where, SUMMARY_MAX_CHARS),
        body=_text(raw, "body", where, BODY_MAX_CHARS),
        cues=_strings(raw, "cues", where, CUE_MAX),
        status=status,
        purpose=purpose,
        reference=reference,
    )
    _refuse_secrets(obj, where)
    return obj


def _refuse_secrets(obj: ObjectWrite, where: str) -> None:
    """No object keeps a secret value, whatever its type; a credential keeps only its purpose and
    a reference to where the secret lives (and is held to the stricter rule)."""
    strict = obj.type is ObjectType.CREDENTIAL
    fields = [(key, getattr(obj, key) or "") for key in ("name", "summary", "body", "purpose", "reference")]
    fields += [(f"aliases[{i}]", a) for i, a in enumerate(obj.aliases)]
    fields += [(f"cues[{i}]", c) for i, c in enumerate(obj.cues)]
    for key, value in fields:
        if looks_like_secret(value, strict=strict):
            raise SubmissionError(
                f"{where}.{key}",
                "looks like a secret value; memory never keeps one (a credential object keeps its purpose "
                "and a reference to where the secret lives)",
            )


def check_relation(raw: Any, where: str) -> RelationWrite:
    if not isinstance(raw, Mapping):
        raise SubmissionError(where, f"must be an object, got {_json_type(raw)}")
    _unknown_field(where, raw, {"src", "label", "dst"})
    src, dst, label = raw.get("src"), raw.get("dst"), raw.get("label")
    parse_object_id(src, f"{where}.src")
    dst_type, _ = parse_object_id(dst, f"{where}.dst")
    try:
        lab = RelationLabel(str(label)) if isinstance(label, str) else RelationLabel("")
    except ValueError:
        raise SubmissionError(
            f"{where}.label", f"{_shown(label)} is not a relation label (labels: {', '.join(RelationLabel)})"
        ) from None
    if lab is RelationLabel.MEMBER_OF and dst_type is not ObjectType.PROJECT:
        raise SubmissionError(f"{where}.dst", "member_of points to a project")
    if src == dst:
        raise SubmissionError(f"{where}.dst", "a relation joins two different objects")
    return RelationWrite(str(src), lab, str(dst))


def check_graph_write(args: Any, *, deep: bool = False, size_bytes: int | None = None) -> GraphWrite:
    """Shape, types and every per-field and per-write limit of a submission; the checks against
    the store (revision, lease, unread objects, evidence, pages) are the core's. ``size_bytes``:
    the proposal's size as it was transferred (the tool call's arguments string as received);
    without it, its JSON as UTF-8."""
    size = json_bytes(args) if size_bytes is None else size_bytes
    if size >= PROPOSAL_MAX_BYTES:
        raise SubmissionError("submission", f"proposal is {size:,} bytes (must be under {PROPOSAL_MAX_BYTES:,})")
    if not isinstance(args, Mapping):
        raise SubmissionError("submission", f"must be an object, got {_json_type(args)}")
    allowed = {
        "token",
        "graph_revision",
        "event_id",
        "outcome",
        "page_end",
        "progress",
        "reason",
        "objects",
        "relations",
        "attach",
        "core",
        "reviewed",
        "evidence",
        "archive_relations",
    }
    _unknown_field("", args, allowed)
    token = args.get("token")
    if not isinstance(token, str) or not 8 <= len(token) <= 128:
        raise SubmissionError("token", "must be a string of 8-128 characters (the submission token)")
    revision = args.get("graph_revision")
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
        raise SubmissionError("graph_revision", f"must be a non-negative integer, got {_json_type(revision)}")
    if revision > INT_MAX:
        raise SubmissionError("graph_revision", f"must be at most {INT_MAX:,}, got {revision}")
    outcome = None
    if not deep or args.get("outcome") is not None:
        try:
            raw_outcome = args.get("outcome")
            outcome = Outcome(raw_outcome if isinstance(raw_outcome, str) else "")
        except ValueError:
            raise SubmissionError(
                "outcome", f"{_shown(args.get('outcome'))} is not an outcome ({', '.join(Outcome)})"
            ) from None
    page_end = args.get("page_end")
    if not deep and (isinstance(page_end, bool) or not isinstance(page_end, int) or page_end < 0):
        raise SubmissionError("page_end", "must be a non-negative integer (characters of the event read so far)")
    if isinstance(page_end, int) and not isinstance(page_end, bool) and page_end > INT_MAX:
        raise SubmissionError("page_end", f"must be at most {INT_MAX:,}, got {page_end}")
    lists: dict[str, list[Any]] = {}
    for key in ("objects", "relations", "attach", "core", "reviewed", "evidence", "archive_relations"):
        value = args.get(key) or []
        if not isinstance(value, list):
            raise SubmissionError(key, f"must be a list, got {_json_type(value)}")
        lists[key] = value
    if len(lists["objects"]) > MAX_OBJECTS_PER_WRITE:
        raise SubmissionError(
            "objects", f"at most {MAX_OBJECTS_PER_WRITE} objects per graph write, got {len(lists['objects'])}"
        )
    if len(lists["relations"]) > MAX_RELATIONS_PER_WRITE:
        raise SubmissionError(
            "relations", f"at most {MAX_RELATIONS_PER_WRITE} relations per graph write, got {len(lists['relations'])}"
        )
    if len(lists["core"]) > MAX_CORE_PER_WRITE:
        raise SubmissionError(
            "core", f"at most {MAX_CORE_PER_WRITE} core targets per graph write, got {len(lists['core'])}"
        )
    objects = tuple(check_object(o, f"objects[{i}]") for i, o in enumerate(lists["objects"]))
    ids = [o.object_id for o in objects]
    if len(set(ids)) != len(ids):
        raise SubmissionError("objects", "an object id appears twice in one write")
    relations = tuple(check_relation(r, f"relations[{i}]") for i, r in enumerate(lists["relations"]))
    attach = []
    for i, a in enumerate(lists["attach"]):
        parse_object_id(a, f"attach[{i}]")
        attach.append(str(a))
    core: list[CoreWrite] = []
    for i, c in enumerate(lists["core"]):
        if not isinstance(c, Mapping) or c.get("name") not in CORE_NAMES:
            raise SubmissionError(f"core[{i}].name", f"must be one of {', '.join(CORE_NAMES)}")
        _unknown_field(f"core[{i}]", c, {"name", "content"})
        if any(w.name == c["name"] for w in core):
            raise SubmissionError(f"core[{i}].name", f"{c['name']} appears twice in one write")
        core.append(CoreWrite(str(c["name"]), _text(c, "content", f"core[{i}]", BODY_MAX_CHARS)))
    reviewed = []
    for i, r in enumerate(lists["reviewed"]):
        parse_object_id(r, f"reviewed[{i}]")
        reviewed.append(str(r))
    event_id = args.get("event_id")
    if not deep and (not isinstance(event_id, str) or not event_id):
        raise SubmissionError("event_id", "must name the claimed event")
    evidence = []
    for i, e in enumerate(lists["evidence"]):
        if not isinstance(e, str) or not e:
            raise SubmissionError(f"evidence[{i}]", "must be an event id")
        evidence.append(e)
    return GraphWrite(
        token=token,
        graph_revision=revision,
        outcome=outcome,
        page_end=page_end if isinstance(page_end, int) else None,
        progress=_text(args, "progress", "", PROGRESS_MAX_CHARS),
        reason=_text(args, "reason", "", REASON_MAX_CHARS),
        objects=objects,
        relations=relations,
        attach=tuple(attach),
        core=tuple(core),
        reviewed=tuple(reviewed),
        archive_relations=tuple(_legacy_refs(lists["archive_relations"], deep)),
        evidence=tuple(evidence),
        event_id=event_id if isinstance(event_id, str) else None,
    )


def _legacy_refs(raw: list[Any], deep: bool) -> list[tuple[str, str, str]]:
    """Legacy free-text relations a deep review archives (code never maps them to a label)."""
    if raw and not deep:
        raise SubmissionError("archive_relations", "only a deep review archives legacy relations")
    out = []
    for i, r in enumerate(raw):
        where = f"archive_relations[{i}]"
        if not isinstance(r, Mapping) or set(r) != {"src", "label", "dst"}:
            raise SubmissionError(where, "must be an object with src, label, dst")
        parse_object_id(r["src"], f"{where}.src")
        parse_object_id(r["dst"], f"{where}.dst")
        label = _text(r, "label", where, 256, required=True)
        out.append((str(r["src"]), label, str(r["dst"])))
    return out


def check_outcome(
    write: GraphWrite,
    *,
    page_start: int,
    page_stop: int,
    event_chars: int,
    changed: bool,
    had_target: bool,
) -> None:
    """The outcome table of seed 001 §2 against the claimed page [page_start, page_stop) of an
    event of ``event_chars`` characters. ``changed``: the write really changes objects, relations
    or core; ``had_target``: the event already has an object target from an earlier batch."""
    end = write.page_end if write.page_end is not None else -1
    if end > page_stop:
        raise SubmissionError(
            "page_end", f"{end} is past the claimed page (ends at {page_stop}): a skipped unread page"
        )
    if end < page_start or (end < page_stop and end <= page_start):
        raise SubmissionError("page_end", f"{end} does not advance past the page start {page_start}")
    read_all = end >= event_chars
    has_target = bool(write.object_targets or write.core)
    if write.outcome is Outcome.CONTINUE:
        if read_all and not changed:
            raise SubmissionError(
                "outcome", "continue on the last page must really change objects, relations or core (no idle continue)"
            )
        if len(write.progress.strip()) == 0:
            raise SubmissionError("progress", "continue saves a progress note; it is empty")
    elif write.outcome is Outcome.LINKED:
        if not read_all:
            raise SubmissionError("outcome", f"linked needs the whole event read (read {end} of {event_chars})")
        if not has_target and not had_target:
            raise SubmissionError("outcome", "linked needs at least one durable object or core target")
    elif write.outcome is Outcome.ARCHIVE_ONLY:
        if not read_all:
            raise SubmissionError("outcome", f"archive_only needs the whole event read (read {end} of {event_chars})")
        if has_target or had_target:
            raise SubmissionError(
                "outcome", "archive_only refused: the event has an object target (it cannot be without long-term value)"
            )
        if not write.reason.strip():
            raise SubmissionError("reason", "archive_only states why no object needs updating; it is empty")


# --- scheduling rules ---------------------------------------------------------------------------
@dataclass(frozen=True)
class JobView:
    """What rotation needs of a job."""

    job_id: int
    origin: JobOrigin
    created_at: datetime
    last_claimed_at: datetime | None
    not_before: datetime | None = None
    mode: JobMode | None = None


def waits_for_compact(job: JobView, jobs: Sequence[JobView]) -> bool:
    """Compact first, then organize: an explicit organize / deep request does not start while an
    explicit compact requested before it (a smaller job id) in its world is unfinished, so what
    that compact queues is organized by it ("organize now")."""
    return (
        job.origin is JobOrigin.EXPLICIT
        and job.mode not in (None, JobMode.COMPACT)
        and any(j.mode is JobMode.COMPACT and j.origin is JobOrigin.EXPLICIT and j.job_id < job.job_id for j in jobs)
    )


def rotation_order(jobs: Sequence[JobView], now: datetime) -> list[JobView]:
    """Least-recently claimed first; among never-claimed jobs explicit requests first (then by
    age). A job backing off after a failure waits for its time; an explicit organize / deep
    request waits for the explicit compact requested before it (``waits_for_compact``).
    ``jobs``: the world's unfinished jobs."""
    ready = [j for j in jobs if (j.not_before is None or j.not_before <= now) and not waits_for_compact(j, jobs)]
    never = [j for j in ready if j.last_claimed_at is None]
    claimed = [j for j in ready if j.last_claimed_at is not None]
    never.sort(key=lambda j: (j.origin is not JobOrigin.EXPLICIT, j.created_at, j.job_id))
    claimed.sort(key=lambda j: (j.last_claimed_at, j.job_id))
    return never + claimed


def grown_output_tokens(current: int, cap: int | None) -> int | None:
    """After an answer truncated at ``current`` tokens: double it, up to 131,072 and never above
    ``cap``; None when it cannot grow (already the most allowed)."""
    most = OUTPUT_TOKENS_MAX if cap is None else min(OUTPUT_TOKENS_MAX, cap)
    grown = min(current * 2, most)
    return grown if grown > current else None


def lease_seconds(worker_timeout_seconds: int) -> int:
    """Worker timeout + 60 s (default 300 + 60 = 360)."""
    return worker_timeout_seconds + LEASE_EXTRA_SECONDS


def backoff_seconds(base: float, failures: int) -> float:
    return base * (2 ** max(0, failures - 1)) if failures else 0.0


def deep_due(now_local: datetime, last_deep_date: date | None, last_activity_local: datetime | None) -> bool:
    """The nightly deep review: due on a local date from 02:50 on, at most once per date, after
    five quiet minutes. Started late, it catches up the current local date only (earlier missed
    dates are never run: only today's date is ever due)."""
    today = now_local.date()
    if last_deep_date is not None and last_deep_date >= today:
        return False
    if now_local.time() < DEEP_AT:
        return False
    return last_activity_local is None or now_local - last_activity_local >= DEEP_QUIET


def day_status(counts: Mapping[str, int], *, open_day: bool) -> DayStatus:
    """A CST day of events is complete only when every event is linked/archive_only; anything
    blocked, queued, still hot or oversized (never organized) makes it partial (never reported
    complete)."""
    total = sum(counts.values())
    if total == 0:
        return DayStatus.OPEN if open_day else DayStatus.EMPTY
    final = sum(counts.get(s, 0) for s in FINAL_STATES)
    if final == total and not open_day:
        return DayStatus.COMPLETE
    return DayStatus.OPEN if open_day and not counts.get(EventState.BLOCKED) else DayStatus.PARTIAL


# --- Markdown projection -------------------------------------------------------------------------
def projection_hash(object_id: str) -> str:
    """The stable hash of an object id its file names are made of."""
    return hashlib.sha256(object_id.encode()).hexdigest()[:16]


def projection_path(object_id: str) -> str:
    """``<type>/<stable hash of the id>.md``: no name clashes, no path problems."""
    otype = object_id.split(":", 1)[0]
    return f"{otype}/{projection_hash(object_id)}.md"


# A file name the projection writes in a type folder: the first page, or continuation page N >= 2.
PROJECTION_FILE = re.compile(r"([0-9a-f]{16})(?:\.p([2-9]|[1-9][0-9]+))?\.md")


def stale_projection_files(names: Iterable[str], pages_by_hash: Mapping[str, int | None]) -> list[str]:
    """Of the file names in one type folder, those the projection wrote there that should no longer
    exist: any page of an id the store has no object of this type for (re-keyed, removed), or a
    continuation page past the pages the object's file was last written with (it shrank).
    ``pages_by_hash``: each object of the folder's type, by ``projection_hash``, with those pages
    (None: never projected yet, so none of its pages is judged). Other names are not the
    projection's and are left alone."""
    out = []
    for name in names:
        m = PROJECTION_FILE.fullmatch(name)
        if m is None:
            continue
        digest, page = m.group(1), int(m.group(2) or 1) - 1
        if digest not in pages_by_hash:
            out.append(name)
        elif (pages := pages_by_hash[digest]) is not None and page >= pages:
            out.append(name)
    return sorted(out)


@dataclass
class Dossier:
    object_id: str
    type: str
    name: str
    status: str
    summary: str
    body: str
    aliases: list[str] = field(default_factory=list)
    cues: list[str] = field(default_factory=list)
    purpose: str | None = None
    reference: str | None = None
    relations: list[tuple[str, str, str]] = field(default_factory=list)  # (src, label, dst)
    sources: list[tuple[str, str]] = field(default_factory=list)  # (event id, occurred_at iso)


def _md_escape(text: str) -> str:
    return text.replace("\n", " ").replace("|", "\\|")


def render_markdown(d: Dossier, page: int = 0) -> str:
    """One object's file (page 0) or a continuation page: current body, cues, relations and
    attachment times/ids, at most 50 relations and 50 sources per file."""
    lo, hi = page * PROJECTION_PAGE, (page + 1) * PROJECTION_PAGE
    lines = [f"# {_md_escape(d.name)}", "", f"`{d.object_id}` · {d.type} · {d.status}", ""]
    if page == 0:
        if d.aliases:
            lines += [f"Aliases: {', '.join(_md_escape(a) for a in d.aliases)}", ""]
        lines += ["## Summary", "", d.summary or "(unknown)", "", "## Body", "", d.body or "(unknown)", ""]
        if d.purpose is not None:
            lines += [f"Purpose: {_md_escape(d.purpose)}", f"Reference: {_md_escape(d.reference or '')}", ""]
        lines += ["## Cues", "", *([f"- {_md_escape(c)}" for c in d.cues] or ["(none)"]), ""]
    rel, src = d.relations[lo:hi], d.sources[lo:hi]
    lines += ["## Relations", "", *([f"- {s} **{lab}** {t}" for s, lab, t in rel] or ["(none)"]), ""]
    lines += ["## Sources", "", *([f"- {at} `{eid}`" for eid, at in src] or ["(none)"]), ""]
    if len(d.relations) > hi or len(d.sources) > hi:
        nxt = projection_page_name(d.object_id, page + 1)
        lines += [f"[More relations and sources]({nxt.rsplit('/', 1)[-1]})", ""]
    return "\n".join(lines)


def projection_pages(d: Dossier) -> int:
    most = max(len(d.relations), len(d.sources), 1)
    return math.ceil(most / PROJECTION_PAGE)


def projection_page_name(object_id: str, page: int) -> str:
    base = projection_path(object_id)
    return base if page == 0 else base[: -len(".md")] + f".p{page + 1}.md"


def render_index(entries: Sequence[tuple[str, str, str]], core: Sequence[str] = ()) -> str:
    """README.md: the core documents present, then objects by type and name, each linking to its
    file. entries: (type, name, id)."""
    lines = ["# Objects", "", "Generated from the store (the authority); edits here are never imported.", ""]
    if core:
        lines += [
            "## Core documents",
            "",
            "A human edit of one of these files is imported (its prior version kept).",
            "",
        ]
        lines += [f"- [{name}]({name})" for name in CORE_NAMES if name in core]
        lines.append("")
    by_type: dict[str, list[tuple[str, str]]] = {}
    for otype, name, oid in entries:
        by_type.setdefault(otype, []).append((name, oid))
    for otype in ObjectType:
        items = sorted(by_type.get(otype, []), key=lambda x: (x[0].lower(), x[1]))
        if not items:
            continue
        lines += [f"## {otype}", ""]
        lines += [f"- [{_md_escape(n)}]({projection_path(oid)}) `{oid}`" for n, oid in items]
        lines.append("")
    return "\n".join(lines)


class CoreFileAction(StrEnum):
    NONE = "none"  # file and store agree
    WRITE = "write"  # the store is ahead of the file, or the file is gone: (re)write it
    IMPORT = "import"  # a human edited the file: import it as a new version
    RECORD = "record"  # the file was edited to what the store already holds: note it


def core_file_action(stored: str | None, written_hash: str | None, on_disk: str | None) -> CoreFileAction:
    """What the projection does with one core document file. Object files are never imported; a
    core document's human edit is (seed 001 §6): a file that is not what the projection last
    wrote there (``written_hash``) was edited by a human, and the edit wins (the store's version
    stays in the history). A missing file is written again from the store."""
    if on_disk is None:
        return CoreFileAction.WRITE if stored is not None else CoreFileAction.NONE
    if content_hash(on_disk) == written_hash:
        return CoreFileAction.NONE if stored in (None, on_disk) else CoreFileAction.WRITE
    return CoreFileAction.RECORD if stored == on_disk else CoreFileAction.IMPORT


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
