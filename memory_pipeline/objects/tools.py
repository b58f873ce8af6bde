"""Seed 001 §4 the agent's tools (memory_find, memory_read, memory_evidence, memory_organize,
memory_status, and memory_approve: the user's approval of a candidate project, relayed by the
agent after asking) as one dispatcher over tool-call arguments: every argument is checked and a bad
one is refused with ToolError naming it; nothing is written then. Reading never calls a model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memory_pipeline.lib import ids
from memory_pipeline.objects import graph, logic, recall, reports, worker
from memory_pipeline.objects.context import ObjectsContext

TOOLS = ("memory_find", "memory_read", "memory_evidence", "memory_organize", "memory_status", "memory_approve")


class ToolError(ValueError):
    """A refused tool call: the message names the tool and the argument."""


def _arg(args: Mapping[str, Any], tool: str, name: str, kind: type, default: Any = ...) -> Any:
    if name not in args:
        if default is ...:
            raise ToolError(f"{tool}.{name}: required")
        return default
    value = args[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ToolError(f"{tool}.{name}: expected an integer")
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


def call(octx: ObjectsContext, tool: Any, args: Any) -> dict[str, Any]:
    if tool not in TOOLS:
        raise ToolError(f"tool: {str(tool)[:40]!r} is not one of {', '.join(TOOLS)}")
    if not isinstance(args, Mapping):
        raise ToolError(f"{tool}: arguments must be an object")
    allowed = {
        "memory_find": {"world", "query", "limit"},
        "memory_read": {"world", "id"},
        "memory_evidence": {"world", "id", "offset", "limit"},
        "memory_organize": {"world", "mode", "scope", "retry_blocked", "token"},
        "memory_status": {"world"},
        "memory_approve": {"world", "id"},
    }[tool]
    extra = sorted(str(k) for k in args if k not in allowed)
    if extra:
        raise ToolError(f"{tool}.{extra[0][:40]}: unknown argument (arguments: {', '.join(sorted(allowed))})")
    store = octx.store
    if tool == "memory_status":
        world = _world(args, tool) if "world" in args else None
        return reports.status(store, world)
    world = _world(args, tool)
    if tool == "memory_find":
        limit = _arg(args, tool, "limit", int, recall.PAGE)
        if not 1 <= limit <= 100:
            raise ToolError(f"{tool}.limit: 1-100")
        query = _text(args, tool, "query", 500)
        if not query.strip():
            raise ToolError(f"{tool}.query: must not be empty")
        return {"items": recall.find(store, world, query, limit)}
    if tool == "memory_approve":
        # The user's approval, relayed by the agent after asking: a candidate project becomes active.
        pid = _arg(args, tool, "id", str)
        try:
            return graph.approve_project(octx, world, pid)
        except logic.SubmissionError as exc:
            raise ToolError(f"{tool}.id: {exc.problem}") from None
    if tool in ("memory_read", "memory_evidence"):
        oid = _arg(args, tool, "id", str)
        try:
            logic.parse_object_id(oid, f"{tool}.id")
        except logic.SubmissionError as exc:
            raise ToolError(str(exc)) from None
        if tool == "memory_read":
            doc = recall.read(store, world, oid)
            if doc is None:
                raise ToolError(f"{tool}.id: no object {oid} in world {world}")
            return doc
        offset = _arg(args, tool, "offset", int, 0)
        limit = _arg(args, tool, "limit", int, recall.PAGE)
        if offset < 0 or not 1 <= limit <= 100:
            raise ToolError(f"{tool}.offset/limit: offset >= 0, limit 1-100")
        return recall.evidence(store, world, oid, offset, limit)
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
