"""Seed 001 §4 the agent's tools (memory_find, memory_read, memory_evidence, memory_organize,
memory_status, and memory_approve: the user's approval of a candidate project, relayed by the
agent after asking) as one dispatcher over tool-call arguments: every argument is checked and a bad
one is refused with ToolError naming it; nothing is written then. Reading never calls a model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias, TypedDict
from zoneinfo import ZoneInfo

from memory_pipeline.lib import ids
from memory_pipeline.lib.jsontypes import JSONObject
from memory_pipeline.objects import graph, logic, recall, reports, worker
from memory_pipeline.objects.context import ObjectsContext

_AGENT_ARGS = {
    "memory_find": {"world", "query", "limit"},
    "memory_read": {"world", "id"},
    "memory_evidence": {"world", "id", "offset", "limit"},
    "memory_organize": {"world", "mode", "scope", "retry_blocked", "token"},
    "memory_status": {"world"},
    "memory_approve": {"world", "id"},
}
TOOLS = tuple(_AGENT_ARGS)


class ToolError(ValueError):
    """A refused tool call: the message names the tool and the argument."""


class Found(TypedDict):
    """memory_find's answer."""

    items: list[recall.FoundDoc]


# What a tool answers: memory_status, memory_find, memory_read, memory_evidence, memory_organize's
# receipt, memory_approve's answer (JSON).
Answer: TypeAlias = reports.Status | Found | recall.Dossier | recall.EvidencePage | worker.Receipt | JSONObject


def _arg(args: Mapping[str, Any], tool: str, name: str, kind: type, default: Any = ...) -> Any:
    if name not in args:
        if default is ...:
            raise ToolError(f"{tool}.{name}: required")
        return default
    value = args[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ToolError(f"{tool}.{name}: expected an integer")
    if kind is int and value > logic.INT_MAX:
        raise ToolError(f"{tool}.{name}: must be at most {logic.INT_MAX:,}, got {value}")
    if kind is not int and not isinstance(value, kind):
        raise ToolError(f"{tool}.{name}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _world(args: Mapping[str, Any], tool: str) -> str:
    world = _arg(args, tool, "world", str)
    problem = ids.validate_id(world)
    if problem:
        raise ToolError(f"{tool}.world: {problem}")
    return str(world)


def _text(args: Mapping[str, Any], tool: str, name: str, limit: int, default: Any = ...) -> str:
    value = _arg(args, tool, name, str, default)
    if len(value) > limit or "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise ToolError(f"{tool}.{name}: at most {limit} characters, no NUL or lone surrogate")
    return str(value)


def _query(args: Mapping[str, Any], tool: str) -> str:
    query = _text(args, tool, "query", 500)
    if not query.strip():
        raise ToolError(f"{tool}.query: must not be empty")
    return query


def _object_id(args: Mapping[str, Any], tool: str) -> str:
    oid = _arg(args, tool, "id", str)
    try:
        logic.parse_object_id(oid, f"{tool}.id")
    except logic.SubmissionError as exc:
        raise ToolError(str(exc)) from None
    return str(oid)


def _dossier(octx: ObjectsContext, world: str, oid: str, tool: str, tz: ZoneInfo | None = None) -> recall.Dossier:
    doc = recall.read(octx.store, world, oid, tz=tz)
    if doc is None:
        raise ToolError(f"{tool}.id: no object {oid} in world {world}")
    return doc


def _evidence(
    octx: ObjectsContext,
    world: str,
    oid: str,
    tool: str,
    offset: int,
    limit: int = recall.PAGE,
    tz: ZoneInfo | None = None,
) -> recall.EvidencePage:
    found = recall.evidence(octx.store, world, oid, offset, limit, tz=tz)
    if found is None:
        raise ToolError(f"{tool}.id: no object {oid} in world {world}")
    return found


def _checked(tool: object, args: object, allowed: Mapping[str, set[str]]) -> tuple[str, Mapping[str, Any]]:
    if not isinstance(tool, str) or tool not in allowed:  # a list or an object names no tool either
        raise ToolError(f"tool: {str(tool)[:40]!r} is not one of {', '.join(allowed)}")
    name = tool
    if not isinstance(args, Mapping):
        raise ToolError(f"{name}: arguments must be an object")
    extra = sorted(str(k) for k in args if k not in allowed[name])
    if extra:
        names = ", ".join(sorted(allowed[name])) or "none"
        raise ToolError(f"{name}.{extra[0][:40]}: unknown argument (arguments: {names})")
    return name, args


def call(octx: ObjectsContext, tool: object, args: object, *, tz: ZoneInfo | None = None) -> Answer:
    """One of the agent's tool calls. ``tz``: memory_status's, memory_find's, memory_read's and
    memory_evidence's times in that zone, to the second (the command line passes the configured
    zone); None: as stored (recall's and reports.status's ``tz``)."""
    tool, args = _checked(tool, args, _AGENT_ARGS)
    store = octx.store
    if tool == "memory_status":
        world = _world(args, tool) if "world" in args else None
        return reports.status(store, world, tz=tz)
    world = _world(args, tool)
    if tool == "memory_find":
        limit = _arg(args, tool, "limit", int, recall.PAGE)
        if not 1 <= limit <= 100:
            raise ToolError(f"{tool}.limit: 1-100")
        return {"items": recall.find(store, world, _query(args, tool), limit, tz=tz)}
    if tool == "memory_approve":
        # The user's approval, relayed by the agent after asking: a candidate project becomes active.
        pid = _arg(args, tool, "id", str)
        try:
            return graph.approve_project(octx, world, pid)
        except logic.SubmissionError as exc:
            raise ToolError(f"{tool}.id: {exc.problem}") from None
    if tool == "memory_read":
        return _dossier(octx, world, _object_id(args, tool), tool, tz)
    if tool == "memory_evidence":
        oid = _object_id(args, tool)
        offset = _arg(args, tool, "offset", int, 0)
        limit = _arg(args, tool, "limit", int, recall.PAGE)
        if offset < 0 or not 1 <= limit <= 100:
            raise ToolError(f"{tool}.offset/limit: offset >= 0, limit 1-100 (got offset {offset}, limit {limit})")
        return _evidence(octx, world, oid, tool, offset, limit, tz)
    try:
        return worker.enqueue(
            octx,
            world,
            args.get("mode"),
            args.get("scope", ""),
            args.get("retry_blocked", False),
            args.get("token"),
        )
    except worker.RequestError as exc:
        raise ToolError(f"{tool}.{exc}") from None


# The read tools an organize or deep batch offers its model before it submits (seed 001 §2: browse,
# search, read objects and their sources). The batch's world is implied, never an argument.
BATCH_TOOL_ARGS = {
    "memory_list": {"type", "offset"},
    "memory_find": {"query"},
    "memory_read": {"id"},
    "memory_evidence": {"id", "offset"},
}


def batch_read(octx: ObjectsContext, world: str, tool: object, args: object) -> Mapping[str, Any]:
    """A read tool called by the model of a batch of ``world``: its result, or ToolError naming the
    argument (the model's to correct). memory_find lists ids, names and summaries; memory_read
    gives the whole dossier (and only a read allows rewriting an object). Times as stored: what
    the model's prompts have always held."""
    tool, args = _checked(tool, args, BATCH_TOOL_ARGS)
    offset = _arg(args, tool, "offset", int, 0)
    if offset < 0:
        raise ToolError(f"{tool}.offset: must be >= 0")
    if tool == "memory_list":
        otype = _arg(args, tool, "type", str)
        if otype not in set(logic.ObjectType):
            raise ToolError(f"{tool}.type: {otype[:40]!r} is not a type ({', '.join(logic.ObjectType)})")
        return recall.list_objects(octx.store, world, otype, offset)
    if tool == "memory_find":
        hits = recall.find(octx.store, world, _query(args, tool))
        return {
            "items": [
                {"id": h["id"], "type": h["type"], "name": h["name"], "status": h["status"], "summary": h["summary"]}
                for h in hits
            ]
        }
    oid = _object_id(args, tool)
    if tool == "memory_read":
        return _dossier(octx, world, oid, tool)
    return _evidence(octx, world, oid, tool, offset)
