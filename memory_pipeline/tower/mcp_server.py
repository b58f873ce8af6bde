"""Seed 004 MCP endpoint (a runtime server of the tower domain, no Dagster): one streamable-HTTP
endpoint, 127.0.0.1:8900 by default, answering at the seed's address (``http://127.0.0.1:8900``)
and at ``/mcp``, over the same store the Dagster assets write.

The 13 ``mem/*`` tools (the seed fixes the count and the groups: type management, append,
structural recall, semantic recall, summarize, recompute, and the status of asynchronous summarize
jobs). The SDK logs a warning about the ``/`` in these names; they are kept, as the seed names
``mem/summarize``. The service only stores and returns: nothing server-initiated (notifications,
subscriptions, sampling) carries memory content; the process runs no scheduler. Only
``mem/summarize``, ``mem/recompute`` and ``mem/get_summary`` with ``summarize_on_miss`` may cause
LLM calls, and only as jobs."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.logic import TowerInputError

log = logging.getLogger(__name__)

TOOL_NAMES = (
    "mem/create_type",
    "mem/list_types",
    "mem/get_type",
    "mem/update_type",
    "mem/delete_type",
    "mem/append",
    "mem/windows",
    "mem/recall",
    "mem/get_summary",
    "mem/summarize",
    "mem/recompute",
    "mem/job_status",
    "mem/list_jobs",
)

WINDOW_DOC = (
    " The window is `granularity` (a level of the type's chain) + `anchor` (a date YYYY-MM-DD or an ISO "
    "datetime with offset inside it), or `from` + `to` (ISO datetimes: an irregular window such as a task phase)."
)


PAGE_DOC = " limit (default 100, max 1000) and cursor page the answer, which states its totals."


def build_server(tower: Tower, host: str = "127.0.0.1", port: int = 8900) -> Any:
    from mcp.server.fastmcp import FastMCP

    logging.getLogger("mcp.shared.tool_name_validation").setLevel(logging.ERROR)  # the known warning about "/"
    _quiet_disconnects()
    tools: list[Any] = []

    def tool(name: str, description: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            tools.append(_strict_tool(fn, name, description))
            return fn

        return register

    @tool(
        name="mem/create_type",
        description="Create a memory type. Name: [A-Za-z0-9_/-]+ (no '..', no "
        "leading or trailing '/'). chain: granularities from 10min, 30min, 1h, 3h, day, week, month "
        "(default 10min → 30min → 1h → day → week); summaries: semantic summaries on (default off); "
        "group_field: e.g. project; retention: declared only (never enforced); summary_cap: default week.",
    )
    def create_type(
        name: str,
        description: str = "",
        chain: list[str] | None = None,
        summaries: bool = False,
        group_field: str | None = None,
        retention: str | None = None,
        summary_cap: str | None = None,
    ) -> dict[str, Any]:
        return tower.create_type(
            name,
            description=description,
            chain=chain,
            summaries=summaries,
            group_field=group_field,
            retention=retention,
            summary_cap=summary_cap,
        )

    @tool(name="mem/list_types", description="List memory types (archived ones with include_archived).")
    def list_types(include_archived: bool = False) -> dict[str, Any]:
        return {"types": tower.list_types(include_archived)}

    @tool(
        name="mem/get_type",
        description="Show one memory type: chain, summaries switch, cap, group "
        "field, declared retention, its two series.",
    )
    def get_type(name: str) -> dict[str, Any]:
        return tower.get_type(name)

    @tool(
        name="mem/update_type",
        description="Update a type (not its name): description, chain, "
        "summaries, group_field, retention, summary_cap, given in `changes`.",
    )
    def update_type(name: str, changes: dict[str, Any]) -> dict[str, Any]:
        return tower.update_type(name, changes)

    @tool(
        name="mem/delete_type",
        description="Archive a type: appends are refused, recall still works, "
        "the name stays reserved; no entry or summary is ever deleted. worklog cannot be deleted.",
    )
    def delete_type(name: str) -> dict[str, Any]:
        return tower.delete_type(name)

    @tool(
        name="mem/append",
        description="Append entries to a type's raw series (append-only). Each entry: "
        "{content: any JSON or text, at?: ISO datetime (default now), id?: idempotency key, group?: "
        "the type's group value}. A bad entry refuses the whole call, naming the entry and field.",
    )
    def append(type: str, entries: list[Any]) -> dict[str, Any]:
        return tower.append(type, entries, source="mcp")

    @tool(
        name="mem/windows",
        description="Structural recall, one level at a time: the windows of a "
        "level, or (with anchor) a window's children, with entry counts and staleness. limit (default "
        "100, max 1000) and cursor page it. Never calls an LLM.",
    )
    def windows(
        type: str,
        granularity: str | None = None,
        anchor: str | None = None,
        group: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        return tower.windows(type, granularity, anchor, group, limit, cursor)

    @tool(
        name="mem/recall",
        description="Exact recall: resolve a window to its raw entries by walking the "
        "references; returns the raw volume (navigation, not compression), paginated by limit and "
        "cursor, with total entries and characters. Never calls an LLM." + WINDOW_DOC,
    )
    def recall(
        type: str,
        granularity: str | None = None,
        anchor: str | None = None,
        from_: str | None = None,
        to: str | None = None,
        group: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        return tower.recall(type, granularity, anchor, from_, to, group, limit, cursor)

    @tool(
        name="mem/get_summary",
        description="Semantic recall: the stored summary (state found), or "
        "missing / empty; a range wider than the cap returns the cap-level summaries of the windows "
        "overlapping it and the gaps (stretches with no summary, with their entry counts). With "
        "summarize_on_miss a summarize job starts for the page's missing groups (never for an empty window)."
        + PAGE_DOC
        + WINDOW_DOC,
    )
    def get_summary(
        type: str,
        granularity: str | None = None,
        anchor: str | None = None,
        from_: str | None = None,
        to: str | None = None,
        group: str | None = None,
        summarize_on_miss: bool = False,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        return tower.get_summary(type, granularity, anchor, from_, to, group, summarize_on_miss, limit, cursor)

    @tool(
        name="mem/summarize",
        description="Start summarize jobs (one per group) over a closed, settled "
        "window, bottom-up over the chain (a from/to window from raw). Returns job ids at once." + WINDOW_DOC,
    )
    def summarize(
        type: str,
        granularity: str | None = None,
        anchor: str | None = None,
        from_: str | None = None,
        to: str | None = None,
        group: str | None = None,
    ) -> dict[str, Any]:
        return tower.summarize(type, granularity, anchor, from_, to, group)

    @tool(
        name="mem/recompute",
        description="Start recompute jobs: rebuild a window's summary from the raw "
        "entries, bypassing the chain (faithful, costs more tokens). Returns job ids at once." + WINDOW_DOC,
    )
    def recompute(
        type: str,
        granularity: str | None = None,
        anchor: str | None = None,
        from_: str | None = None,
        to: str | None = None,
        group: str | None = None,
    ) -> dict[str, Any]:
        return tower.recompute(type, granularity, anchor, from_, to, group)

    @tool(
        name="mem/job_status",
        description="State of a summarize job: queued, running, succeeded, "
        "skipped_empty, failed or given_up, with the summary record id.",
    )
    def job_status(job_id: str) -> dict[str, Any]:
        return tower.job_status(job_id)

    @tool(name="mem/list_jobs", description="Recent summarize jobs, newest first (filter by type, state).")
    def list_jobs(type: str | None = None, state: str | None = None, limit: int | None = None) -> dict[str, Any]:
        return {"jobs": tower.list_jobs(type, state, limit)}

    return FastMCP(
        "chronomem",
        instructions="Time tower memory (seed 004): memory types with raw and summary series; exact recall "
        "(navigation: raw entries, paginated) and semantic recall (stored summaries).",
        host=host,
        port=port,
        streamable_http_path="/mcp",
        tools=tools,
    )


# The window's start is ``from`` on the wire; ``from`` is a Python keyword, so the functions say ``from_``.
_ALIASES = {"from_": "from"}


def _strict_tool(fn: Callable[..., Any], name: str, description: str) -> Any:
    """The SDK's tool for ``fn``, with an argument model that is strict (no "yes" for true, no "10"
    for 10, no "null" for null: a string stays a string), refuses an unknown argument instead of
    dropping it, and names ``from_`` ``from``."""
    from mcp.server.fastmcp.tools import Tool
    from pydantic import Field, create_model

    args_base, metadata = _strict_classes()
    base = Tool.from_function(fn, name=name, description=description)
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
    )
    return base.model_copy(update={"fn_metadata": meta, "parameters": model.model_json_schema(by_alias=True)})


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
        async def call_fn_with_arg_validation(
            self,
            fn: Callable[..., Any],
            fn_is_async: bool,
            arguments_to_validate: dict[str, Any],
            arguments_to_pass_directly: dict[str, Any] | None,
        ) -> Any:
            try:
                # Not the SDK's pre_parse_json: it decodes a string argument as JSON when the field
                # is not plain ``str``, so group "null" became None (every group) and limit "null"
                # the default. A string the client sent stays a string, validated as it came.
                parsed = self.arg_model.model_validate(arguments_to_validate)
            except ValidationError as exc:
                raise _argument_error(exc, self.arg_model) from None
            kwargs = parsed.model_dump_one_level() | (arguments_to_pass_directly or {})
            try:
                return fn(**kwargs)
            except TowerInputError:
                raise
            except Exception as exc:  # noqa: BLE001 - the client gets one line, the log the traceback
                log.exception("tool call failed")
                raise RuntimeError(f"internal error ({type(exc).__name__}); the server logged it") from None

    return StrictArgs, StrictMetadata


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


class _QuietDisconnects(logging.Filter):
    """The SDK logs a traceback ("Error in standalone SSE writer") each time a client's session ends
    and its stream is already closed: log noise, as the client is gone. That one record only."""

    def filter(self, record: logging.LogRecord) -> bool:
        import anyio

        closed = record.exc_info is not None and isinstance(record.exc_info[1], anyio.ClosedResourceError)
        return not (closed and record.getMessage() == "Error in standalone SSE writer")


def _quiet_disconnects() -> None:
    sdk = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _QuietDisconnects) for f in sdk.filters):
        sdk.addFilter(_QuietDisconnects())


def asgi_app(server: Any) -> Any:
    """The streamable-HTTP app, answering at ``/mcp`` and at the root (the seed's configured URL)."""
    from starlette.routing import Route

    app = server.streamable_http_app()
    handler = next(r.endpoint for r in app.router.routes if getattr(r, "path", None) == "/mcp")
    app.router.routes.append(Route("/", endpoint=handler))
    return app


def make_uvicorn(tower: Tower, host: str, port: int, on_ready: Callable[[], None] | None = None) -> Any:
    """The server, to ``run()`` (blocking); ``on_ready`` is called once it accepts connections."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started and on_ready is not None:
                on_ready()

    app = asgi_app(build_server(tower, host, port))
    return Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
