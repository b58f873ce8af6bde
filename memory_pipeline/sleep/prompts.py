"""Seed 003 prompts (pure): the system prompt every sleep stage carries (the six self blocks and
the pinned facts), the tool schemas offered to each stage, light sleep's three user messages and
deep sleep's per-round instructions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from memory_pipeline.sleep.logic import CREATE, DEPRECATE, MERGE, UPDATE, Memory, MemoryType, Round

PROMPT_VERSION = "sleep-v1"
TRUNCATED = "[已截断 {n} 个 session]"
EMPTY_BLOCK = "（空）"

_TYPES = [t.value for t in MemoryType]
_SESSIONS = {"type": "array", "items": {"type": "string"}, "description": "session (conversation) ids"}
_OBSERVED = {"type": "string", "description": "ISO 8601 time with offset when the fact was observed"}


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    CREATE: _fn(
        CREATE,
        "Create one semantic memory (one independent fact).",
        {
            "type": {"type": "string", "enum": _TYPES},
            "content": {"type": "string"},
            "source_sessions": _SESSIONS,
            "observed_at": _OBSERVED,
        },
        ["type", "content", "source_sessions"],
    ),
    UPDATE: _fn(
        UPDATE,
        "Overwrite the fields passed; fields not passed keep their value; source_sessions: [] clears.",
        {
            "id": {"type": "string"},
            "type": {"type": "string", "enum": _TYPES},
            "content": {"type": "string"},
            "source_sessions": _SESSIONS,
            "observed_at": _OBSERVED,
        },
        ["id"],
    ),
    DEPRECATE: _fn(
        DEPRECATE,
        "Mark a memory deprecated (never deleted), with the reason.",
        {"id": {"type": "string"}, "reason": {"type": "string"}},
        ["id", "reason"],
    ),
    MERGE: _fn(
        MERGE,
        "Merge two or more memories into a new one: give the ids and the merged content only; the "
        "program unions source_sessions, keeps the earliest observed_at and deprecates the sources.",
        {"source_ids": {"type": "array", "items": {"type": "string"}}, "content": {"type": "string"}},
        ["source_ids", "content"],
    ),
}


def tools(names: Sequence[str]) -> list[dict[str, Any]]:
    return [TOOL_SCHEMAS[n] for n in names]


def system_prompt(block_names: Sequence[str], blocks: Mapping[str, str], pinned: Sequence[str]) -> str:
    """The identity context every sleep stage carries: the six self blocks, then the pinned facts."""
    lines = ["# 自我层"]
    for name in block_names:
        lines += [f"## {name}", blocks.get(name) or EMPTY_BLOCK]
    lines.append("# 常驻记忆（pinned facts）")
    lines += [f"- {p}" for p in pinned] or ["（无）"]
    return "\n".join(lines)


# --- light sleep -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionMaterial:
    """One session's recallable messages of the day: (time, role, text), oldest first."""

    session_id: str
    platform: str
    title: str | None
    lines: tuple[tuple[datetime, str, str], ...]

    @property
    def updated_at(self) -> datetime:
        return self.lines[-1][0]


def _head(s: SessionMaterial) -> str:
    return f"## session {s.session_id}（平台 {s.platform}" + (f"，标题 {s.title}" if s.title else "") + "）"


def _body(s: SessionMaterial, tz: ZoneInfo) -> list[str]:
    return [f"[{at.astimezone(tz):%Y-%m-%d %H:%M}] {role}: {' '.join(text.split())}" for at, role, text in s.lines]


def session_block(s: SessionMaterial, tz: ZoneInfo) -> str:
    return "\n".join([_head(s), *_body(s, tz)])


SESSION_CUT = "[本 session 超出整个预算：仅保留当日最新 {kept} 条消息，省略更早的 {dropped} 条]"


def session_tail(s: SessionMaterial, tz: ZoneInfo, room: int) -> tuple[str, int] | None:
    """The session cut to its newest messages that fit ``room`` characters, the cut marked under
    its heading: (block, messages left out), or None when not even the newest one fits."""
    body = _body(s, tz)
    marker_room = len(SESSION_CUT.format(kept=len(body), dropped=len(body)))
    used = len(_head(s)) + 1 + marker_room
    kept: list[str] = []
    for line in reversed(body):
        if used + 1 + len(line) > room:
            break
        kept.insert(0, line)
        used += 1 + len(line)
    if not kept:
        return None
    marker = SESSION_CUT.format(kept=len(kept), dropped=len(body) - len(kept))
    return "\n".join([_head(s), marker, *kept]), len(body) - len(kept)


@dataclass(frozen=True)
class FittedSessions:
    blocks: list[str]  # message 1's session blocks, oldest-updated first
    sessions: list[str]
    dropped: int  # the N of [已截断 N 个 session]
    cut: dict[str, int]  # session -> its older messages left out (a session larger than the budget)


def fit_sessions(sessions: Sequence[SessionMaterial], tz: ZoneInfo, budget: int) -> FittedSessions:
    """Light sleep's truncation (seed: 超过约 120k 字符时，按 session 更新时间倒序截断). Newest-updated
    first, every session that fits whole in what is left is kept; one that does not is dropped and
    older ones may still fit. A session larger than the whole budget could never be kept whole: it
    gets what the others left, cut to its newest messages and marked (SESSION_CUT), rather than
    being lost. Nothing fits: no block (the caller does not ask the model)."""
    blocks = {s.session_id: session_block(s, tz) for s in sessions}
    newest_first = sorted(sessions, key=lambda s: (s.updated_at, s.session_id), reverse=True)
    kept: dict[str, str] = {}
    used = 0
    for s in newest_first:
        size = len(blocks[s.session_id]) + 2  # with the blank line between blocks
        if used + size <= budget:
            kept[s.session_id] = blocks[s.session_id]
            used += size
    cut: dict[str, int] = {}
    for s in newest_first:
        if len(blocks[s.session_id]) + 2 <= budget:
            continue  # it fits alone: kept or dropped whole by the seed's rule above
        tail = session_tail(s, tz, budget - used - 2)
        if tail is not None:
            kept[s.session_id], cut[s.session_id] = tail
            used += len(tail[0]) + 2
    order = [s.session_id for s in sorted(sessions, key=lambda s: (s.updated_at, s.session_id)) if s.session_id in kept]
    return FittedSessions([kept[i] for i in order], order, len(sessions) - len(order), cut)


def light_message_one(day: date, blocks: Sequence[str], truncated: int) -> str:
    text = f"# 当日对话（CST {day.isoformat()}，user+assistant，按 session 分段）\n\n" + "\n\n".join(blocks)
    if truncated:
        text += "\n\n" + TRUNCATED.format(n=truncated)
    return text


def light_message_two(memories: Sequence[Memory], tz: ZoneInfo) -> str:
    rows = [json.dumps(m.as_json(tz), ensure_ascii=False, sort_keys=True) for m in memories]
    return "# 已有记忆（与当日 session 有交集的 active 记忆）\n" + ("\n".join(rows) if rows else "（无）")


LIGHT_INSTRUCTIONS = """# 提取指令
从消息 1 的当日对话中提取值得长期记住的语义记忆（每条一个独立事实）。
- 类型：world（世界/他人事实）、experience（经历）、imprint（深刻印象）、preference（偏好）。
- 只与消息 2 的已有记忆比较去重：已存在则不重复创建；内容有变化用 update_semantic_memory；
  被当日对话明确否定的用 deprecate_semantic_memory（写明原因）。跨 session 的去重留给深睡。
- source_sessions 填写事实来自的 session id；observed_at 为事实被观察到的时间。

# 工具
- create_semantic_memory(type, content, source_sessions, observed_at?)
- update_semantic_memory(id, 仅传要改的字段)：未传字段保持不变；清空 source_sessions 显式传 []
- deprecate_semantic_memory(id, reason)
没有可记录的内容时不调用工具，直接回复。"""


# --- deep sleep ------------------------------------------------------------------------------------

ROUND_INTENT: dict[Round, str] = {
    Round.CONTRADICTION: """# 第 1 轮：矛盾检测 + 过期标记
两条记忆在语义上互相否定，且无法用时间变化解释 → 矛盾：废弃错误或较旧的一条。被新事实取代的旧事实 → 废弃。
- ✓ 矛盾：「女儿属虎」vs「女儿属羊」（生肖唯一）
- ✓ 矛盾：「不喜欢吃辣」vs「喜欢吃辣」（直接否定）
- ✗ 不矛盾：「喜欢苹果」vs「喜欢樱桃」（可共存）
- ✗ 不矛盾（变化）：「喜欢 Python」vs「现在更喜欢 TypeScript」（新旧都可对）
用 deprecate_semantic_memory(id, reason)，reason 写明依据（例如 新事实取代）。""",
    Round.SPLIT: """# 第 2 轮：拆分
一条 content 含多个独立事实 → 用 create_semantic_memory 为每个事实建一条（沿用 type、source_sessions、
observed_at），再用 deprecate_semantic_memory(id, reason="已拆分") 废弃原条目。""",
    Round.MERGE: """# 第 3 轮：去重合并
重复或高度相似的记忆 → merge_semantic_memories(source_ids, content)：只写合并后的 content，
source_sessions 与 observed_at 由程序缝合；至少两个 source_id（只改一条请用 update_semantic_memory）。""",
}

DEEP_TOOL_USAGE = """# 工具
create_semantic_memory / update_semantic_memory（仅传要改的字段）/ deprecate_semantic_memory（带 reason）/
merge_semantic_memories（source_ids ≥ 2）。消息 1.5 的增量变更以其为准。没有要做的操作时不调用工具。"""


def deep_message_three(round_: Round) -> str:
    return ROUND_INTENT[round_] + "\n\n" + DEEP_TOOL_USAGE


# --- autobiography ---------------------------------------------------------------------------------

CREATE_AUTO = "create_autobiographical_memory"
DEPRECATE_AUTO = "deprecate_autobiographical_memory"
AUTO_TOOLS: tuple[str, ...] = (CREATE_AUTO, DEPRECATE_AUTO)
AUTO_KINDS = ("event", "milestone", "turning_point")

AUTO_SCHEMAS: dict[str, dict[str, Any]] = {
    CREATE_AUTO: _fn(
        CREATE_AUTO,
        "Append one autobiographical narrative (no content update exists).",
        {
            "narrative": {"type": "string"},
            "significance": {"type": "integer", "minimum": 1, "maximum": 5},
            "kind": {"type": "string", "enum": list(AUTO_KINDS)},
            "period": {"type": "string", "description": "YYYY-MM-DD..YYYY-MM-DD"},
            "source_memory_ids": {"type": "array", "items": {"type": "string"}},
        },
        ["narrative", "significance", "kind", "source_memory_ids"],
    ),
    DEPRECATE_AUTO: _fn(
        DEPRECATE_AUTO,
        "Deprecate an autobiographical narrative, with the reason.",
        {"id": {"type": "string"}, "reason": {"type": "string"}},
        ["id", "reason"],
    ),
}

AUTO_INSTRUCTIONS = """# 自传叙事提取（阶段 A）
消息 1 是近 7 日的 experience / imprint 语义记忆，消息 2 是已有的自传记忆。
若有值得记录的叙事，用 create_autobiographical_memory 追加（significance 1–5；kind 为 event、milestone
或 turning_point）；已被取代的叙事用 deprecate_autobiographical_memory。
克制：没有值得记录的叙事就不调用工具，直接回复跳过。"""
