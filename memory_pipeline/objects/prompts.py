"""Seed 001 prompts and tool schemas (pure). The compact model gets only its batch's nodes and one
submit tool; organize and deep get the page / objects and the graph-write protocol."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memory_pipeline.lib.text import unfenced
from memory_pipeline.objects import logic

COMPACT_VERSION = "objects-compact-v2"
ORGANIZE_VERSION = "objects-organize-v3"
DEEP_VERSION = "objects-deep-v3"

# Seed 001 §1 建议正文: what each type's body holds (unknown facts are written as unknown).
SUGGESTED_BODIES = {
    "person": "identity, role, traits, collaboration tips",
    "task": "goal, progress, constraints, next step",
    "todo": "item, condition, state",
    "schedule": "time rule, item, state",
    "knowledge": "conclusion, applicability, lessons",
    "project": "scope, goal, current state",
    "credential": "what it is for (purpose) and where it is kept (reference); never the secret",
}
_BODIES = "; ".join(f"{t}: {b}" for t, b in SUGGESTED_BODIES.items())

COMPACT_SYSTEM = (
    "You compact an agent's hot timeline. Replace the given nodes with one summary head that is "
    "shorter than them and covers every node id. Finish by calling submit_compact. You have no "
    "other tool: object writes are not part of compaction. A refused call comes back as its "
    "result naming the field; correct it and call again (at most 3 corrections)."
)

_CORE = (
    "The core documents (AGENTS.md, SOUL.md, USER.md) are in `core`, each with its current content "
    "(or absent). A core write replaces a whole document: start from the content given, keep what a "
    "human wrote, and change only what this material calls for. A document not delivered, or changed "
    "since this batch read it, cannot be written."
)

ORGANIZE_SYSTEM = (
    "You archive one page of one event into long-term objects (person, task, todo, schedule, "
    "knowledge, project, credential). Each object is one concise current dossier: no quotes or "
    "tool logs in the body (they stay in the event, the object's evidence); unknown facts are written "
    "as unknown, never guessed. Suggested bodies: " + _BODIES + ". object.status is the memory "
    "lifecycle; business states (to do, done) go in the body. Relations use "
    "only the labels " + ", ".join(logic.RelationLabel) + ". New projects are candidates. A "
    "credential keeps purpose and reference, never a secret value. You may call memory_list, "
    "memory_find, memory_read and memory_evidence first (every tool call gets its result; their results "
    "count against the bytes left of the batch's transfer budget, and one that does not fit is cut or "
    "refused); finish with submit_graph and an outcome: continue (more pages or object "
    "work; save progress), linked (whole event read, at least one object or core target), "
    f"archive_only (whole event read, no object target, say why). Limits: summary {logic.SUMMARY_MAX_CHARS}, "
    f"body {logic.BODY_MAX_CHARS:,}, progress {logic.PROGRESS_MAX_CHARS:,}, reason {logic.REASON_MAX_CHARS:,} characters; "
    f"per write {logic.MAX_OBJECTS_PER_WRITE} objects, {logic.MAX_RELATIONS_PER_WRITE} relations, {logic.MAX_CORE_PER_WRITE} core. "
    "A scope, when given, is the request's goal and a search hint, never a filter: the claimed page is "
    "archived whatever it is about. A refused call says what is wrong; at most 3 refusals per batch. " + _CORE
)

DEEP_SYSTEM = (
    "You review long-term objects: cross-project relations, stale conclusions, duplicates, reusable "
    "knowledge. Do not rewrite unchanged objects. Confirm every reviewed id in submit_graph.reviewed. "
    "The hot timeline is not yours to change, and the core documents change only when something calls "
    "for it. Read an object's evidence (memory_evidence) only when you need the raw events. Every tool "
    "call gets its result; a refused call says what is wrong (at most 3 refusals per batch). " + _CORE
)

_STR = {"type": "string"}
_STRS = {"type": "array", "items": _STR}


def _tool(name: str, description: str, properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(required)},
        },
    }


SUBMIT_COMPACT_TOOL = _tool(
    "submit_compact",
    "Submit the summary head of this batch.",
    {"summary": _STR, "covers": _STRS},
    ["summary", "covers"],
)
FIND_TOOL = _tool("memory_find", "Find objects by name, alias, term, cue or project.", {"query": _STR}, ["query"])
READ_TOOL = _tool("memory_read", "Read one object's whole dossier.", {"id": _STR}, ["id"])
LIST_TOOL = _tool(
    "memory_list",
    "List the objects of one type (id, name, status, summary), 20 at a time.",
    {"type": {"type": "string", "enum": list(logic.ObjectType)}, "offset": {"type": "integer"}},
    ["type"],
)
EVIDENCE_TOOL = _tool(
    "memory_evidence",
    "An object's sources: its attached events' raw text, oldest first, 20 at a time.",
    {"id": _STR, "offset": {"type": "integer"}},
    ["id"],
)
# What organize and deep offer: look around first (list, search, read objects and their sources), then submit.
READ_TOOLS = [LIST_TOOL, FIND_TOOL, READ_TOOL, EVIDENCE_TOOL]
SUBMIT_GRAPH_TOOL = _tool(
    "submit_graph",
    "Commit this batch's graph write (one transaction).",
    {
        "token": _STR,
        "graph_revision": {"type": "integer"},
        "event_id": _STR,
        "outcome": {"type": "string", "enum": list(logic.Outcome)},
        "page_end": {"type": "integer"},
        "progress": _STR,
        "reason": _STR,
        "objects": {"type": "array", "items": {"type": "object"}},
        "relations": {"type": "array", "items": {"type": "object"}},
        "attach": _STRS,
        "core": {"type": "array", "items": {"type": "object"}},
        "reviewed": _STRS,
        "evidence": _STRS,
    },
    ["token", "graph_revision"],
)


def compact_user(nodes: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(
        {"nodes": [{"id": n["node_id"], "level": n["level"], "text": n["text"]} for n in nodes]}, ensure_ascii=False
    )


def organize_user(
    *,
    token: str,
    revision: int,
    event_id: str,
    occurred_at: str,
    chars: int,
    start: int,
    stop: int,
    text: str,
    progress: str,
    objects: Sequence[Mapping[str, Any]],
    bytes_left: int,
    scope: str = "",
    core: Sequence[Mapping[str, Any]] = (),
) -> str:
    return json.dumps(
        {
            "token": token,
            "graph_revision": revision,
            "scope": scope,  # the request's goal and search hint, never a filter
            "event": {"id": event_id, "occurred_at": occurred_at, "chars": chars, "page": [start, stop], "text": text},
            "progress": progress,
            "core": list(core),
            "objects": list(objects),
            "transfer_bytes_left": bytes_left,  # for read-tool results
        },
        ensure_ascii=False,
        default=str,
    )


def deep_user(
    *,
    token: str,
    revision: int,
    objects: Sequence[Mapping[str, Any]],
    bytes_left: int,
    scope: str = "",
    core: Sequence[Mapping[str, Any]] = (),
) -> str:
    return json.dumps(
        {
            "token": token,
            "graph_revision": revision,
            "scope": scope,
            "core": list(core),
            "objects": list(objects),
            "transfer_bytes_left": bytes_left,
        },
        ensure_ascii=False,
        default=str,
    )


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an answer: ``call_id`` (None for a JSON answer in the text), the tool
    (empty: the bare arguments of the submit tool), the parsed arguments (the text when they are
    not JSON) and ``raw``, the arguments exactly as received (what their size is measured on)."""

    call_id: str | None
    name: str
    arguments: Any
    raw: str

    @property
    def size(self) -> int:
        return len(self.raw.encode())


def parse_tool_calls(result_text: str, tool_calls: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
    """Every tool call of an answer, in order; or the one JSON object in the text of a model
    without tool calls: {"tool": name, "arguments": {...}}, or the bare arguments of the submit
    tool. An answer with neither: []."""
    if tool_calls:
        out = []
        for call in tool_calls:
            args = call.get("arguments")
            raw = call.get("raw_arguments")
            if not isinstance(raw, str):  # the offline model: no wire, its arguments as JSON text
                raw = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)
            out.append(ToolCall(call.get("id"), str(call.get("name", "")), args, raw))
        return out
    text = unfenced(result_text)
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    if isinstance(doc, dict) and isinstance(doc.get("tool"), str):
        args = doc.get("arguments")
        return [ToolCall(None, doc["tool"], args, json.dumps(args, ensure_ascii=False, default=str))]
    return [ToolCall(None, "", doc, text)] if isinstance(doc, dict) else []


# Arguments this large are not sent back to the model with its answer (they were refused for their
# size, and echoing them would send the oversized proposal again).
ECHO_MAX_BYTES = logic.PROPOSAL_MAX_BYTES


def _echo(raw: str) -> str:
    size = len(raw.encode())
    return raw if size < ECHO_MAX_BYTES else json.dumps({"omitted": f"{size:,} bytes, not sent back"})


def assistant_message(text: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The model's answer as it goes back in the batch's conversation."""
    with_ids = [c for c in calls if c.call_id is not None]
    if not with_ids:
        return {"role": "assistant", "content": _echo(text or "")}
    echoed = [
        {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": _echo(c.raw)}} for c in with_ids
    ]
    return {"role": "assistant", "content": _echo(text) if text else None, "tool_calls": echoed}


def tool_result(call: ToolCall, content: Mapping[str, Any]) -> dict[str, Any]:
    """The result of one tool call: a tool message with its tool_call_id (a user message for a
    JSON answer in the text, which has no id)."""
    if call.call_id is None:
        body = json.dumps({"result_of": call.name or "submission", **content}, ensure_ascii=False, default=str)
        return {"role": "user", "content": body}
    return {
        "role": "tool",
        "tool_call_id": call.call_id,
        "content": json.dumps(content, ensure_ascii=False, default=str),
    }
