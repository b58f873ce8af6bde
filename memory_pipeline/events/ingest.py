"""JSONL ingestion of raw conversation events (append-only, idempotent on message_id).

One JSON object per line (UTF-8):

    {"message_id": "m-1", "world_id": "agent-a", "conversation_id": "c-1",
     "platform": "local", "debug": false, "role": "user",
     "content": "hello", "tool_calls": null, "timestamp": "2026-07-18T06:12:00+08:00"}

Required: message_id, world_id, conversation_id, role, timestamp (ISO 8601 with an offset).
Optional: platform (default "local"), debug (default false), content (default ""), tool_calls
(list or null), world_name, conversation_title.

A file is written whole or not at all; with ``skip_bad=True`` good lines are written and bad ones
reported. Either way nothing is half-written: the write is one transaction.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from memory_pipeline.events.tables import ingest_batches
from memory_pipeline.lib.store import Store, upsert
from memory_pipeline.lib.store.tables import conversations, messages, worlds

ROLES = {"user", "assistant", "tool", "system"}
REQUIRED = ("message_id", "world_id", "conversation_id", "role", "timestamp")
MAX_LINE_BYTES = 1_048_576
MAX_CONTENT_CHARS = 100_000
MAX_ID_CHARS = 128
FUTURE_TOLERANCE = timedelta(minutes=1)


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
    source: str
    line: int
    field: str
    problem: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: field '{self.field}': {self.problem}"


class IngestError(ValueError):
    def __init__(self, errors: list[LineError], written: bool = False):
        self.errors = errors
        shown = "\n".join(f"  {e}" for e in errors[:50])
        more = f"\n  ... and {len(errors) - 50} more" if len(errors) > 50 else ""
        verdict = "bad lines were skipped" if written else "nothing was written"
        super().__init__(f"{len(errors)} bad line(s); {verdict}:\n{shown}{more}")


@dataclass
class IngestReport:
    source: str
    lines: int = 0
    inserted: int = 0
    duplicates: int = 0
    rejected: list[LineError] = field(default_factory=list)
    new_conversations: int = 0
    new_worlds: int = 0


def parse_timestamp(value: Any) -> datetime:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("missing or not a string")
    text = value.strip().replace("Z", "+00:00") if value.strip().endswith("Z") else value.strip()
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"unparsable timestamp {value!r} (want ISO 8601 with an offset)") from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"timestamp {value!r} has no time zone offset")
    return dt.astimezone(UTC)


def _validate(obj: Any, source: str, lineno: int, now: datetime) -> tuple[dict | None, list[LineError]]:
    def err(f: str, p: str) -> LineError:
        return LineError(source, lineno, f, p)

    if not isinstance(obj, dict):
        return None, [err("<line>", f"expected a JSON object, got {type(obj).__name__}")]
    errors: list[LineError] = []
    for name in REQUIRED:
        if obj.get(name) in (None, ""):
            errors.append(err(name, "missing"))
    for name in ("message_id", "world_id", "conversation_id"):
        value = obj.get(name)
        if value not in (None, "") and (not isinstance(value, str) or len(value) > MAX_ID_CHARS):
            errors.append(err(name, f"must be a string of at most {MAX_ID_CHARS} characters"))
    role = obj.get("role")
    if role not in (None, "") and role not in ROLES:
        errors.append(err("role", f"unknown role {role!r} (expected one of {', '.join(sorted(ROLES))})"))
    at = None
    if obj.get("timestamp") not in (None, ""):
        try:
            at = parse_timestamp(obj["timestamp"])
            if at > now + FUTURE_TOLERANCE:
                errors.append(err("timestamp", f"{obj['timestamp']} is in the future"))
        except ValueError as exc:
            errors.append(err("timestamp", str(exc)))
    content = obj.get("content", "")
    if content is None:
        content = ""
    if not isinstance(content, str):
        errors.append(err("content", "must be a string"))
    elif len(content) > MAX_CONTENT_CHARS:
        errors.append(err("content", f"oversized body: {len(content)} characters (limit {MAX_CONTENT_CHARS})"))
    tool_calls = obj.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        errors.append(err("tool_calls", "must be a list or null"))
    debug = obj.get("debug", False)
    if not isinstance(debug, bool):
        errors.append(err("debug", "must be true or false"))
    platform = obj.get("platform", "local") or "local"
    if not isinstance(platform, str) or len(platform) > 64:
        errors.append(err("platform", "must be a string of at most 64 characters"))
    if errors:
        return None, errors
    return {
        "message_id": obj["message_id"],
        "world_id": obj["world_id"],
        "world_name": obj.get("world_name"),
        "conversation_id": obj["conversation_id"],
        "conversation_title": obj.get("conversation_title"),
        "platform": platform,
        "debug": debug,
        "role": role,
        "content": content,
        "tool_calls": tool_calls or None,
        "at": at,
        "source": f"{source}:{lineno}",
        "_file": source,
        "_line": lineno,
    }, []


def _event_error(event: dict, field_name: str, problem: str) -> LineError:
    return LineError(event.get("_file", "<events>"), event.get("_line", 0), field_name, problem)


Progress = Callable[[str, int, int], None]  # (phase, done, total): "validate" in bytes, "write" in rows


def read_events(
    path: Path, now: datetime | None = None, progress: Progress | None = None
) -> tuple[list[dict], list[LineError], int, str]:
    """Parse and validate every line; returns (events, errors, line_count, sha256)."""
    now = now or datetime.now(UTC)
    source = str(path)
    events: list[dict] = []
    errors: list[LineError] = []
    seen: dict[str, dict] = {}
    conv_meta: dict[str, tuple] = {}
    digest = hashlib.sha256()
    lineno = 0
    total, done = path.stat().st_size, 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            digest.update(raw)
            done += len(raw)
            if progress and lineno % 5000 == 0:
                progress("validate", done, total)
            if len(raw) > MAX_LINE_BYTES:
                errors.append(
                    LineError(source, lineno, "<line>", f"oversized line: {len(raw)} bytes (limit {MAX_LINE_BYTES})")
                )
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                errors.append(LineError(source, lineno, "<line>", f"bad encoding (not UTF-8) at byte {exc.start}"))
                continue
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                errors.append(LineError(source, lineno, "<line>", f"malformed JSON: {exc.msg} at column {exc.colno}"))
                continue
            event, errs = _validate(obj, source, lineno, now)
            if errs:
                errors.extend(errs)
                continue
            prev = seen.get(event["message_id"])
            if prev is not None:
                if (prev["content"], prev["role"], prev["at"]) != (event["content"], event["role"], event["at"]):
                    errors.append(
                        LineError(
                            source,
                            lineno,
                            "message_id",
                            f"{event['message_id']!r} repeats {prev['source']} with different content",
                        )
                    )
                continue
            meta = (event["world_id"], event["platform"], event["debug"])
            known = conv_meta.setdefault(event["conversation_id"], meta)
            if known != meta:
                errors.append(
                    LineError(
                        source,
                        lineno,
                        "conversation_id",
                        f"{event['conversation_id']!r} has (world, platform, debug) {meta}, earlier lines say {known}",
                    )
                )
                continue
            seen[event["message_id"]] = event
            events.append(event)
    if progress:
        progress("validate", total, total)
    return events, errors, lineno, digest.hexdigest()


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
        store, events, source=str(path), errors=errors, lines=lines, sha256=sha, skip_bad=skip_bad, progress=progress
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
    """Write validated events in one transaction (see module docstring)."""
    errors = list(errors or [])
    if errors and not skip_bad:
        raise IngestError(errors)
    report = IngestReport(source=source, lines=lines if lines is not None else len(events), rejected=errors)
    batch = 2000
    with store.begin() as conn:
        conv_ids = sorted({e["conversation_id"] for e in events})
        existing_conv: dict[str, tuple] = {}
        for i in range(0, len(conv_ids), 1000):
            rows = conn.execute(
                select(
                    conversations.c.conversation_id,
                    conversations.c.world_id,
                    conversations.c.platform,
                    conversations.c.debug,
                ).where(conversations.c.conversation_id.in_(conv_ids[i : i + 1000]))
            ).all()
            existing_conv.update({r[0]: (r[1], r[2], bool(r[3])) for r in rows})
        conflicts = []
        for e in events:
            known = existing_conv.get(e["conversation_id"])
            if known is not None and known != (e["world_id"], e["platform"], e["debug"]):
                conflicts.append(
                    _event_error(
                        e,
                        "conversation_id",
                        f"{e['conversation_id']!r} is stored with (world, platform, debug) {known}",
                    )
                )
        # Existing message ids: a same-id, different-body line is a conflict, never an overwrite.
        ids = [e["message_id"] for e in events]
        stored: dict[str, tuple] = {}
        for i in range(0, len(ids), 1000):
            for r in conn.execute(
                select(messages.c.message_id, messages.c.content, messages.c.role, messages.c.at).where(
                    messages.c.message_id.in_(ids[i : i + 1000])
                )
            ):
                stored[r[0]] = (r[1], r[2], r[3])
        fresh = []
        for e in events:
            old = stored.get(e["message_id"])
            if old is None:
                fresh.append(e)
            elif old != (e["content"], e["role"], e["at"]):
                conflicts.append(
                    _event_error(e, "message_id", f"{e['message_id']!r} is already stored with different content")
                )
            else:
                report.duplicates += 1
        if conflicts:
            if not skip_bad:
                raise IngestError(errors + conflicts)
            bad = {(c.source, c.line) for c in conflicts}
            fresh = [e for e in fresh if (e["_file"], e["_line"]) not in bad]
            report.rejected.extend(conflicts)

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
        before = conn.execute(select(func.count()).select_from(worlds)).scalar_one()
        upsert(conn, worlds, world_rows, keys=["world_id"], update=[])
        report.new_worlds = conn.execute(select(func.count()).select_from(worlds)).scalar_one() - before
        for w, at in first_at.items():
            conn.execute(
                update(worlds)
                .where(worlds.c.world_id == w)
                .where((worlds.c.first_event_at.is_(None)) | (worlds.c.first_event_at > at))
                .values(first_event_at=at)
            )

        conv_rows = {}
        for e in fresh:
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
        upsert(conn, conversations, list(conv_rows.values()), keys=["conversation_id"], update=[])
        report.new_conversations = len(conv_rows)
        touched = sorted({e["conversation_id"] for e in fresh} - set(conv_rows))
        for i in range(0, len(touched), 1000):
            conn.execute(
                update(conversations)
                .where(conversations.c.conversation_id.in_(touched[i : i + 1000]))
                .values(updated_at=now)
            )

        for i in range(0, len(fresh), batch):
            chunk = fresh[i : i + batch]
            # Plain INSERT: ids were checked above in this transaction; a concurrent ingest of the
            # same ids fails this transaction whole rather than half-writing it.
            conn.execute(
                messages.insert(),
                [
                    {
                        k: e[k]
                        for k in ("message_id", "conversation_id", "role", "content", "tool_calls", "at", "source")
                    }
                    | {"ingested_at": now}
                    for e in chunk
                ],
            )
            if progress:
                progress("write", min(i + batch, len(fresh)), len(fresh))
        report.inserted = len(fresh)
        conn.execute(
            ingest_batches.insert().values(
                source=source,
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
    return report
