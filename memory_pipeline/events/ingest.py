"""JSONL ingestion of raw conversation events (append-only, idempotent on message_id).

One JSON object per line (UTF-8; a byte order mark before the first line is ignored):

    {"message_id": "m-1", "world_id": "agent-a", "conversation_id": "c-1",
     "platform": "local", "debug": false, "role": "user",
     "content": "hello", "tool_calls": null, "timestamp": "2026-07-18T06:12:00+08:00"}

Required: message_id, world_id, conversation_id (ids: see ``memory_pipeline.lib.ids``), role,
timestamp (ISO 8601 with an offset, 1970 .. now + 1 minute). Optional: platform (default "local",
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
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy.exc import IntegrityError

from memory_pipeline.events.tables import ingest_batches
from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.store import Store, insert_missing, retry_transient
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline.lib.text import json_type, shown, text_problem
from memory_pipeline.lib.timeutil import parse_instant

ROLES = {"user", "assistant", "tool", "system"}
ID_FIELDS = ("message_id", "world_id", "conversation_id")
REQUIRED = (*ID_FIELDS, "role", "timestamp")
MAX_LINE_BYTES = 1_048_576
MAX_CONTENT_CHARS = 100_000
MAX_PLATFORM_CHARS = conversations.c.platform.type.length  # 64
MAX_SOURCE_CHARS = messages.c.source.type.length  # 1024
NAME_LIMITS = {"world_name": worlds.c.name.type.length, "conversation_title": conversations.c.title.type.length}
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
    tool_calls: list | None = None,
) -> dict:
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
    rejected: list[LineError] = field(default_factory=list)
    new_conversations: int = 0
    new_worlds: int = 0


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


def _check_ids(obj: dict) -> Problems:
    out = []
    for name in ID_FIELDS:
        value = obj.get(name)
        problem = "missing" if value in (None, "") else validate_id(value)
        if problem:
            out.append((name, problem))
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
    if value in (None, ""):
        return [("timestamp", "missing")]
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


def _check_labels(obj: dict) -> Problems:
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


def event_problems(obj: dict, now: datetime) -> Problems:
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


def validate_event(obj: Any, source: str, where: int | str, now: datetime) -> tuple[dict | None, list[LineError]]:
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
        "at": parse_timestamp(obj["timestamp"]),
        "source": fit(f"{source}:{where}", MAX_SOURCE_CHARS),
        "_file": source,
        "_where": where,
    }, []


def _event_error(event: dict, field_name: str, problem: str) -> LineError:
    return LineError(event.get("_file", "<events>"), event.get("_where", 0), field_name, problem)


class EventBatch:
    """Validated events of one source, in order: a repeated message_id with the same body is dropped,
    with another body refused; a conversation keeps one (world, platform, debug)."""

    def __init__(self, source: str, now: datetime):
        self.source, self.now = source, now
        self.events: list[dict] = []
        self._seen: dict[str, dict] = {}
        self._conv_meta: dict[str, tuple] = {}

    def add(self, obj: Any, where: int | str) -> list[LineError]:
        event, errors = validate_event(obj, self.source, where, self.now)
        if errors:
            return errors
        conflict = self._conflict(event)
        if conflict:
            return [LineError(self.source, where, *conflict)]
        if event["message_id"] not in self._seen:
            self._seen[event["message_id"]] = event
            self._conv_meta.setdefault(event["conversation_id"], _meta(event))
            self.events.append(event)
        return []

    def _conflict(self, event: dict) -> tuple[str, str] | None:
        prev = self._seen.get(event["message_id"])
        if prev is not None:
            if (prev["content"], prev["role"], prev["at"]) != (event["content"], event["role"], event["at"]):
                return "message_id", f"{shown(event['message_id'])} repeats {prev['source']} with different content"
            return None
        known = self._conv_meta.get(event["conversation_id"])
        if known is not None and known != _meta(event):
            return (
                "conversation_id",
                f"{shown(event['conversation_id'])} has (world, platform, debug) {_meta(event)}, "
                f"earlier lines say {known}",
            )
        return None


def _meta(event: dict) -> tuple:
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
        return None, f"malformed JSON: {exc.msg} at column {exc.pos + 1}"
    except RecursionError:
        return None, "malformed JSON: nested too deeply"
    except ValueError:  # e.g. an integer beyond Python's digit limit
        return None, "malformed JSON: unreadable number"


Progress = Callable[[str, int, int], None]  # (phase, done, total): "validate" in bytes, "write" in rows


def read_events(
    path: Path, now: datetime | None = None, progress: Progress | None = None
) -> tuple[list[dict], list[LineError], int, str]:
    """Parse and validate every line; returns (events, errors, line_count, sha256)."""
    source = source_label(path)
    batch = EventBatch(source, now or datetime.now(UTC))
    errors: list[LineError] = []
    digest = hashlib.sha256()
    lineno = 0
    total, done = path.stat().st_size, 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            digest.update(raw)
            done += len(raw)
            if progress and lineno % 5000 == 0:
                progress("validate", done, total)
            obj, problem = parse_line(raw, first=lineno == 1)
            if problem:
                errors.append(LineError(source, lineno, "<line>", problem))
            elif obj is not _BLANK:
                errors.extend(batch.add(obj, lineno))
    if progress:
        progress("validate", total, total)
    return batch.events, errors, lineno, digest.hexdigest()


def ingest_file(
    store: Store,
    path: str | Path,
    *,
    skip_bad: bool = False,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    path = Path(path)
    events, errors, lines, sha = read_events(path, now, progress)
    report = ingest_events(
        store,
        events,
        source=source_label(path),
        errors=errors,
        lines=lines,
        sha256=sha,
        skip_bad=skip_bad,
        progress=progress,
    )
    return report


def ingest_events(
    store: Store,
    events: list[dict],
    *,
    source: str,
    errors: list[LineError] | None = None,
    lines: int | None = None,
    sha256: str = "",
    skip_bad: bool = False,
    progress: Progress | None = None,
) -> IngestReport:
    """Write validated events in one transaction (see module docstring).

    Safe against a concurrent ingest of the same or overlapping events: rows are inserted with
    ON CONFLICT DO NOTHING, and an id another transaction stored meanwhile is re-read in this one,
    a duplicate when its content is the same, a conflict otherwise (never an overwrite). A
    transient database error (a dropped connection, a deadlock between overlapping files) redoes
    the transaction whole. A refusal by the store is an IngestError naming ids and the
    constraint, never a message body."""
    errors = list(errors or [])
    if errors and not skip_bad:
        raise IngestError(errors)

    def once() -> IngestReport:
        for attempt in range(1, _RACE_REDOS + 1):
            report = IngestReport(
                source=source, lines=lines if lines is not None else len(events), rejected=list(errors)
            )
            try:
                with store.begin() as conn:
                    _write_events(conn, report, events, errors, sha256, skip_bad, progress, attempt == _RACE_REDOS)
            except _Raced:
                continue  # rolled back; the concurrent rows are committed now and read up front
            return report
        raise AssertionError("unreachable")  # the last attempt never raises _Raced

    try:
        return retry_transient(once, what=f"ingest {source}")
    except IntegrityError as exc:
        raise IngestError([_store_refusal(source, exc, events)]) from None


def _store_refusal(source: str, exc: IntegrityError, events: list[dict]) -> LineError:
    """What a constraint violation says without the row: the driver's first line (a constraint
    or column name), the key when every key column is an id, and the file's first message ids."""
    driver = exc.orig if isinstance(exc.orig, BaseException) else exc
    first = (str(driver).strip().splitlines() or [type(driver).__name__])[0]
    detail = getattr(getattr(driver, "diag", None), "message_detail", None) or ""
    key = _ID_KEY.match(detail)
    said = f"; {key.group(0)}" if key and all(c.strip().endswith("_id") for c in key.group(1).split(",")) else ""
    ids = [e["message_id"] for e in events[:3]]
    more = f" (of {len(events)})" if len(events) > 3 else ""
    return LineError(
        source,
        "<write>",
        "message_id",
        f"the store refused the write: {first}{said}; message ids {', '.join(map(shown, ids))}{more}",
    )


class _Raced(Exception):
    """A concurrent ingest stored a conflicting row after this transaction's read: redo it."""


# Redoing the transaction sees the rows of the ingest it raced (committed by then) in its first
# read, where they are classified exactly as a sequential ingest would; the last attempt treats a
# further race as a conflict.
_RACE_REDOS = 3

_ID_KEY = re.compile(r"Key \(([A-Za-z0-9_, ]+)\)=\([^\n]*?\)")


def _write_events(
    conn: Connection,
    report: IngestReport,
    events: list[dict],
    errors: list[LineError],
    sha256: str,
    skip_bad: bool,
    progress: Progress | None,
    final: bool,
) -> None:
    batch = 2000
    conflicts: list[LineError] = []

    def refuse(found: list[LineError]) -> None:
        """Conflicts: the whole file refused, or (skip_bad) their lines left out and reported."""
        if not found:
            return
        if not skip_bad:
            raise IngestError(errors + conflicts + found)
        conflicts.extend(found)

    def drop(found: list[LineError], fresh: list[dict]) -> list[dict]:
        bad = {(c.source, c.where) for c in found}
        return [e for e in fresh if (e["_file"], e["_where"]) not in bad]

    conv_ids = sorted({e["conversation_id"] for e in events})
    existing_conv = _stored_conversations(conn, conv_ids)
    found = _conversation_conflicts(events, existing_conv)
    # Existing message ids: a same-id, different-body line is a conflict, never an overwrite.
    stored = _stored_messages(conn, [e["message_id"] for e in events])
    fresh = []
    for e in events:
        old = stored.get(e["message_id"])
        if old is None:
            fresh.append(e)
        elif old != (e["content"], e["role"], e["at"]):
            found.append(_event_error(e, "message_id", f"{e['message_id']!r} is already stored with different content"))
        else:
            report.duplicates += 1
    refuse(found)
    fresh = drop(found, fresh)

    now = datetime.now(UTC)
    first_at: dict[str, datetime] = {}
    for e in fresh:
        w = e["world_id"]
        first_at[w] = min(first_at.get(w, e["at"]), e["at"])
    world_rows = [
        {
            "world_id": w,
            "name": next((e["world_name"] for e in fresh if e["world_id"] == w and e["world_name"]), w),
            "created_at": now,
            "first_event_at": at,
        }
        for w, at in sorted(first_at.items())
    ]
    # Rows in key order: two transactions writing overlapping files lock them in the same order.
    report.new_worlds = len(insert_missing(conn, worlds, world_rows, "world_id"))
    for w, at in sorted(first_at.items()):
        conn.execute(
            update(worlds)
            .where(worlds.c.world_id == w)
            .where((worlds.c.first_event_at.is_(None)) | (worlds.c.first_event_at > at))
            .values(first_event_at=at)
        )

    conv_rows: dict[str, dict] = {}
    for e in sorted(fresh, key=lambda e: e["conversation_id"]):
        if e["conversation_id"] not in existing_conv and e["conversation_id"] not in conv_rows:
            conv_rows[e["conversation_id"]] = {
                "conversation_id": e["conversation_id"],
                "world_id": e["world_id"],
                "platform": e["platform"],
                "debug": e["debug"],
                "title": e["conversation_title"],
                "created_at": now,
                "updated_at": now,
            }
    created = set(insert_missing(conn, conversations, list(conv_rows.values()), "conversation_id"))
    report.new_conversations = len(created)
    raced = sorted(set(conv_rows) - created)  # stored by a concurrent ingest since the read above
    if raced:
        found = _conversation_conflicts(fresh, _stored_conversations(conn, raced))
        if found and not final:
            raise _Raced
        refuse(found)
        fresh = drop(found, fresh)
    touched = sorted({e["conversation_id"] for e in fresh} - created)
    for i in range(0, len(touched), 1000):
        conn.execute(
            update(conversations)
            .where(conversations.c.conversation_id.in_(touched[i : i + 1000]))
            .values(updated_at=now)
        )

    fresh.sort(key=lambda e: e["message_id"])
    inserted: set[str] = set()
    for i in range(0, len(fresh), batch):
        chunk = fresh[i : i + batch]
        inserted.update(
            insert_missing(
                conn,
                messages,
                [
                    {
                        k: e[k]
                        for k in ("message_id", "conversation_id", "role", "content", "tool_calls", "at", "source")
                    }
                    | {"ingested_at": now}
                    for e in chunk
                ],
                "message_id",
            )
        )
        if progress:
            progress("write", min(i + batch, len(fresh)), len(fresh))
    raced_ids = [e["message_id"] for e in fresh if e["message_id"] not in inserted]
    if raced_ids:  # stored by a concurrent ingest since the read above: same body or a conflict
        again = _stored_messages(conn, raced_ids)
        found = []
        for e in fresh:
            if e["message_id"] in inserted:
                continue
            if again.get(e["message_id"]) == (e["content"], e["role"], e["at"]):
                report.duplicates += 1
            else:
                found.append(
                    _event_error(e, "message_id", f"{e['message_id']!r} is already stored with different content")
                )
        if found and not final:
            raise _Raced  # rows of its file are written already (world, conversation): start over
        refuse(found)
    report.inserted = len(inserted)
    report.rejected.extend(conflicts)
    conn.execute(
        ingest_batches.insert().values(
            source=fit(report.source, MAX_SOURCE_CHARS),
            sha256=sha256,
            lines=report.lines,
            inserted=report.inserted,
            duplicates=report.duplicates,
            rejected=len(report.rejected),
            at=now,
        )
    )
    if progress and not fresh:
        progress("write", 0, 0)


def _stored_conversations(conn: Connection, conv_ids: list[str]) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for i in range(0, len(conv_ids), 1000):
        rows = conn.execute(
            select(
                conversations.c.conversation_id,
                conversations.c.world_id,
                conversations.c.platform,
                conversations.c.debug,
            ).where(conversations.c.conversation_id.in_(conv_ids[i : i + 1000]))
        ).all()
        out.update({r[0]: (r[1], r[2], bool(r[3])) for r in rows})
    return out


def _conversation_conflicts(events: list[dict], stored: dict[str, tuple]) -> list[LineError]:
    out = []
    for e in events:
        known = stored.get(e["conversation_id"])
        if known is not None and known != (e["world_id"], e["platform"], e["debug"]):
            out.append(
                _event_error(
                    e, "conversation_id", f"{e['conversation_id']!r} is stored with (world, platform, debug) {known}"
                )
            )
    return out


def _stored_messages(conn: Connection, ids: list[str]) -> dict[str, tuple]:
    stored: dict[str, tuple] = {}
    for i in range(0, len(ids), 1000):
        for r in conn.execute(
            select(messages.c.message_id, messages.c.content, messages.c.role, messages.c.at).where(
                messages.c.message_id.in_(ids[i : i + 1000])
            )
        ):
            stored[r[0]] = (r[1], r[2], r[3])
    return stored
