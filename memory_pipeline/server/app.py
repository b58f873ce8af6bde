"""The memory server (`memory-pipeline serve`; `memory-pipeline mcp` is its alias): one streamable-
HTTP MCP endpoint, 127.0.0.1:8900 by default, answering at its root (the seed's configured
``http://127.0.0.1:8900``) and at ``/mcp``, over the same store the Dagster assets write.

Every HTTP request carries ``Authorization: Bearer <token>``; the SDK's bearer auth checks it with
the access domain's tokens and answers 401 (no token, an unknown or a revoked one) before any tool
runs. The service only stores and returns: nothing server-initiated (notifications, subscriptions,
sampling) carries memory content; the process runs no scheduler. Its limits (request body, calls per
token, time per call), its call log and ``/metrics`` are server.limits'."""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memory_pipeline.access import tokens
from memory_pipeline.lib.store import Store
from memory_pipeline.server import (
    conversation_tools,
    memory_tools,
    objects_tools,
    sleep_tools,
    temporal_tools,
    tower_tools,
)
from memory_pipeline.server.auth import ALL_WORLDS_SCOPE, StoreTokenVerifier
from memory_pipeline.server.limits import BodyCheck, CallGuard, Limits
from memory_pipeline.server.tools import Access, ToolRegistry
from memory_pipeline.tower.api import Tower

if TYPE_CHECKING:
    import uvicorn

TOOL_NAMES = (
    *tower_tools.TOOL_NAMES,
    *memory_tools.TOOL_NAMES,
    *temporal_tools.TOOL_NAMES,
    *objects_tools.TOOL_NAMES,
    *sleep_tools.TOOL_NAMES,
    *conversation_tools.TOOL_NAMES,
)


class ServeError(ValueError):
    """The server refuses to start (one line for the operator)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def check_exposure(store: Store, host: str) -> None:
    """Off the loopback interface the server starts only once a token exists."""
    if not is_loopback(host) and tokens.active_count(store) == 0:
        raise ServeError(
            f"refusing to serve on {host}: no access token exists (create one: memory-pipeline tokens create --world W)"
        )


def registry(tower: Tower, guard: CallGuard | None = None) -> ToolRegistry:
    logging.getLogger("mcp.shared.tool_name_validation").setLevel(logging.ERROR)  # the known warning about "/"
    reg = ToolRegistry(guard)
    tower_tools.register(reg, tower)
    memory_tools.register(reg, tower)
    temporal_tools.register(reg, tower)
    objects_tools.register(reg, tower)
    sleep_tools.register(reg, tower)
    conversation_tools.register(reg, tower)
    # The tests parametrize over TOOL_NAMES (every tool refuses another world): no tool outside it.
    if tuple(reg.access) != TOOL_NAMES:
        raise RuntimeError(f"registered tools {tuple(reg.access)} are not TOOL_NAMES {TOOL_NAMES}")
    return reg


def tool_access(tower: Tower) -> dict[str, Access]:
    """Each tool's declared access (read or write), from the server's own registry."""
    return registry(tower).access


_FIRST_SENTENCE = re.compile(r"(?<=[a-z0-9)`'])\.(?=\s+[A-Z`])")


def tool_table(tower: Tower) -> str:
    """The server's tools as a Markdown table (``memory-pipeline serve --list-tools``; the README's
    table is this output): name, read or write, arguments (``?``: optional), the description's
    first sentence."""
    reg = registry(tower)
    rows = ["| tool | access | arguments | what it does |", "|---|---|---|---|"]
    for t in reg.tools:
        required = set(t.parameters.get("required", []))
        args = ", ".join(f"`{a}`" if a in required else f"`{a}?`" for a in t.parameters.get("properties", {}))
        first = _FIRST_SENTENCE.split(t.description, maxsplit=1)[0].rstrip(".") + "."
        cell = " ".join(first.split()).replace("|", "\\|")
        rows.append(f"| `{t.name}` | {reg.access[t.name]} | {args} | {cell} |")
    return "\n".join(rows) + "\n"


def build_server(tower: Tower, host: str = "127.0.0.1", port: int = 8900, guard: CallGuard | None = None) -> Any:
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.fastmcp import FastMCP

    _quiet_disconnects()
    url = f"http://{host}:{port}"
    guard = guard or CallGuard()
    return FastMCP(
        "chronomem",
        instructions="Agent memory: the time tower's memory types with raw and summary series (exact recall, "
        "paginated, and semantic recall of stored summaries), memory/search over one world's memory, the "
        "<temporal_summary> prompt block (temporal/prompt_block) and the object memory's recall "
        "(objects/find, objects/read, objects/evidence, objects/status, objects/resident) and its requests "
        "(objects/organize, objects/approve), remember and the self layer (sleep/remember, sleep/self), a "
        "conversation's rolling summary, the user's check of it and their yes or no (conversation/summary, "
        "conversation/check, conversation/confirm, conversation/correct). "
        "Each call is scoped to the worlds of the bearer token.",
        host=host,
        port=port,
        # The SDK's INFO line per request ("Processing request of type ...") went through its rich
        # handler at ~3 ms a call; the server's own call log (server.limits) says what happened.
        log_level="WARNING",
        streamable_http_path="/mcp",
        # A call's answer as one JSON body rather than an SSE stream per POST: the server sends nothing
        # of its own during a call, and the stream's tasks were half of the server's time per call.
        json_response=True,
        tools=registry(tower, guard).tools,
        max_request_body_size=guard.limits.max_body_bytes,  # the SDK's limit: 413 before the body is parsed
        token_verifier=StoreTokenVerifier(tower.store),
        # No OAuth server exists: the SDK requires both URLs, and the server's own serves for both. Our
        # tokens are issued by this server for this server only, so there is no audience to compare.
        auth=AuthSettings(
            issuer_url=url,  # type: ignore[arg-type]
            resource_server_url=url,  # type: ignore[arg-type]
            required_scopes=[],
            validate_token_resource=False,
        ),
    )


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


def asgi_app(server: Any, guard: CallGuard | None = None) -> Any:
    """The streamable-HTTP app, answering at ``/mcp`` and at the root (the seed's configured URL); the
    root takes the same endpoint as ``/mcp``, wrapped in the SDK's RequireAuthMiddleware; the body of
    a POST whose token passed is checked by ``limits.BodyCheck`` before the SDK reads it (a caller
    without a token in force gets 401 whatever its body: nothing of the server's checks answers
    before the token's). With the server's guard, ``/metrics`` too: Prometheus
    text, behind the same bearer auth as every route, for an --all-worlds token only (the counts name
    tools and outcomes, never a token or a world, yet they count every world's calls: another world's
    activity is no scoped token's to see)."""
    from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
    from prometheus_client import make_asgi_app
    from starlette.routing import Route

    app = server.streamable_http_app()
    handler = next(r.endpoint for r in app.router.routes if getattr(r, "path", None) == "/mcp")
    if not isinstance(handler, RequireAuthMiddleware):
        raise TypeError(f"the SDK's /mcp endpoint is {type(handler).__name__}, not behind RequireAuthMiddleware")
    handler.app = BodyCheck(handler.app, (guard.limits if guard is not None else Limits()).max_body_bytes)
    app.router.routes.append(Route("/", endpoint=handler))
    if guard is not None:
        # the counts are the server's, every world's calls: an --all-worlds token's to read
        metrics = RequireAuthMiddleware(make_asgi_app(guard.metrics.registry), required_scopes=[ALL_WORLDS_SCOPE])
        app.router.routes.append(Route("/metrics", endpoint=metrics, methods=["GET"]))
    return app


def make_uvicorn(
    tower: Tower, host: str, port: int, on_ready: Callable[[], None] | None = None, limits: Limits | None = None
) -> uvicorn.Server:
    """The server, to ``run()`` (blocking); ``on_ready`` is called once it accepts connections."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started and on_ready is not None:
                on_ready()

    check_exposure(tower.store, host)
    guard = CallGuard(limits)
    app = asgi_app(build_server(tower, host, port, guard), guard)
    return Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
