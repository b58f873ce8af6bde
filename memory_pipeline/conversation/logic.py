"""Seed 002 pure rules: the Step-0 gate and the triggers, the summary's exact Markdown layout
(rendered by the program from the model's four sections), its format checks, the check line,
and the tool the model answers with."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any

TITLE = "# 对话历程摘要（滚动）"
QUOTE = (
    "> 由 conversation_summary skill 维护。rolling 更新，不覆盖。\n> 作为 long context 的压缩锚，防止角色漂向共情模板。"
)
ARC = "## 最近情感主线（至 {day}）"
PREFS = "## 已知用户偏好 / 事实（归集自 user_profile.md，以最近为准）"
KEYS = "## 情绪关键点（最近 30 条里）"
HOOKS = "## 未解决的钩子"
CHECK_LINE = "我对咱们最近聊的事的印象是 {recap}，大致对吗？"
TOOL = "write_conversation_summary"
STATES = ("投入", "回避", "波动")


class InitStatus(StrEnum):
    PENDING = "pending"
    PHASE1_DONE = "phase1_done"
    PHASE2_DONE = "phase2_done"
    DONE = "done"


class Trigger(StrEnum):
    ENTRIES = "entries"  # >= 30 entries after covered_range's end
    USER_CHECK = "user_check"  # 用户主动校验记忆
    PREFERENCE_OVERRIDE = "preference_override"  # Phase 5 用户偏好 override
    CORRECTION = "correction"  # the user denied the check line: a new version with their wording


class FormatError(ValueError):
    """The model's answer breaks the layout (a failure: nothing written, retried next trigger)."""


def gate(status: str | None, entries: int, min_entries: int = 30) -> bool:
    """Step 0: initialization_status must be done (missing = not done) and the history must hold at
    least ``min_entries`` entries; a miss is a silent skip."""
    return status == InitStatus.DONE and entries >= min_entries


def due(status: str | None, entries: int, covered_end: int, explicit: bool, min_entries: int = 30) -> bool:
    """Whether a conversation gets a new summary version now. The entries trigger needs at least
    ``min_entries`` entries after covered_range's end; an explicit trigger (user check, preference
    override) needs no new entries. Every trigger passes the gate."""
    if not gate(status, entries, min_entries):
        return False
    return explicit or entries - covered_end >= min_entries


def is_haiku_class(model: str) -> bool:
    """Seed: ❌ 用 Haiku 压缩（精度不足以识别情感主线）."""
    return "haiku" in model.lower()


_SENTENCE_END = re.compile(r"[。！？!?]+|\.(?=\s|$)")
_DATE = re.compile(r"\b\d{4}-\d{1,2}-\d{1,2}\b|\d{1,2}月\d{1,2}日|\b\d{1,2}/\d{1,2}\b")


def sentences(text: str) -> int:
    parts = [p for p in _SENTENCE_END.split(text) if p.strip()]
    return len(parts)


@dataclass(frozen=True)
class Sections:
    arc: str
    preferences: tuple[str, ...]
    key_points: tuple[tuple[str, str], ...]  # (topic, 投入 / 回避 / 波动)
    hooks: tuple[str, ...]


def _strings(args: Mapping[str, Any], name: str, limit: int = 20) -> tuple[str, ...]:
    value = args.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise FormatError(f"field '{name}': expected a list of non-empty strings")
    if len(value) > limit:
        raise FormatError(f"field '{name}': {len(value)} items (limit {limit})")
    return tuple(" ".join(v.split()) for v in value)


def parse_sections(call: Mapping[str, Any], max_sentences: int = 10) -> Sections:
    """The model's tool call as the four sections, or FormatError naming what is wrong."""
    if call.get("name") != TOOL:
        raise FormatError(f"tool call {call.get('id')}: expected {TOOL}, got {call.get('name')!r}")
    args = call.get("arguments")
    if not isinstance(args, dict):
        raise FormatError(f"tool call {call.get('id')}: arguments are not a JSON object")
    extra = sorted(set(args) - {"emotional_arc", "preferences", "emotional_key_points", "unresolved_hooks"})
    if extra:
        raise FormatError(f"field '{extra[0]}': unexpected field")
    arc = args.get("emotional_arc")
    if not isinstance(arc, str) or not arc.strip():
        raise FormatError("field 'emotional_arc': missing or empty")
    arc = " ".join(arc.split())
    n = sentences(arc)
    if n > max_sentences:
        raise FormatError(f"field 'emotional_arc': {n} sentences (more than {max_sentences}: 没提炼到主线)")
    if _DATE.search(arc):
        raise FormatError("field 'emotional_arc': contains a date (摘要不是流水账)")
    points = args.get("emotional_key_points", [])
    if not isinstance(points, list):
        raise FormatError("field 'emotional_key_points': expected a list")
    kp = []
    for i, p in enumerate(points):
        if not isinstance(p, dict) or not isinstance(p.get("topic"), str) or not p["topic"].strip():
            raise FormatError(f"field 'emotional_key_points[{i}]': expected {{topic, state}}")
        if p.get("state") not in STATES:
            raise FormatError(
                f"field 'emotional_key_points[{i}].state': {p.get('state')!r} is not one of 投入, 回避, 波动"
            )
        kp.append((" ".join(p["topic"].split()), str(p["state"])))
    return Sections(arc, _strings(args, "preferences"), tuple(kp), _strings(args, "unresolved_hooks"))


def render(s: Sections, until: date, last_updated: datetime, start: int, end: int) -> str:
    """The seed's session_summary.md layout, exactly."""
    prefs = "\n".join(f"- {p}" for p in s.preferences) or "- （暂无）"
    keys = "\n".join(f"- {t} → {st}" for t, st in s.key_points) or "- （暂无）"
    hooks = "\n".join(f"- {h}" for h in s.hooks) or "- （暂无）"
    return (
        f"{TITLE}\n\n{QUOTE}\n\n{ARC.format(day=until.isoformat())}\n\n{s.arc}\n\n{PREFS}\n\n{prefs}\n\n"
        f"{KEYS}\n\n{keys}\n\n{HOOKS}\n\n{hooks}\n\n---\n\n"
        f"<!-- last_updated: {last_updated.isoformat(timespec='seconds')} -->\n"
        f"<!-- covered_range: L{start} - L{end} -->\n"
    )


_LAYOUT = re.compile(
    r"\A# 对话历程摘要（滚动）\n\n> .+\n> .+\n\n## 最近情感主线（至 \d{4}-\d{2}-\d{2}）\n\n.+\n\n"
    r"## 已知用户偏好 / 事实（归集自 user_profile\.md，以最近为准）\n\n(- .+\n)+\n## 情绪关键点（最近 30 条里）\n\n"
    r"(- .+ → (投入|回避|波动)\n|- （暂无）\n)+\n## 未解决的钩子\n\n(- .+\n)+\n---\n\n"
    r"<!-- last_updated: \S+ -->\n<!-- covered_range: L\d+ - L\d+ -->\n\Z"
)


def layout_ok(markdown: str) -> bool:
    return _LAYOUT.match(markdown) is not None


def check_line(arc: str) -> str:
    first = _SENTENCE_END.split(arc)[0].strip()
    return CHECK_LINE.format(recap=first[:80])


def merge_preferences(profile: Sequence[tuple[str, str]], from_model: Sequence[str]) -> tuple[str, ...]:
    """Profile facts first (newest first: most recent wins), then the model's not already there."""
    out = [f"{k}：{v}" for k, v in profile]
    seen = {o.casefold() for o in out}
    out += [p for p in from_model if p.casefold() not in seen]
    return tuple(dict.fromkeys(out))
