"""Import LoCoMo conversations (``speaker_a``/``speaker_b``, ``session_N`` turns and
``session_N_date_time`` like "1:56 pm on 8 May, 2023", which carries no zone).

Each file becomes one world (the agent is speaker_b, so speaker_a's turns are ``user`` and
speaker_b's ``assistant``); each session one conversation on platform ``locomo``. Turns get a
timestamp one minute apart from the session start, interpreted in the zone given."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from memory_pipeline.events.ingest import LineError

TURN_SPACING = timedelta(minutes=1)


def parse_session_time(text: str, tz: ZoneInfo) -> datetime:
    naive = datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y")
    return naive.replace(tzinfo=tz)


def locomo_events(path: str | Path, tz: ZoneInfo, world_prefix: str = "locomo") -> tuple[list[dict], list[LineError]]:
    path = Path(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    conv = doc.get("conversation", doc)
    world = f"{world_prefix}-{path.stem}"
    a, b = conv.get("speaker_a"), conv.get("speaker_b")
    events: list[dict] = []
    errors: list[LineError] = []
    if not a or not b:
        return [], [LineError(str(path), 0, "speaker_a/speaker_b", "missing")]
    n = 1
    while f"session_{n}_date_time" in conv:
        turns = conv.get(f"session_{n}") or []
        field = f"session_{n}_date_time"
        try:
            start = parse_session_time(conv[field], tz)
        except (TypeError, ValueError):
            errors.append(LineError(str(path), 0, field, f"unparsable session time {conv[field]!r}"))
            n += 1
            continue
        for i, turn in enumerate(turns):
            speaker = turn.get("speaker")
            if speaker not in (a, b):
                errors.append(LineError(str(path), 0, f"session_{n}[{i}].speaker", f"unknown speaker {speaker!r}"))
                continue
            text = turn.get("text") or ""
            if turn.get("blip_caption"):
                text = f"{text} [shares a photo: {turn['blip_caption']}]"
            events.append(
                {
                    "message_id": f"{world}:{turn.get('dia_id') or f'D{n}:{i + 1}'}",
                    "world_id": world,
                    "world_name": f"{b} (with {a})",
                    "conversation_id": f"{world}:session-{n}",
                    "conversation_title": f"{a} & {b}, session {n}",
                    "platform": "locomo",
                    "debug": False,
                    "role": "user" if speaker == a else "assistant",
                    "content": text,
                    "tool_calls": None,
                    "at": (start + TURN_SPACING * i).astimezone(ZoneInfo("UTC")),
                    "source": f"{path}:session_{n}[{i}]",
                    "_file": str(path),
                    "_line": 0,
                }
            )
        n += 1
    return events, errors
