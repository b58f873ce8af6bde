"""Seed 003 pure rules: the semantic-memory tools with their exact semantics, applied to an
in-memory state (validated whole before anything changes), the change log of deep sleep's message
1.5 in the seed's text, and the size bands. No I/O: the core loads a state in one query, applies
the model's calls here, and writes the resulting changes in one transaction."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from memory_pipeline.lib.text import short_hash
from memory_pipeline.lib.timeutil import parse_instant


class MemoryType(StrEnum):
    WORLD = "world"
    EXPERIENCE = "experience"
    IMPRINT = "imprint"
    PREFERENCE = "preference"


class MemoryStatus(StrEnum):
    ACTIVE = "active"
    DEPRECATED = "deprecated"


class Stage(StrEnum):
    """Who wrote a change: the three sleep stages, the in-conversation `remember`, and the memory
    tool's explicit delete (the only physical delete, never offered to a sleep stage)."""

    LIGHT = "light_sleep"
    DEEP = "deep_sleep"
    AUTOBIOGRAPHY = "autobiography_cron"
    REMEMBER = "remember"
    MEMORY_TOOL = "memory_tool"
    REBUILD = "sleep_rebuild"  # an operator's rebuild of day D: restores the set before D's sleep


class Op(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DEPRECATE = "deprecate"
    MERGE = "merge"
    DELETE = "delete"
    RESTORE = "restore"  # a rebuild put an earlier state of the memory back (reactivated or reverted)


class Round(StrEnum):
    """Deep sleep's three rounds, in their order (seed: 先清理问题，再细化，最后合并)."""

    CONTRADICTION = "contradiction"
    SPLIT = "split"
    MERGE = "merge"


ROUNDS: tuple[Round, ...] = (Round.CONTRADICTION, Round.SPLIT, Round.MERGE)


class SizeBand(StrEnum):
    NORMAL = "normal"  # < 10k
    WARN = "warn"  # 10k .. 100k: warn log, processed normally
    BATCHED = "batched"  # 100k .. 300k: one batch per type
    REFUSED = "refused"  # > 300k


def size_band(chars: int, warn: int = 10_000, batch: int = 100_000, refuse: int = 300_000) -> SizeBand:
    if chars > refuse:
        return SizeBand.REFUSED
    if chars >= batch:
        return SizeBand.BATCHED
    if chars >= warn:
        return SizeBand.WARN
    return SizeBand.NORMAL


CREATE = "create_semantic_memory"
UPDATE = "update_semantic_memory"
DEPRECATE = "deprecate_semantic_memory"
MERGE = "merge_semantic_memories"
# Light sleep: three tools, no search (message 2 already holds what it may compare against).
LIGHT_TOOLS: tuple[str, ...] = (CREATE, UPDATE, DEPRECATE)
DEEP_TOOLS: tuple[str, ...] = (CREATE, UPDATE, DEPRECATE, MERGE)
KNOWN_TOOLS = frozenset({*DEEP_TOOLS, "search_semantic_memory", "remember"})
CONTENT_MAX_CHARS = 2000
REASON_MAX_CHARS = 500
SESSIONS_MAX = 200


class ToolError(ValueError):
    """A tool call refused as a whole: it names the call, the tool and the field at fault."""


@dataclass
class Memory:
    id: str
    world_id: str
    type: str
    content: str
    source_sessions: list[str]
    observed_at: datetime
    status: str = MemoryStatus.ACTIVE
    merged_into: str | None = None
    reason: str | None = None
    version: int = 0

    def as_json(self, tz: ZoneInfo) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "content": self.content,
            "source_sessions": list(self.source_sessions),
            "observed_at": self.observed_at.astimezone(tz).isoformat(timespec="seconds"),
        }


@dataclass
class Change:
    """One applied change: the memory after it (a version row), and what the log shows."""

    op: Op
    memory: Memory
    fields: dict[str, Any] = field(default_factory=dict)  # update: the fields passed
    sources: list[str] = field(default_factory=list)  # merge: the deprecated source ids
    note: str | None = None  # the version row's reason when it differs from the memory's (a restore's why)


@dataclass(frozen=True)
class Rules:
    """What one stage's calls may touch: the offered tools, the sessions a light-sleep memory may
    cite (None: any), the ids it may edit (None: any active one), the default observed_at, and
    per session the time a create citing it defaults to (light sleep: the session's last message
    of the day; several cited sessions: the earliest of their times, as a merge keeps the earliest)."""

    stage: Stage
    tools: tuple[str, ...]
    default_observed_at: datetime
    allowed_sessions: frozenset[str] | None = None
    editable_ids: frozenset[str] | None = None
    session_times: Mapping[str, datetime] | None = None

    def observed_default(self, sessions: Sequence[str]) -> datetime:
        known = self.session_times or {}
        times = [known[s] for s in sessions if s in known]
        return min(times) if times else self.default_observed_at


def _field_error(call_id: str, tool: str, name: str, problem: str) -> ToolError:
    return ToolError(f"tool call {call_id} ({tool}): field '{name}': {problem}")


def _text(call_id: str, tool: str, args: Mapping[str, Any], name: str, limit: int) -> str:
    if name not in args:
        raise _field_error(call_id, tool, name, "missing")
    value = args[name]
    if not isinstance(value, str):
        raise _field_error(call_id, tool, name, f"expected a string, got {type(value).__name__}")
    if not value.strip():
        raise _field_error(call_id, tool, name, "empty")
    if len(value) > limit:
        raise _field_error(call_id, tool, name, f"{len(value)} characters (limit {limit})")
    if "\x00" in value:
        raise _field_error(call_id, tool, name, "contains a NUL character")
    return value.strip()


def _type(call_id: str, tool: str, value: Any) -> str:
    if value not in {t.value for t in MemoryType}:
        allowed = ", ".join(t.value for t in MemoryType)
        raise _field_error(call_id, tool, "type", f"{value!r} is not one of {allowed}")
    return str(value)


def _sessions(call_id: str, tool: str, value: Any, rules: Rules) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise _field_error(call_id, tool, "source_sessions", "expected a list of session ids (strings)")
    if len(value) > SESSIONS_MAX:
        raise _field_error(call_id, tool, "source_sessions", f"{len(value)} ids (limit {SESSIONS_MAX})")
    if rules.allowed_sessions is not None:
        unknown = [s for s in value if s not in rules.allowed_sessions]
        if unknown:
            raise _field_error(call_id, tool, "source_sessions", f"{unknown[0]!r} is not a session of this day")
    return list(dict.fromkeys(value))


def _observed(call_id: str, tool: str, value: Any) -> datetime:
    try:
        return parse_instant(value)
    except (ValueError, TypeError) as exc:
        raise _field_error(call_id, tool, "observed_at", f"not an ISO 8601 time with an offset ({exc})") from None


def _no_extra(call_id: str, tool: str, args: Mapping[str, Any], allowed: Iterable[str]) -> None:
    extra = sorted(set(args) - set(allowed))
    if extra:
        raise _field_error(call_id, tool, extra[0], "unexpected field (not in the tool's parameters)")


class MemoryState:
    """The active memories of one world as a stage sees them, and the changes applied so far."""

    def __init__(self, world_id: str, memories: Iterable[Memory], salt: str, taken: Iterable[str] = ()):
        self.world_id = world_id
        self.memories: dict[str, Memory] = {m.id: m for m in memories}
        self.salt = salt
        # Every id the world has used (deprecated rows included): a re-run after a rebuild makes
        # the same calls in the same order, and must not reuse an id that still names an old row.
        self.taken = set(taken) | set(self.memories)
        self.changes: list[Change] = []
        self._seq = 0

    def active(self) -> list[Memory]:
        return sorted((m for m in self.memories.values() if m.status == MemoryStatus.ACTIVE), key=lambda m: m.id)

    def _new_id(self, content: str) -> str:
        while True:
            self._seq += 1
            mid = "f-" + short_hash([self.world_id, self.salt, self._seq, content], length=12)
            if mid not in self.taken:
                self.taken.add(mid)
                return mid

    def _editable(self, call_id: str, tool: str, name: str, memory_id: Any, rules: Rules) -> Memory:
        if not isinstance(memory_id, str) or not memory_id:
            raise _field_error(call_id, tool, name, f"expected a memory id (string), got {memory_id!r}")
        m = self.memories.get(memory_id)
        if m is None:
            raise _field_error(call_id, tool, name, f"no memory {memory_id!r} in this world")
        if m.status != MemoryStatus.ACTIVE:
            where = f" (merged into {m.merged_into})" if m.merged_into else ""
            raise _field_error(call_id, tool, name, f"memory {memory_id!r} is deprecated{where}")
        created_here = any(c.memory.id == memory_id and c.op in (Op.CREATE, Op.MERGE) for c in self.changes)
        if rules.editable_ids is not None and memory_id not in rules.editable_ids and not created_here:
            raise _field_error(call_id, tool, name, f"memory {memory_id!r} is not among this stage's memories")
        return m

    def apply(self, call: Mapping[str, Any], rules: Rules) -> list[Change]:
        """Validate the call whole, then apply it; a refused call changes nothing (ToolError)."""
        call_id = str(call.get("id") or "?")
        tool = call.get("name")
        if tool not in rules.tools:
            offered = ", ".join(rules.tools)
            what = "not offered to this stage" if tool in KNOWN_TOOLS else "unknown tool"
            raise ToolError(f"tool call {call_id}: {what} {tool!r} (this stage offers {offered})")
        args = call.get("arguments")
        if not isinstance(args, dict):
            shown = args if isinstance(args, str) else type(args).__name__
            raise ToolError(f"tool call {call_id} ({tool}): arguments are not a JSON object: {str(shown)[:80]!r}")
        if tool == CREATE:
            return [self._create(call_id, args, rules)]
        if tool == UPDATE:
            return [self._update(call_id, args, rules)]
        if tool == DEPRECATE:
            return [self._deprecate(call_id, args, rules)]
        return self._merge(call_id, args, rules)

    def _create(self, call_id: str, args: Mapping[str, Any], rules: Rules) -> Change:
        _no_extra(call_id, CREATE, args, ("type", "content", "source_sessions", "observed_at"))
        if "type" not in args:
            raise _field_error(call_id, CREATE, "type", "missing")
        mtype = _type(call_id, CREATE, args["type"])
        content = _text(call_id, CREATE, args, "content", CONTENT_MAX_CHARS)
        if "source_sessions" not in args:
            raise _field_error(call_id, CREATE, "source_sessions", "missing (the sessions the fact comes from)")
        sessions = _sessions(call_id, CREATE, args["source_sessions"], rules)
        observed = _observed(call_id, CREATE, args["observed_at"]) if "observed_at" in args else None
        m = Memory(
            self._new_id(content),
            self.world_id,
            mtype,
            content,
            sessions,
            observed or rules.observed_default(sessions),
            version=1,
        )
        self.memories[m.id] = m
        change = Change(Op.CREATE, copy.deepcopy(m))
        self.changes.append(change)
        return change

    def _update(self, call_id: str, args: Mapping[str, Any], rules: Rules) -> Change:
        _no_extra(call_id, UPDATE, args, ("id", "type", "content", "source_sessions", "observed_at"))
        if "id" not in args:
            raise _field_error(call_id, UPDATE, "id", "missing")
        m = self._editable(call_id, UPDATE, "id", args["id"], rules)
        new: dict[str, Any] = {}
        if "type" in args:
            new["type"] = _type(call_id, UPDATE, args["type"])
        if "content" in args:
            new["content"] = _text(call_id, UPDATE, args, "content", CONTENT_MAX_CHARS)
        if "source_sessions" in args:  # [] clears; absent keeps
            new["source_sessions"] = _sessions(call_id, UPDATE, args["source_sessions"], rules)
        if "observed_at" in args:
            new["observed_at"] = _observed(call_id, UPDATE, args["observed_at"])
        if not new:
            raise _field_error(call_id, UPDATE, "content", "no field to change (pass at least one)")
        for k, v in new.items():
            setattr(m, k, v)
        m.version += 1
        change = Change(Op.UPDATE, copy.deepcopy(m), fields=new)
        self.changes.append(change)
        return change

    def _deprecate(self, call_id: str, args: Mapping[str, Any], rules: Rules) -> Change:
        _no_extra(call_id, DEPRECATE, args, ("id", "reason"))
        if "id" not in args:
            raise _field_error(call_id, DEPRECATE, "id", "missing")
        m = self._editable(call_id, DEPRECATE, "id", args["id"], rules)
        reason = _text(call_id, DEPRECATE, args, "reason", REASON_MAX_CHARS)
        m.status, m.reason = MemoryStatus.DEPRECATED, reason
        m.version += 1
        change = Change(Op.DEPRECATE, copy.deepcopy(m))
        self.changes.append(change)
        return change

    def _merge(self, call_id: str, args: Mapping[str, Any], rules: Rules) -> list[Change]:
        _no_extra(call_id, MERGE, args, ("source_ids", "content"))
        ids = args.get("source_ids")
        if "source_ids" not in args:
            raise _field_error(call_id, MERGE, "source_ids", "missing")
        if not isinstance(ids, list):
            raise _field_error(call_id, MERGE, "source_ids", f"expected a list of ids, got {type(ids).__name__}")
        if not all(isinstance(i, str) for i in ids):
            raise _field_error(call_id, MERGE, "source_ids", "expected a list of memory ids (strings)")
        ids = list(dict.fromkeys(ids))
        if len(ids) < 2:
            raise _field_error(
                call_id, MERGE, "source_ids", "only one source id: use update_semantic_memory to change one memory"
            )
        sources = [self._editable(call_id, MERGE, "source_ids", i, rules) for i in ids]
        content = _text(call_id, MERGE, args, "content", CONTENT_MAX_CHARS)
        # The program stitches the fields; the model only writes the merged content.
        sessions = list(dict.fromkeys(s for m in sources for s in m.source_sessions))
        observed = min(m.observed_at for m in sources)
        merged = Memory(self._new_id(content), self.world_id, sources[0].type, content, sessions, observed, version=1)
        self.memories[merged.id] = merged
        out = [Change(Op.MERGE, copy.deepcopy(merged), sources=list(ids))]
        for m in sources:
            m.status, m.merged_into, m.reason = MemoryStatus.DEPRECATED, merged.id, f"merged into {merged.id}"
            m.version += 1
            out.append(Change(Op.DEPRECATE, copy.deepcopy(m)))
        self.changes.extend(out)
        return out


def normalized(text: str) -> str:
    """Content compared for exact duplicates: case and whitespace and trailing punctuation ignored."""
    return " ".join(text.casefold().split()).rstrip("。.!！")


def duplicate_of(state: MemoryState, call: Mapping[str, Any], candidates: Iterable[str]) -> str | None:
    """A create whose content equals an active candidate's (same type): the id it duplicates. The
    program's guard that re-materializing a day never duplicates a fact, whatever the model says."""
    args = call.get("arguments")
    if call.get("name") != CREATE or not isinstance(args, dict) or not isinstance(args.get("content"), str):
        return None
    want = (args.get("type"), normalized(args["content"]))
    for mid in candidates:
        m = state.memories.get(mid)
        if m is not None and m.status == MemoryStatus.ACTIVE and (m.type, normalized(m.content)) == want:
            return m.id
    return None


# --- deep sleep: message 1 and message 1.5 ---------------------------------------------------------


def message_one(memories: Sequence[Memory], tz: ZoneInfo) -> str:
    """All active memories as JSON, sorted by id, one compact line per memory: built once per
    batch, so every round sends it byte-identical (provider prompt caching)."""
    rows = [json.dumps(m.as_json(tz), ensure_ascii=False, sort_keys=True) for m in sorted(memories, key=lambda m: m.id)]
    return "[\n" + ",\n".join(rows) + "\n]"


@dataclass
class ChangeLog:
    """Cumulative changes of the rounds so far, against message 1 (the seed's message 1.5)."""

    original: frozenset[str]  # the ids message 1 shows
    processed: dict[str, str] = field(default_factory=dict)  # id -> line tail
    new: dict[str, Memory] = field(default_factory=dict)
    modified: dict[str, dict[str, Any]] = field(default_factory=dict)

    def record(self, change: Change) -> None:
        m = change.memory
        if change.op in (Op.CREATE, Op.MERGE):
            self.new[m.id] = m
        elif change.op == Op.UPDATE:
            if m.id in self.new:
                self.new[m.id] = m
            else:
                self.modified.setdefault(m.id, {}).update(change.fields)
        elif change.op == Op.DEPRECATE:
            self.new.pop(m.id, None)
            self.modified.pop(m.id, None)
            if m.id not in self.original:
                return  # created in an earlier round: message 1 never showed it, nothing to ignore there
            if m.merged_into:
                self.processed[m.id] = f"已被合并到 {m.merged_into}"
            else:
                self.processed[m.id] = f"已过期/废弃（{one_line(m.reason or '')}）"

    @property
    def count(self) -> int:
        return len(self.processed) + len(self.new) + len(self.modified)


def one_line(text: str) -> str:
    """Model-written text put into a line of message 1.5 (a reason, a session id): whitespace runs,
    newlines included, become one space, so no value can start a line of its own (forge a section)."""
    return " ".join(str(text).split())


def _value(v: Any, tz: ZoneInfo) -> str:
    if isinstance(v, datetime):
        return v.astimezone(tz).isoformat(timespec="seconds")
    if isinstance(v, list):
        return "[" + ",".join(one_line(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def render_changes(log: ChangeLog, tz: ZoneInfo) -> str:
    """The seed's message 1.5 text; '' while nothing changed (the first round). Sections with no
    line are left out."""
    if not log.count:
        return ""
    parts = ["# 增量变更（以本内容为准）"]
    if log.processed:
        lines = [f"{i} — {tail}" for i, tail in sorted(log.processed.items())]
        parts.append("## 已处理（请忽略消息1中的以下原始条目）\n" + "\n".join(lines))
    if log.new:
        lines = [
            f"{m.id} ({m.type}) {json.dumps(m.content, ensure_ascii=False)} "
            f"sources={_value(list(m.source_sessions), tz)} observed={_value(m.observed_at, tz)}"
            for m in sorted(log.new.values(), key=lambda m: m.id)
        ]
        parts.append("## 新增条目（未在消息1中出现）\n" + "\n".join(lines))
    if log.modified:
        lines = [
            f"{i} — 已修改：" + "；".join(f"{k} 更新为 {_value(v, tz)}" for k, v in sorted(fields.items()))
            for i, fields in sorted(log.modified.items())
        ]
        parts.append("## 已修改条目（以本内容为准，覆盖消息1中的原始版本）\n" + "\n".join(lines))
    return "\n\n".join(parts)


# --- rebuild: the set before a place in the day order ---------------------------------------------

# The writers whose changes a restore to before a place undoes when made at that place or later
# (sleep/order.py: version_position). A restore's own rows count: restoring to an earlier place
# afterwards undoes them too (they put back a state of that day).
SLEEP_WRITERS = frozenset({Stage.LIGHT, Stage.DEEP, Stage.REBUILD})


@dataclass(frozen=True)
class VersionRow:
    """One row of semantic_memory_versions: the memory as it was after one change."""

    stage: str
    day: date | None
    type: str
    content: str
    source_sessions: list[str]
    observed_at: datetime
    status: str
    merged_into: str | None
    reason: str | None
    round: str | None = None

    def state(self) -> tuple[Any, ...]:
        return (
            self.type,
            self.content,
            list(self.source_sessions),
            self.observed_at,
            str(self.status),
            self.merged_into,
        )


def _state(m: Memory) -> tuple[Any, ...]:
    return (m.type, m.content, list(m.source_sessions), m.observed_at, str(m.status), m.merged_into)


def restore_changes(
    current: Mapping[str, Memory],
    versions: Mapping[str, Sequence[VersionRow]],
    day: date,
    undone: Callable[[VersionRow], bool],
    before: str,
) -> list[Change]:
    """What a rebuild of ``day`` writes to put back the semantic memory as it was ``before`` (e.g.
    "the sleep of 2026-03-03"): every memory (``current``, its live row) takes the state of its
    newest version row the restore does not undo (``versions``: its rows, oldest first; ``undone``:
    written at that place or later). A memory with no such row was created there or later: it is
    deprecated. Nothing is deleted; each change is a version row (op restore or deprecate) saying
    why. What `remember` wrote stays.

    A memory whose rows it undoes gets a row even when its state does not change (already
    deprecated, or changed back since): the undone rows are no longer its history, and a later
    restore to a later place must find this row as the newest one it keeps, not an undone one."""
    out: list[Change] = []
    for mid in sorted(current):
        m = current[mid]
        rows = versions.get(mid, [])
        kept = [r for r in rows if not undone(r)]
        if len(kept) == len(rows):
            continue  # nothing of it to undo
        if not kept:
            first = rows[0] if rows else None
            made = f"{first.stage} of {first.day}" if first else "a later sleep"
            why = f"rebuild of {day}: created by {made}, undone (the set is restored to before {before})"
            new = copy.deepcopy(m)
            new.status, new.version = MemoryStatus.DEPRECATED, m.version + 1
            if m.status == MemoryStatus.ACTIVE:
                new.reason = why
                out.append(Change(Op.DEPRECATE, new, note=why))
            else:  # deprecated already (by the undone rows): it stays so, as of this restore
                out.append(Change(Op.RESTORE, new, note=f"{why}; deprecated already, it stays so"))
            continue
        target = kept[-1]
        new = Memory(
            m.id,
            m.world_id,
            target.type,
            target.content,
            list(target.source_sessions),
            target.observed_at,
            target.status,
            target.merged_into,
            target.reason,
            m.version + 1,
        )
        undoing = f"undoing {len(rows) - len(kept)} change(s)"
        if target.state() == _state(m):
            why = f"rebuild of {day}: its state before {before} stands ({undoing})"
        else:
            what = (
                "reactivated" if new.status == MemoryStatus.ACTIVE and m.status != MemoryStatus.ACTIVE else "reverted"
            )
            why = f"rebuild of {day}: {what} to its state before {before} ({undoing})"
        out.append(Change(Op.RESTORE, new, note=why))
    return out
