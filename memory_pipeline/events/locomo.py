"""Import LoCoMo conversations (``speaker_a``/``speaker_b``, ``session_N`` turns and
``session_N_date_time`` like "1:56 pm on 8 May, 2023", which carries no zone).

Each file becomes one world ``locomo-<file stem>`` (the agent is speaker_b, so speaker_a's turns
are ``user`` and speaker_b's ``assistant``); each ``session_N`` key present (any numbers, gaps
allowed) one conversation ``<world>.session-N`` on platform ``locomo``; each turn one message
``<world>.<dia_id with ':' as '.'>`` (``locomo-26.D1.3``). Turns get a timestamp one minute apart
from the session start, interpreted in the zone given. ``session_N_date_time`` keys without a
``session_N`` and every other key (``qa``, ``*_summary``, ``img_url`` ...) are ignored.

Every turn goes through the same validator as a JSONL line (``ingest.validate_event``). Refusals
read ``{file}:{where}: field '{name}': {problem}`` where ``where`` is the JSON path of the value
at fault (``$.session_3[4].text``; ``$.conversation.session_3[4].text`` when the file wraps the
conversation in a ``conversation`` key), or the line number of a JSON syntax error."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from memory_pipeline.events.ingest import (
    FUTURE_TOLERANCE,
    MAX_CONTENT_CHARS,
    Event,
    EventBatch,
    IngestReport,
    LineError,
    Progress,
    ingest_events,
    source_label,
)
from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.jsontypes import JSONObject
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.text import json_error, json_type, shown, text_problem
from memory_pipeline.lib.timeutil import instant_problem

TURN_SPACING = timedelta(minutes=1)
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_SPEAKER_CHARS = 100  # "{b} (with {a})" stays within worlds.name (256)
SESSION_KEY = re.compile(r"session_(\d+)")
SESSION_TIME_FORMAT = "%I:%M %p on %d %B, %Y"
SESSION_TIME_EXAMPLE = "'1:56 pm on 8 May, 2023'"
# Event fields of a turn → the LoCoMo key they come from.
TURN_KEYS = {"content": "text", "message_id": "dia_id", "role": "speaker"}


def parse_session_time(text: str, tz: ZoneInfo) -> datetime:
    naive = datetime.strptime(" ".join(text.split()), SESSION_TIME_FORMAT)
    return naive.replace(tzinfo=tz)


def load_document(path: Path, source: str) -> tuple[JSONObject | None, list[LineError]]:
    """The parsed file (BOM tolerated), or the one refusal of it."""

    def refuse(where: int | str, problem: str) -> tuple[None, list[LineError]]:
        return None, [LineError(source, where, "<file>", problem)]

    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        return refuse("$", f"oversized file: {size} bytes (limit {MAX_FILE_BYTES})")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return refuse("$", f"bad encoding (not UTF-8) at byte offset {exc.start}")
    if not text.strip():
        return refuse("$", "empty file")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return refuse(exc.lineno, f"malformed JSON: {json_error(exc)}")
    except RecursionError:
        return refuse("$", "malformed JSON: nested too deeply")
    except ValueError:  # e.g. an integer beyond Python's digit limit
        return refuse("$", "malformed JSON: unreadable number")
    if not isinstance(doc, dict):
        return refuse("$", f"expected a JSON object, got {json_type(doc)}")
    return doc, []


class _Reader:
    """One LoCoMo document → events and located refusals (validate phase only; nothing is written)."""

    def __init__(self, source: str, doc: dict[str, Any], world: str, tz: ZoneInfo, now: datetime):
        self.source, self.world, self.tz, self.now = source, world, tz, now
        wrapped = "conversation" in doc
        self.conv: Any  # a JSON value: read() refuses one that is not an object
        self.conv, self.base = (doc["conversation"], "$.conversation") if wrapped else (doc, "$")
        self.batch = EventBatch(source, now)
        self.errors: list[LineError] = []
        self.ids: dict[str, str] = {}  # message id → the turn path that made it
        self.a = self.b = ""

    def refuse(self, where: str, name: str, problem: str) -> None:
        self.errors.append(LineError(self.source, where, name, problem))

    def key(self, name: str) -> str:
        return f"{self.base}.{name}"

    def read(self) -> None:
        if not isinstance(self.conv, dict):
            return self.refuse(self.base, "conversation", f"expected an object, got {json_type(self.conv)}")
        if not self.header_ok():
            return None
        for n in self.session_numbers():
            self.session(n)
        return None

    def header_ok(self) -> bool:
        problem = validate_id(self.world)
        if problem:
            self.refuse("$", "world_id", f"world id {shown(self.world)} (from the file name): {problem}")
        for name in ("speaker_a", "speaker_b"):
            value = self.conv.get(name)
            problem = "missing" if value in (None, "") else text_problem(value, MAX_SPEAKER_CHARS)
            if problem:
                self.refuse(self.key(name), name, problem)
        if self.errors:
            return False
        self.a, self.b = self.conv["speaker_a"], self.conv["speaker_b"]
        if self.a == self.b:
            self.refuse(self.key("speaker_b"), "speaker_b", "must differ from speaker_a")
        return not self.errors

    def session_numbers(self) -> list[int]:
        numbers = []
        for name in self.conv:
            match = SESSION_KEY.fullmatch(name)
            if not match:
                continue
            digits = match.group(1)
            if digits.startswith("0") or len(digits) > 6:
                self.refuse(self.key(name), name, "session number must be 1-999999 without leading zeros")
            else:
                numbers.append(int(digits))
        return sorted(numbers)

    def session(self, n: int) -> None:
        name = f"session_{n}"
        turns = self.conv[name]
        if not isinstance(turns, list):
            return self.refuse(self.key(name), name, f"expected a list of turns, got {json_type(turns)}")
        start = self.session_start(n, len(turns))
        if start is not None:
            for i, turn in enumerate(turns):
                self.turn(n, i, turn, start)
        return None

    def session_start(self, n: int, turns: int) -> datetime | None:
        name = f"session_{n}_date_time"
        value = self.conv.get(name)
        problem = self.session_time_problem(value, turns)
        if problem:
            self.refuse(self.key(name), name, problem)
            return None
        return parse_session_time(value, self.tz)

    def session_time_problem(self, value: Any, turns: int) -> str | None:
        if value in (None, ""):
            return f"missing (the session's start, e.g. {SESSION_TIME_EXAMPLE})"
        if not isinstance(value, str):
            return f"must be a string like {SESSION_TIME_EXAMPLE}, got {json_type(value)}"
        try:
            start = parse_session_time(value, self.tz)
        except ValueError:
            return f"unparsable session time {shown(value)} (want e.g. {SESSION_TIME_EXAMPLE})"
        problem = instant_problem(start)
        if problem:
            return f"{shown(value)} {problem}"
        if start > self.now + FUTURE_TOLERANCE:
            return f"{shown(value)} is in the future"
        if start + TURN_SPACING * max(0, turns - 1) > self.now + FUTURE_TOLERANCE:
            return f"{shown(value)}: the session's last turn (#{turns}, one minute apart) would be in the future"
        return None

    def turn(self, n: int, i: int, turn: Any, start: datetime) -> None:
        where = f"{self.key(f'session_{n}')}[{i}]"
        if not isinstance(turn, dict):
            return self.refuse(where, f"session_{n}[{i}]", f"expected a turn object, got {json_type(turn)}")
        before = len(self.errors)
        text, caption = self.turn_text(turn, where)
        message_id = self.message_id(turn, n, i, where)
        if turn.get("speaker") not in (self.a, self.b):
            speaker = shown(turn.get("speaker"))
            self.refuse(f"{where}.speaker", "speaker", f"unknown speaker {speaker} (expected speaker_a or speaker_b)")
        if len(self.errors) > before:
            return None
        event = self.event(n, turn["speaker"], message_id, text, caption, start + TURN_SPACING * i)
        self.errors.extend(self.locate(e, n, where) for e in self.batch.add(event, where))
        return None

    def turn_text(self, turn: dict[str, Any], where: str) -> tuple[str, str]:
        text, caption = turn.get("text"), turn.get("blip_caption")
        if text is not None and not isinstance(text, str):
            self.refuse(f"{where}.text", "text", f"must be a string, got {json_type(text)}")
        if caption not in (None, "") and (problem := text_problem(caption, MAX_CONTENT_CHARS, controls=True)):
            self.refuse(f"{where}.blip_caption", "blip_caption", problem)
        return (text if isinstance(text, str) else ""), (caption if isinstance(caption, str) else "")

    def message_id(self, turn: dict[str, Any], n: int, i: int, where: str) -> str:
        dia = turn.get("dia_id")
        if dia in (None, ""):
            dia = f"D{n}:{i + 1}"
        elif not isinstance(dia, str):
            self.refuse(f"{where}.dia_id", "dia_id", f"must be a string, got {json_type(dia)}")
            return ""
        message_id = f"{self.world}.{dia.replace(':', '.')}"
        first = self.ids.setdefault(message_id, where)
        if first != where:
            self.refuse(
                f"{where}.dia_id", "dia_id", f"duplicate: message id {shown(message_id)} is also made by {first}"
            )
        return message_id

    def event(self, n: int, speaker: str, message_id: str, text: str, caption: str, at: datetime) -> Event:
        return {
            "message_id": message_id,
            "world_id": self.world,
            "world_name": f"{self.b} (with {self.a})",
            "conversation_id": f"{self.world}.session-{n}",
            "conversation_title": f"{self.a} & {self.b}, session {n}",
            "platform": "locomo",
            "debug": False,
            "role": "user" if speaker == self.a else "assistant",
            "content": f"{text} [shares a photo: {caption}]" if caption else text,
            "tool_calls": None,
            "timestamp": at.isoformat(),
        }

    def locate(self, error: LineError, n: int, where: str) -> LineError:
        """A validator refusal of a turn's event, moved to the LoCoMo key it comes from."""
        if error.field in TURN_KEYS:
            name = TURN_KEYS[error.field]
            problem = error.problem if name != "dia_id" else f"the message id it makes: {error.problem}"
            return LineError(self.source, f"{where}.{name}", name, problem)
        if error.field in ("timestamp", "conversation_id"):
            name = f"session_{n}_date_time" if error.field == "timestamp" else f"session_{n}"
            return LineError(self.source, self.key(name), name, f"{error.field}: {error.problem}")
        return LineError(self.source, where, error.field, error.problem)


def locomo_events(
    path: str | Path, tz: ZoneInfo, world_prefix: str = "locomo", now: datetime | None = None
) -> tuple[list[Event], list[LineError]]:
    """Validate one LoCoMo file: (events ready for ``ingest_events``, refusals). Writes nothing."""
    path = Path(path)
    source = source_label(path)
    doc, errors = load_document(path, source)
    if doc is None:
        return [], errors
    reader = _Reader(source, doc, f"{world_prefix}-{path.stem}", tz, now or datetime.now(UTC))
    reader.read()
    return reader.batch.events, list(dict.fromkeys(reader.errors))


def import_locomo(
    store: Store,
    path: str | Path,
    tz: ZoneInfo,
    *,
    skip_bad: bool = False,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Validate, then write in one transaction (all or nothing unless ``skip_bad``); IngestError on refusal."""
    events, errors = locomo_events(path, tz, now=now)
    return ingest_events(store, events, source=source_label(path), errors=errors, skip_bad=skip_bad, progress=progress)
