"""JSONL ingestion of raw conversation events (append-only, idempotent on message_id).

One JSON object per line (UTF-8; a byte order mark before the first line is ignored):

    {"message_id": "m-1", "world_id": "agent-a", "conversation_id": "c-1",
     "platform": "local", "debug": false, "role": "user",
     "content": "hello", "tool_calls": null, "timestamp": "2026-07-18T06:12:00+08:00"}

Required: message_id, world_id, conversation_id (ids: see ``memory_pipeline.lib.ids``), role.
timestamp: ISO 8601 with an offset, 1970 .. now + 1 minute; left out (or null) when the time is
unknown, the message takes the time of its ingest and says so (``at_from_ingest``), and a line of a
stored id without a timestamp is that event again when role and content agree. Optional: platform (default "local",
at most 64 characters), debug (default false), content (default "", at most 100,000 characters),
tool_calls (null or a list of objects, each with a non-empty string ``name``), world_name (at most
256 characters), conversation_title (at most 512). No string may hold a NUL or a lone surrogate;
names, titles and the platform hold no control characters either. Other keys are ignored.

Every refusal reads ``{file}:{where}: field '{name}': {problem}``: ``where`` is a line number
here and a JSON path (``$.session_3[4].text``) for a LoCoMo file. Messages name ids, fields and
positions, never a message body.

A file is written whole or not at all; with ``skip_bad=True`` good lines are written and bad ones
reported. Either way nothing is half-written: the write is one transaction. Two ingests of the
same (or overlapping) files at once are safe: a line the other stored first counts as already
present (another body under its id is a conflict), so their inserted counts add up to one ingest.

The file is streamed, never held whole: one pass reads each line (orjson; the exact validator
for any line the fast check does not pass), validates it and streams it into a staging table
inside the writing transaction (``events.staging``: COPY on PostgreSQL, batched executemany on
SQLite). Repeats across lines, conflicts with stored rows and the writes are then set-based
statements in the same transaction, so the all-or-nothing promise is the transaction's: a
refusal rolls back the staged rows with everything else. A redo (a concurrent ingest raced this
one, a transient database error) reads the file again.

On PostgreSQL a file is first written directly (``events.direct``): chunk by chunk, its worlds
and conversations set-based and its messages COPYed straight into ``messages``, whose primary key
proves every id new. The first line that is not plainly new (a repeat, a stored id, a disagreeing
conversation, a bad line not to be skipped, a row the store refuses) rolls that transaction back
whole and the file takes the staging path: same rows, counts and refusals, only slower.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Column, Connection, String
from sqlalchemy.exc import IntegrityError

from memory_pipeline.events import direct, staging
from memory_pipeline.events.tables import ingest_batches
from memory_pipeline.lib.ids import ID_RE, validate_id
from memory_pipeline.lib.store import Store, retry_transient
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline.lib.text import json_error, json_type, shown, text_problem
from memory_pipeline.lib.timeutil import EARLIEST, LATEST, iso_offset, parse_instant

# One event as the ingestion format has it: a JSON object (``validate_event`` says what it holds).
Event = dict[str, Any]
ToolCalls = list[dict[str, Any]]

ROLES = {"user", "assistant", "tool", "system"}
ID_FIELDS = ("message_id", "world_id", "conversation_id")
MAX_LINE_BYTES = 1_048_576
MAX_CONTENT_CHARS = 100_000


def _length(column: Column[Any]) -> int:
    """A String column's declared length (the limit a value must fit)."""
    kind = column.type
    assert isinstance(kind, String) and kind.length is not None, column
    return kind.length


MAX_PLATFORM_CHARS = _length(conversations.c.platform)  # 64
MAX_SOURCE_CHARS = _length(messages.c.source)  # 1024
NAME_LIMITS = {"world_name": _length(worlds.c.name), "conversation_title": _length(conversations.c.title)}
MAX_TOOL_NAME_CHARS = 256
MAX_TOOL_DEPTH = 32
FUTURE_TOLERANCE = timedelta(minutes=1)
SIMPLE_KEY = re.compile(r"[A-Za-z0-9_-]{1,40}")
_BLANK = object()


def event_line(
    message_id: str,
    world_id: str,
    conversation_id: str,
    role: str,
    content: str,
    at: datetime,
    *,
    platform: str = "local",
    debug: bool = False,
    tool_calls: ToolCalls | None = None,
) -> Event:
    """One line of the ingestion format (what the sample, the benchmark and the tests write)."""
    return {
        "message_id": message_id,
        "world_id": world_id,
        "conversation_id": conversation_id,
        "platform": platform,
        "debug": debug,
        "role": role,
        "content": content,
        "tool_calls": tool_calls,
        "timestamp": at.isoformat(),
    }


@dataclass(frozen=True)
class LineError:
    """One refusal. ``where`` is a line number (JSONL) or a JSON path such as ``$.session_3[4].text``."""

    source: str
    where: int | str
    field: str
    problem: str

    @property
    def line(self) -> int:
        """The line number, 0 when the location is a JSON path."""
        return self.where if isinstance(self.where, int) else 0

    def __str__(self) -> str:
        return f"{self.source}:{self.where}: field '{self.field}': {self.problem}"


class IngestError(ValueError):
    def __init__(self, errors: list[LineError], written: bool = False):
        self.errors = errors
        shown_ = "\n".join(f"  {e}" for e in errors[:50])
        more = f"\n  ... and {len(errors) - 50} more" if len(errors) > 50 else ""
        verdict = "bad input was skipped" if written else "nothing was written"
        super().__init__(f"{len(errors)} problem(s); {verdict}:\n{shown_}{more}")


@dataclass
class IngestReport:
    source: str
    lines: int = 0
    inserted: int = 0
    duplicates: int = 0
    rejected: list[LineError] = field(default_factory=list)  # every problem (a line may have several)
    new_conversations: int = 0
    new_worlds: int = 0
    at_from_ingest: int = 0  # of the inserted: lines without a timestamp, given the ingest time

    @property
    def rejected_lines(self) -> int:
        """How many lines (places, for a LoCoMo file) were rejected: a line with several problems
        counts once, so inserted, already present and rejected add up to at most the lines."""
        return len({(e.source, e.where) for e in self.rejected})


def source_label(path: str | Path) -> str:
    """A path as printable, storable text (undecodable file-name bytes become backslash escapes)."""
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


def fit(text: str, limit: int) -> str:
    """At most ``limit`` characters, keeping the end (the line or path of a source label)."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def parse_timestamp(value: Any) -> datetime:
    """ISO 8601 with an offset, within the supported range, as UTC; ValueError names the problem."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {json_type(value)}")
    if not value.strip():
        raise ValueError("missing")
    try:
        return parse_instant(value).astimezone(UTC)
    except ValueError as exc:
        raise ValueError(f"{shown(value)} {exc}") from None


# Validation: each check returns (field, problem) pairs.

Problems = list[tuple[str, str]]


# Conversations the project writes itself: an objects "organize now" request is recorded in the
# world's ``memory-requests#...`` conversation, never organized (debug). Ingest refuses these ids, so
# no file can put another world's messages there or take the conversation before its world does.
RESERVED_CONVERSATION_PREFIX = "memory-requests#"


def _check_ids(obj: Event) -> Problems:
    out = []
    for name in ID_FIELDS:
        value = obj.get(name)
        problem = "missing" if value in (None, "") else validate_id(value)
        if problem:
            out.append((name, problem))
    cid = obj.get("conversation_id")
    if isinstance(cid, str) and cid.startswith(RESERVED_CONVERSATION_PREFIX):
        out.append(
            (
                "conversation_id",
                f"{shown(cid)}: ids starting {RESERVED_CONVERSATION_PREFIX!r} are reserved for the requests the project records",
            )
        )
    return out


def _check_role(role: Any) -> Problems:
    if role in (None, ""):
        return [("role", "missing")]
    if not isinstance(role, str):
        return [("role", f"must be a string, got {json_type(role)}")]
    if role not in ROLES:
        return [("role", f"unknown role {shown(role)} (expected one of {', '.join(sorted(ROLES))})")]
    return []


def _check_timestamp(value: Any, now: datetime) -> Problems:
    if value is None:  # left out (or null): the time is unknown, the ingest time stands for it
        return []
    if value == "":
        return [("timestamp", "empty (leave it out, or null, when the time is unknown)")]
    try:
        at = parse_timestamp(value)
    except ValueError as exc:
        return [("timestamp", str(exc))]
    return [("timestamp", f"{shown(value)} is in the future")] if at > now + FUTURE_TOLERANCE else []


def _check_content(content: Any) -> Problems:
    if content is None:
        return []
    if isinstance(content, str) and len(content) > MAX_CONTENT_CHARS:
        return [("content", f"oversized body: {len(content)} characters (limit {MAX_CONTENT_CHARS})")]
    problem = text_problem(content, MAX_CONTENT_CHARS, controls=True)
    return [("content", problem)] if problem else []


def _check_labels(obj: Event) -> Problems:
    """platform, world_name, conversation_title: optional bounded strings without control characters."""
    out = []
    for name, limit in (("platform", MAX_PLATFORM_CHARS), *NAME_LIMITS.items()):
        value = obj.get(name)
        problem = None if value in (None, "") else text_problem(value, limit)
        if problem:
            out.append((name, problem))
    return out


def _check_debug(debug: Any) -> Problems:
    return [] if isinstance(debug, bool) else [("debug", "must be true or false")]


def _check_tool_calls(calls: Any) -> Problems:
    """null or a list of objects, each with a non-empty string ``name`` (other keys: any JSON)."""
    if calls is None:
        return []
    if not isinstance(calls, list):
        return [("tool_calls", f"must be null or a list of objects, got {json_type(calls)}")]
    for i, call in enumerate(calls):
        if not isinstance(call, dict):
            return [(f"tool_calls[{i}]", f"must be an object with a string 'name', got {json_type(call)}")]
        name = call.get("name")
        problem = "missing" if name in (None, "") else text_problem(name, MAX_TOOL_NAME_CHARS)
        if problem:
            return [(f"tool_calls[{i}].name", problem)]
    bad = _json_problem(calls, "tool_calls")
    return [bad] if bad else []


def _json_problem(value: Any, path: str) -> tuple[str, str] | None:
    """The first value under ``path`` that JSON storage refuses: a non-finite number, a string or
    key with a NUL or lone surrogate, nesting deeper than MAX_TOOL_DEPTH."""
    stack = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_TOOL_DEPTH:
            return where, f"nested deeper than {MAX_TOOL_DEPTH} levels"
        if isinstance(item, float) and not math.isfinite(item):
            return where, "non-finite number (NaN or Infinity is not JSON)"
        if isinstance(item, str) and (problem := text_problem(item, MAX_LINE_BYTES, controls=True)):
            return where, problem
        if isinstance(item, dict):
            for key, sub in item.items():
                if problem := text_problem(key, MAX_LINE_BYTES, controls=True):
                    return where, f"key: {problem}"
                stack.append((sub, _json_path(where, key), depth + 1))
        elif isinstance(item, list):
            stack.extend((sub, _json_path(where, i), depth + 1) for i, sub in enumerate(item))
    return None


def _json_path(where: str, step: str | int) -> str:
    """``where`` one step down: ``.key`` for a plain key, ``[i]`` for an index, ``['…']`` otherwise."""
    if len(where) > 200:
        return where
    if isinstance(step, int):
        return f"{where}[{step}]"
    return f"{where}.{step}" if SIMPLE_KEY.fullmatch(step) else f"{where}[{shown(step, 20)}]"


def event_problems(obj: Event, now: datetime) -> Problems:
    """Every (field, problem) of one event in the ingestion format; empty when it is valid."""
    return (
        _check_ids(obj)
        + _check_role(obj.get("role"))
        + _check_timestamp(obj.get("timestamp"), now)
        + _check_content(obj.get("content"))
        + _check_tool_calls(obj.get("tool_calls"))
        + _check_labels(obj)
        + _check_debug(obj.get("debug", False))
    )


def validate_event(obj: Any, source: str, where: int | str, now: datetime) -> tuple[Event | None, list[LineError]]:
    """The one validator of raw events (JSONL lines and LoCoMo turns alike): the event to write, or
    the refusals located at ``source``:``where``."""
    if not isinstance(obj, dict):
        return None, [LineError(source, where, "<line>", f"expected a JSON object, got {json_type(obj)}")]
    problems = event_problems(obj, now)
    if problems:
        return None, [LineError(source, where, name, problem) for name, problem in problems]
    return {
        "message_id": obj["message_id"],
        "world_id": obj["world_id"],
        "world_name": obj.get("world_name") or None,
        "conversation_id": obj["conversation_id"],
        "conversation_title": obj.get("conversation_title") or None,
        "platform": obj.get("platform") or "local",
        "debug": obj.get("debug", False),
        "role": obj["role"],
        "content": obj.get("content") or "",
        "tool_calls": obj.get("tool_calls") or None,
        "at": None if obj.get("timestamp") is None else parse_timestamp(obj["timestamp"]),
        "source": fit(f"{source}:{where}", MAX_SOURCE_CHARS),
        "_file": source,
        "_where": where,
    }, []


class EventBatch:
    """Validated events of one source, in order: a repeated message_id with the same body is dropped,
    with another body refused (a line without a timestamp agrees with any time, and the first line
    of an id takes the time a later one gives); a conversation keeps one (world, platform, debug)."""

    def __init__(self, source: str, now: datetime):
        self.source, self.now = source, now
        self.events: list[Event] = []
        self._seen: dict[str, Event] = {}
        self._timed_by: dict[str, str] = {}  # id -> the later line that gave its first line's time
        self._conv_meta: dict[str, _Meta] = {}

    def add(self, obj: Any, where: int | str) -> list[LineError]:
        event, errors = validate_event(obj, self.source, where, self.now)
        if event is None:
            return errors
        conflict = self._conflict(event)
        if conflict:
            return [LineError(self.source, where, *conflict)]
        prev = self._seen.get(event["message_id"])
        if prev is None:
            self._seen[event["message_id"]] = event
            self._conv_meta.setdefault(event["conversation_id"], _meta(event))
            self.events.append(event)
        elif prev["at"] is None and event["at"] is not None:  # the event's time, whichever line gives it
            prev["at"] = event["at"]
            self._timed_by[event["message_id"]] = event["source"]
        return []

    def _conflict(self, event: Event) -> tuple[str, str] | None:
        prev = self._seen.get(event["message_id"])
        if prev is not None:
            said = self._timed_by.get(event["message_id"], prev["source"])
            differ = event_difference(prev, event)
            if differ:
                return "message_id", f"{shown(event['message_id'])} repeats {said} with different {differ}"
            return None
        known = self._conv_meta.get(event["conversation_id"])
        if known is not None and known != _meta(event):
            return (
                "conversation_id",
                f"{shown(event['conversation_id'])} has (world, platform, debug) {_meta(event)}, "
                f"earlier lines say {known}",
            )
        return None


def event_difference(a: Event, b: Event) -> str:
    """What two lines of one id disagree on, for a refusal ("" when they are the same event):
    "content" when role, content or their timestamps differ (where both give one: a line without a
    timestamp leaves its time unknown), then the world, the conversation and the tool calls, each
    named by its field. A line that moved an id to another world or conversation was dropped as
    already present (a world's event then never existed)."""
    return staging.difference(
        staging.same_body((a["content"], a["role"], a["at"]), (b["content"], b["role"], b["at"])),
        [("world_id", a["world_id"], b["world_id"]), ("conversation_id", a["conversation_id"], b["conversation_id"])],
        a["tool_calls"] == b["tool_calls"],
    )


_Meta = tuple[str, str, bool]  # a conversation's world, platform and debug flag


def _meta(event: Event) -> _Meta:
    return event["world_id"], event["platform"], event["debug"]


def parse_line(raw: bytes, first: bool = False) -> tuple[Any, str | None]:
    """(parsed JSON, None), (_BLANK, None) for a blank line, or (None, problem)."""
    if len(raw) > MAX_LINE_BYTES:
        return None, f"oversized line: {len(raw)} bytes (limit {MAX_LINE_BYTES})"
    try:
        text = raw.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        return None, f"bad encoding (not UTF-8) at byte offset {exc.start}"
    if not text.strip():
        return _BLANK, None
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        # one line of the file: its column counts from the line's start, its newline included
        return None, f"malformed JSON: {json_error(exc, column=exc.pos + 1)}"
    except RecursionError:
        return None, "malformed JSON: nested too deeply"
    except ValueError:  # e.g. an integer beyond Python's digit limit
        return None, "malformed JSON: unreadable number"


Progress = Callable[[str, int, int], None]  # (phase, done, total): "validate" in bytes, "write" in rows

# orjson reads every line; a line it refuses (it refuses whatever json.loads does, and NaN,
# lone surrogates and integers beyond a double), one with tool calls (orjson reads a 20-digit
# integer as a float) and one the fast check does not pass are read again by json.loads and
# checked by the one validator above, so every refusal and every stored value is as before.
_ID_FULL = ID_RE.fullmatch


def _fast_row(obj: Any, pos: int, source: str, latest: datetime) -> staging.Row | None:
    """The staged row of a line orjson parsed, when it is certainly valid; None sends the line
    to the exact validator (which alone words refusals). Never looser than ``event_problems``:
    orjson's strings hold no lone surrogate, so only NUL and control characters are looked for."""
    if type(obj) is not dict:
        return None
    get = obj.get
    mid, wid, cid, role = get("message_id"), get("world_id"), get("conversation_id"), get("role")
    if not (type(mid) is str and type(wid) is str and type(cid) is str and type(role) is str):
        return None
    if role not in ROLES or not (_ID_FULL(mid) and _ID_FULL(wid) and _ID_FULL(cid)):
        return None
    if cid.startswith(RESERVED_CONVERSATION_PREFIX):
        return None
    if get("tool_calls") is not None:
        return None
    debug = get("debug", False)
    if debug is not True and debug is not False:
        return None
    content = get("content")
    if content is None:
        content = ""
    elif type(content) is not str or len(content) > MAX_CONTENT_CHARS or "\x00" in content:
        return None
    platform, world_name, title = get("platform"), get("world_name"), get("conversation_title")
    # isprintable: no control character (nor anything else the exact check may want to word)
    if platform is None or platform == "":
        platform = "local"
    elif type(platform) is not str or len(platform) > MAX_PLATFORM_CHARS or not platform.isprintable():
        return None
    if world_name == "":
        world_name = None
    elif world_name is not None and (
        type(world_name) is not str or len(world_name) > _MAX_WORLD_NAME or not world_name.isprintable()
    ):
        return None
    if title == "":
        title = None
    elif title is not None and (type(title) is not str or len(title) > _MAX_TITLE or not title.isprintable()):
        return None
    ts = get("timestamp")
    if type(ts) is not str or not ts or ts != ts.strip():
        return None
    try:
        text = ts[:-1] + "+00:00" if ts[-1] in "Zz" else ts
        at = datetime.fromisoformat(text)
        if at.tzinfo is None or at.utcoffset() is None:
            return None
        # ±HH:MM seen at once; anything else as parse_instant checks it (Python reads +08:00:30 too)
        if not (text[-6] in "+-" and text[-3] == ":") and not iso_offset(text):
            return None
        at = at.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    if not EARLIEST <= at < LATEST or at > latest:
        return None
    return (
        pos,
        mid,
        wid,
        world_name,
        cid,
        title,
        platform,
        debug,
        role,
        content,
        _NULL_CALLS,
        at,
        f"{source}:{pos}" if len(source) < MAX_SOURCE_CHARS - 12 else fit(f"{source}:{pos}", MAX_SOURCE_CHARS),
    )


_MAX_WORLD_NAME, _MAX_TITLE = NAME_LIMITS["world_name"], NAME_LIMITS["conversation_title"]
_NULL_CALLS = staging.tool_calls_json(None)


@dataclass
class _FileScan:
    """What streaming a file left besides its rows: refusals, line count, digest."""

    errors: list[LineError] = field(default_factory=list)
    lines: int = 0
    sha256: str = ""


def _file_rows(
    path: Path, source: str, now: datetime, scan: _FileScan, progress: Progress | None
) -> Iterator[staging.Row]:
    """Every valid line of the file as a staged row, in file order, streamed; refusals go to
    ``scan.errors`` (repeats across lines are the staging table's to find)."""
    digest = hashlib.sha256()
    latest = now + FUTURE_TOLERANCE
    total, done, lineno = path.stat().st_size, 0, 0
    if progress:
        progress("validate", 0, total)
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            digest.update(raw)
            done += len(raw)
            if progress and lineno % 5000 == 0:
                progress("validate", done, total)
            if len(raw) <= MAX_LINE_BYTES:
                try:
                    row = _fast_row(orjson.loads(raw), lineno, source, latest)
                except orjson.JSONDecodeError:
                    row = None
                if row is not None:
                    yield row
                    continue
            obj, problem = parse_line(raw, first=lineno == 1)
            if problem:
                scan.errors.append(LineError(source, lineno, "<line>", problem))
                continue
            if obj is _BLANK:
                continue
            event, errors = validate_event(obj, source, lineno, now)
            if event is None:
                scan.errors.extend(errors)
            else:
                yield staging.event_row(event, lineno)
    scan.lines, scan.sha256 = lineno, digest.hexdigest()
    if progress:
        progress("validate", total, total)


def ingest_file(
    store: Store,
    path: str | Path,
    *,
    skip_bad: bool = False,
    now: datetime | None = None,
    progress: Progress | None = None,
    direct: bool = True,
) -> IngestReport:
    """Stream a JSONL file into the store (see the module docstring): one pass reads, validates
    and stages the lines inside the writing transaction, then set-based statements check and
    write them. Memory holds one batch of lines, not the file; a redo reads the file again.

    On PostgreSQL the direct write goes first (``direct=False``: the staging path alone, which a
    file that is not all new takes anyway). Progress: ("validate", bytes read, file size) from 0
    as the file is read, ("write", rows written, the same) once they are written."""
    path = Path(path)
    source = source_label(path)
    now = now or datetime.now(UTC)
    scans: list[_FileScan] = []

    def rows(tick: Progress | None) -> Iterator[staging.Row]:
        # Progress of the validation is reported until a pass has read the whole file (a redo is
        # no news then; after a direct write that fell back part way, the staging path's is).
        read_whole = any(s.sha256 for s in scans)
        scan = _FileScan()
        scans.append(scan)
        return _file_rows(path, source, now, scan, None if read_whole else tick)

    return _ingest(
        store,
        rows,
        source=source,
        locate=lambda pos: (source, pos),
        scan=lambda: scans[-1],
        skip_bad=skip_bad,
        progress=progress,
        by_line=True,
        direct_first=direct,
    )


def ingest_events(
    store: Store,
    events: list[Event],
    *,
    source: str,
    errors: list[LineError] | None = None,
    lines: int | None = None,
    sha256: str = "",
    skip_bad: bool = False,
    progress: Progress | None = None,
) -> IngestReport:
    """Write validated events (``validate_event``/``EventBatch``, e.g. a LoCoMo file's) the same
    way as a file: staged, checked and written set-based in one transaction.

    Safe against a concurrent ingest of the same or overlapping events: rows are inserted with
    ON CONFLICT DO NOTHING, and an id another transaction stored meanwhile is re-read in this one,
    a duplicate when its content is the same, a conflict otherwise (never an overwrite). A
    transient database error (a dropped connection, a deadlock between overlapping files) redoes
    the transaction whole. A refusal by the store is an IngestError naming ids and the
    constraint, never a message body."""
    errors = list(errors or [])
    if errors and not skip_bad:
        raise IngestError(errors)
    scan = _FileScan(errors=errors, lines=lines if lines is not None else len(events), sha256=sha256)

    def locate(pos: int) -> tuple[str, int | str]:
        e = events[pos]
        return e.get("_file", "<events>"), e.get("_where", 0)

    return _ingest(
        store,
        lambda _tick: (staging.event_row(e, i) for i, e in enumerate(events)),
        source=source,
        locate=locate,
        scan=lambda: scan,
        skip_bad=skip_bad,
        progress=progress,
        by_line=False,
    )


def _ingest(
    store: Store,
    rows: Callable[[Progress | None], Iterator[staging.Row]],
    *,
    source: str,
    locate: staging.Locate,
    scan: Callable[[], _FileScan],
    skip_bad: bool,
    progress: Progress | None,
    by_line: bool,
    direct_first: bool = False,
) -> IngestReport:
    first: list[str] = []
    staged = [0]
    direct_tried = [False]

    def tapped() -> Iterator[staging.Row]:
        """The rows, noting the first ids (a store refusal names them)."""
        seen: list[tuple[int, str]] = []
        for row in rows(progress):
            if len(seen) < 3:
                seen.append((row[0], row[1]))
                first[:] = [mid for _, mid in seen]
            yield row

    def once() -> IngestReport:
        if direct_first and not direct_tried[0] and store.dialect == "postgresql":
            direct_tried[0] = True  # a redo after a transient error (a deadlock too) takes the staging path
            try:
                with store.begin() as conn:
                    return _write_direct(conn, rows, source=source, scan=scan, skip_bad=skip_bad, progress=progress)
            except direct.Fallback:
                pass  # rolled back whole: nothing of the direct write is left
        for attempt in range(1, _RACE_REDOS + 1):
            write = _Write(source, locate, skip_bad, final=attempt == _RACE_REDOS, by_line=by_line)
            try:
                with store.begin() as conn:
                    try:
                        write.run(conn, tapped(), scan, progress)
                    finally:
                        staged[0] = write.staged
                        if write.first_ids:
                            first[:] = write.first_ids
                        staging.drop(conn)
            except _Raced:
                continue  # rolled back; the concurrent rows are committed now and read up front
            return write.report
        raise AssertionError("unreachable")  # the last attempt never raises _Raced

    try:
        return retry_transient(once, what=f"ingest {source}")
    except IntegrityError as exc:
        raise IngestError([_store_refusal(source, exc, first, staged[0])]) from None


def _write_direct(
    conn: Connection,
    rows: Callable[[Progress | None], Iterator[staging.Row]],
    *,
    source: str,
    scan: Callable[[], _FileScan],
    skip_bad: bool,
    progress: Progress | None,
) -> IngestReport:
    """The direct write (``events.direct``) in the caller's transaction, or Fallback."""
    scans: list[_FileScan] = []

    def started(tick: Progress | None) -> Iterator[staging.Row]:
        stream = rows(tick)
        scans.append(scan())  # the scan of this pass (rows() started it)
        return stream

    def check() -> None:
        if scans and scans[0].errors and not skip_bad:  # the staging path words them, with any repeats
            raise direct.Fallback

    now = datetime.now(UTC)
    written = direct.write(conn, started, now, check, progress)
    done = scans[0]
    report = IngestReport(
        source=source,
        lines=done.lines,
        inserted=written.inserted,
        rejected=list(done.errors),
        new_conversations=written.new_conversations,
        new_worlds=written.new_worlds,
    )
    if progress:
        progress("write", written.inserted, written.inserted)
    _record_batch(conn, report, done.sha256, now)
    return report


def _record_batch(conn: Connection, report: IngestReport, sha256: str, now: datetime) -> None:
    conn.execute(
        ingest_batches.insert().values(
            source=fit(report.source, MAX_SOURCE_CHARS),
            sha256=sha256,
            lines=report.lines,
            inserted=report.inserted,
            duplicates=report.duplicates,
            rejected=report.rejected_lines,
            at=now,
        )
    )


def _store_refusal(source: str, exc: IntegrityError, ids: list[str], count: int) -> LineError:
    """What a constraint violation says without the row: the driver's first line (a constraint
    or column name), the key when every key column is an id, and the file's first message ids."""
    driver = exc.orig if isinstance(exc.orig, BaseException) else exc
    first = (str(driver).strip().splitlines() or [type(driver).__name__])[0]
    detail = getattr(getattr(driver, "diag", None), "message_detail", None) or ""
    key = _ID_KEY.match(detail)
    said = f"; {key.group(0)}" if key and all(c.strip().endswith("_id") for c in key.group(1).split(",")) else ""
    more = f" (of {count})" if count > 3 else ""
    return LineError(
        source,
        "<write>",
        "message_id",
        f"the store refused the write: {first}{said}; message ids {', '.join(map(shown, ids[:3]))}{more}",
    )


class _Raced(Exception):
    """A concurrent ingest stored a conflicting row after this transaction's read: redo it."""


# Redoing the transaction sees the rows of the ingest it raced (committed by then) in its first
# read, where they are classified exactly as a sequential ingest would; the last attempt treats a
# further race as a conflict.
_RACE_REDOS = 3

_ID_KEY = re.compile(r"Key \(([A-Za-z0-9_, ]+)\)=\([^\n]*?\)")


class _Write:
    """One attempt of the write transaction: stage, check, write (``staging`` holds the SQL)."""

    def __init__(self, source: str, locate: staging.Locate, skip_bad: bool, final: bool, by_line: bool):
        self.source, self.locate, self.skip_bad, self.final, self.by_line = source, locate, skip_bad, final, by_line
        self.report = IngestReport(source=source)
        self.errors: list[LineError] = []  # the file's own refusals (validation, repeats)
        self.conflicts: list[LineError] = []  # refusals against stored rows, skipped with skip_bad
        self.first_ids: list[str] = []
        self.staged = 0

    def error(self, p: staging.Problem) -> LineError:
        file, where = self.locate(p.pos)
        return LineError(file, where, p.field, p.problem)

    def refuse(self, found: list[LineError]) -> None:
        """Conflicts: the whole file refused, or (skip_bad) their lines left out and reported."""
        if not found:
            return
        if not self.skip_bad:
            raise IngestError(self.errors + self.conflicts + found)
        self.conflicts.extend(found)

    def run(
        self,
        conn: Connection,
        rows: Iterator[staging.Row],
        scan: Callable[[], _FileScan],
        progress: Progress | None,
    ) -> None:
        report = self.report
        if conn.dialect.name == "postgresql":  # the id-ordered insert sorts the file in memory
            conn.exec_driver_sql("SET LOCAL work_mem = '256MB'")
        n = staging.load(conn, rows)
        done = scan()
        report.lines = done.lines
        repeats = staging.file_repeats(conn)
        n -= len(repeats.problems) + repeats.dropped
        self.staged = n
        if repeats.problems or repeats.dropped:  # the first lines may be gone
            self.first_ids = staging.first_ids(conn)
        self.errors = list(done.errors)
        if repeats.problems:
            self.errors += [self.error(p) for p in repeats.problems]
            if self.by_line:  # one refusal source per line: file order is line order
                self.errors.sort(key=lambda e: e.line)
        conv_conflicts = staging.conversation_conflicts(conn)
        stored, msg_conflicts = staging.stored_messages(conn)
        if self.errors and not self.skip_bad:  # with what the store refuses: one attempt names every bad line
            every = self.errors + [self.error(p) for p in conv_conflicts + msg_conflicts]
            if self.by_line:
                every.sort(key=lambda e: e.line)
            raise IngestError(every)
        report.rejected = list(self.errors)
        report.duplicates = stored - len(msg_conflicts)
        self.refuse([self.error(p) for p in conv_conflicts + msg_conflicts])
        bad_convs = staging.conversations_of(conn, [p.pos for p in conv_conflicts])
        fresh = n - staging.drop_stored_and_conflicting(conn, bad_convs)

        now = datetime.now(UTC)
        if fresh:
            report.new_worlds = staging.write_worlds(conn, now)
            convs = staging.write_conversations(conn, now)
            report.new_conversations = convs.created
            if convs.raced:  # stored by a concurrent ingest since the check above
                found = staging.conversation_conflicts(conn)
                if found and not self.final:
                    raise _Raced
                self.refuse([self.error(p) for p in found])
                fresh -= staging.drop_conversations(conn, staging.conversations_of(conn, [p.pos for p in found]))
            staging.touch_conversations(conn, now, convs.raced)
            report.inserted = staging.write_messages(conn, now)
            report.at_from_ingest = staging.written_at_ingest(conn, now)
            if report.inserted < fresh:  # stored by a concurrent ingest since the check above
                found_msgs = staging.raced_messages(conn)
                if found_msgs and not self.final:
                    raise _Raced  # rows of its file are written already (world, conversation): start over
                report.duplicates += fresh - report.inserted - len(found_msgs)
                self.refuse([self.error(p) for p in found_msgs])
        if progress:
            progress("write", fresh, fresh)
        report.rejected.extend(self.conflicts)
        _record_batch(conn, report, done.sha256, now)
