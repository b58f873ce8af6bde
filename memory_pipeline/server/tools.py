"""How the server's tools are made (no domain rules here): each tool is the SDK's tool for a plain
function, with an argument model that is strict (no "yes" for true, no "10" for 10, no "null" for
null: a string stays a string), refuses an unknown argument instead of dropping it, and names
``from_`` ``from``; each declares whether it reads or writes, and a read-only token is refused a
writing tool before its function runs. A domain's input error, or an access refusal, reaches the
client as its one line; anything else as one line naming its class, with the traceback logged.
Each call passes the server's limits (server.limits: rate per token, a worker thread with a
timeout) and is logged and counted there."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from enum import StrEnum
from typing import Any

import anyio

from memory_pipeline.access.logic import AccessError
from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.store.requests import RequestConflict
from memory_pipeline.recall.search import SearchError
from memory_pipeline.server.auth import caller
from memory_pipeline.server.limits import CallGuard, CallTimeout, Outcome, RateLimited
from memory_pipeline.tower.logic import TowerInputError

log = logging.getLogger(__name__)

# Raised by a tool for bad input or a refused call: the client gets the message as it is.
INPUT_ERRORS: tuple[type[Exception], ...] = (TowerInputError, SearchError, AccessError, RequestConflict)


class Access(StrEnum):
    READ = "read"
    WRITE = "write"  # appends, creates, changes, archives, or starts LLM jobs


class ToolRegistry:
    """The tools of one server, in order; ``tool(name, description, access)`` registers a function."""

    def __init__(self, guard: CallGuard | None = None) -> None:
        self.guard = guard or CallGuard()
        self.tools: list[Any] = []
        self.access: dict[str, Access] = {}

    def tool(self, name: str, description: str, access: Access) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            if name in self.access:
                raise ValueError(f"tool {name} registered twice")
            self.tools.append(strict_tool(fn, name, description, access, self.guard))
            self.access[name] = access
            return fn

        return register


# The worlds a running call wrote to, when no one argument names its world (see note_worlds). The
# call's worker thread runs in a copy of the context: it extends this list, the same object.
_NOTED: ContextVar[list[str]] = ContextVar("call_worlds")


def note_worlds(worlds: Iterable[str]) -> None:
    """For the call's log line: the worlds a tool writes to when no argument names one (mem/append:
    the groups of its entries, given or read from the type's group field)."""
    noted = _NOTED.get(None)
    if noted is not None:
        noted.extend(worlds)


# The window's start is ``from`` on the wire; ``from`` is a Python keyword, so the functions say ``from_``.
_ALIASES = {"from_": "from"}


def strict_tool(fn: Callable[..., Any], name: str, description: str, access: Access, guard: CallGuard) -> Any:
    from mcp.server.fastmcp.tools import Tool
    from pydantic import Field, create_model

    args_base, metadata = _strict_classes()
    base = Tool.from_function(fn, name=name, description=description)
    if base.is_async:
        raise TypeError(f"tool {name}: a plain function, please (tools run in a worker thread)")
    fields: dict[str, Any] = {
        field: (info.annotation, Field(... if info.is_required() else info.default, alias=_ALIASES.get(field)))
        for field, info in base.fn_metadata.arg_model.model_fields.items()
    }
    model = create_model(f"{fn.__name__}Arguments", __base__=args_base, **fields)
    meta = metadata(
        arg_model=model,
        output_schema=base.fn_metadata.output_schema,
        output_model=base.fn_metadata.output_model,
        wrap_output=base.fn_metadata.wrap_output,
        tool_name=name,
        guard=guard,
    )

    @functools.wraps(fn)
    def guarded(**kwargs: Any) -> Any:
        if access is Access.WRITE:
            caller().require_write(name)
        return fn(**kwargs)

    return base.model_copy(
        update={"fn": guarded, "fn_metadata": meta, "parameters": model.model_json_schema(by_alias=True)}
    )


@functools.cache
def _strict_classes() -> tuple[Any, Any]:
    """The argument model base and the call path of the strict tools (built on first use, so that
    importing this module does not import the SDK)."""
    from mcp.server.fastmcp.utilities.func_metadata import ArgModelBase, FuncMetadata
    from pydantic import ConfigDict, ValidationError

    class StrictArgs(ArgModelBase):
        model_config = ConfigDict(extra="forbid", strict=True, arbitrary_types_allowed=True)

        def model_dump_one_level(self) -> dict[str, Any]:
            return {field: getattr(self, field) for field in type(self).model_fields}  # Python names

    class StrictMetadata(FuncMetadata):
        tool_name: str
        guard: CallGuard

        async def call_fn_with_arg_validation(
            self,
            fn: Callable[..., Any],
            fn_is_async: bool,
            arguments_to_validate: dict[str, Any],
            arguments_to_pass_directly: dict[str, Any] | None,
        ) -> Any:
            start = time.perf_counter()
            token, outcome = "-", Outcome.ERROR
            noted: list[str] = []
            noting = _NOTED.set(noted)
            try:
                token = caller().name
                self.guard.admit(token)  # before the arguments are read
                call = functools.partial(self.call_in_thread, fn, arguments_to_validate, arguments_to_pass_directly)
                result = await self.guard.run(call)
                outcome = Outcome.OK
                return result
            except BaseException as exc:
                outcome = _outcome(exc)
                raise
            finally:
                _NOTED.reset(noting)
                world = _world(arguments_to_validate, noted)
                self.guard.record(token, self.tool_name, world, time.perf_counter() - start, outcome)

        def convert_result(self, result: Any) -> Any:
            from mcp.types import CallToolResult

            converted = super().convert_result(result)
            if isinstance(converted, tuple):
                # The structured answer was built and validated by the tool's output model, the one its
                # outputSchema is made from. Handed over whole, the SDK does not check it again with
                # jsonschema, which checks the schema itself on every call (~2 ms).
                content, structured = converted
                return CallToolResult(content=list(content), structuredContent=structured, isError=False)
            return converted

        def call_in_thread(
            self, fn: Callable[..., Any], arguments: dict[str, Any], direct: dict[str, Any] | None
        ) -> Any:
            try:
                # Not the SDK's pre_parse_json: it decodes a string argument as JSON when the field
                # is not plain ``str``, so group "null" became None (every group) and limit "null"
                # the default. A string the client sent stays a string, validated as it came.
                parsed = self.arg_model.model_validate(arguments)
            except ValidationError as exc:
                raise _argument_error(exc, self.arg_model) from None
            kwargs = parsed.model_dump_one_level() | (direct or {})
            try:
                return fn(**kwargs)
            except INPUT_ERRORS:
                raise
            except Exception as exc:  # noqa: BLE001 - the client gets one line, the log the traceback
                log.exception("tool call failed")
                raise RuntimeError(f"internal error ({type(exc).__name__}); the server logged it") from None

    return StrictArgs, StrictMetadata


def _outcome(exc: BaseException) -> Outcome:
    if isinstance(exc, RateLimited):
        return Outcome.RATE_LIMITED
    if isinstance(exc, CallTimeout):
        return Outcome.TIMEOUT
    if isinstance(exc, AccessError):
        return Outcome.REFUSED
    if isinstance(exc, INPUT_ERRORS):
        return Outcome.INVALID
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return Outcome.CANCELLED
    return Outcome.ERROR


def _world(arguments: dict[str, Any], noted: list[str]) -> str:
    """The world a call names (``world``, or a tower tool's ``group``), else the worlds it noted
    (ids: no comma), for the log: ids or "-"."""
    world = arguments.get("world", arguments.get("group"))
    if isinstance(world, str) and validate_id(world) is None:
        return world
    worlds = sorted({w for w in noted if validate_id(w) is None})
    return ",".join(worlds) if worlds else "-"


def _argument_error(exc: Any, model: Any) -> TowerInputError:
    """The first problem of a pydantic ValidationError as one line naming the argument."""
    first = exc.errors()[0]
    field = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(first["loc"]))
    if first["type"] == "extra_forbidden":
        names = [info.alias or name for name, info in model.model_fields.items()]
        return TowerInputError(field or "arguments", f"unknown argument (this tool takes: {', '.join(names)})")
    if first["type"] == "missing":
        return TowerInputError(field, "is required")
    return TowerInputError(field or "arguments", first["msg"][:1].lower() + first["msg"][1:])
