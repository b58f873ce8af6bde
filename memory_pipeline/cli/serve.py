"""`memory-pipeline serve` (and its alias `memory-pipeline mcp`): the agent memory server over MCP,
every request with a bearer token from `memory-pipeline tokens create`."""

from __future__ import annotations

import gc
import logging
from datetime import datetime
from zoneinfo import ZoneInfo

import typer

from memory_pipeline.cli.console import err, refuse
from memory_pipeline.server.limits import Limits

_DEFAULT = Limits()


def serve(
    host: str | None = typer.Option(None, "--host", help="Bind address (default memory.tower.mcp_host, 127.0.0.1)."),
    port: int | None = typer.Option(
        None, "--port", min=1, max=65535, help="Port (default memory.tower.mcp_port, 8900)."
    ),
    max_body_bytes: int = typer.Option(
        _DEFAULT.max_body_bytes, "--max-body-bytes", help="Largest request body; a larger one gets HTTP 413."
    ),
    rate_limit: float = typer.Option(
        _DEFAULT.rate, "--rate-limit", help="Tool calls per second per token (0: no limit); over it, a tool error."
    ),
    rate_burst: int = typer.Option(_DEFAULT.burst, "--rate-burst", help="Tool calls a token may make at once."),
    call_timeout: float = typer.Option(
        _DEFAULT.call_timeout, "--call-timeout", help="Seconds the server waits for one tool call."
    ),
    list_tools: bool = typer.Option(
        False, "--list-tools", help="Print the server's tools as a Markdown table (the README's) and exit."
    ),
) -> None:
    """Serve the agent memory tools of every domain over MCP (streamable HTTP) at http://HOST:PORT and
    /mcp (--list-tools prints them). Every request needs 'Authorization: Bearer <token>' (tokens create);
    off the loopback address the server refuses to start while no token exists. Each call is logged
    on stderr (token name, tool, world, duration, outcome) and counted at /metrics (Prometheus text, for an --all-worlds token)."""
    from memory_pipeline.access import tokens
    from memory_pipeline.cli.tower import _tower
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.settings import ConfigError
    from memory_pipeline.server.app import ServeError, make_uvicorn, tool_table

    try:
        limits = Limits(max_body_bytes, rate_limit, rate_burst, call_timeout)
    except ValueError as exc:
        refuse(str(exc))
    t = _tower()
    if list_tools:
        try:
            typer.echo(tool_table(t), nl=False)
        except ConfigError as exc:
            refuse(str(exc))
        finally:
            t.close()
        return
    t.run_jobs = "thread"
    host = host or t.cfg.mcp_host
    port = port or t.cfg.mcp_port
    # Printed once the port accepts connections, so a client started on the banner finds it.
    banner = f"MCP endpoint: http://{host}:{port} (and /mcp); Ctrl-C stops it"

    def ready() -> None:
        # What the server holds from its start (modules, definitions, the SDK) lives as long as it:
        # frozen out of the collector, a full collection no longer walks it during a call.
        gc.collect()
        gc.freeze()
        err.print(banner)

    try:
        server = make_uvicorn(t, host, port, on_ready=ready, limits=limits)
    except (ServeError, ConfigError) as exc:  # a domain's config section, read as its tools register
        refuse(str(exc))
    if tokens.active_count(t.store) == 0:
        err.print("[yellow]no access token exists: every request is refused (memory-pipeline tokens create)[/]")
    if not settings.redis_url():
        # Each call then answers "ok" with an empty system block: said once, here, where it is set.
        err.print(
            "[yellow]no REDIS_URL: temporal/prompt_block's system block is made of the past days, months and "
            "years rolls that Dagster runs and the demo cache in Redis; this server's in-process cache starts "
            "empty, so its blocks carry none. Set REDIS_URL to the Redis they are built in[/]"
        )
    _log_calls(t.tz)
    server.run()
    t.close()


class _ZonedFormatter(logging.Formatter):
    """A log line's time in ``tz``, ISO with its offset, to the millisecond
    (``2026-12-07T15:22:41.331+08:00``), not the machine's local time in logging's own form."""

    def __init__(self, fmt: str, tz: ZoneInfo) -> None:
        super().__init__(fmt)
        self.tz = tz

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created, self.tz).isoformat(timespec="milliseconds")


def _log_calls(tz: ZoneInfo) -> None:
    """The call log (one line per tool call) on stderr, its times in ``tz`` (the configured zone)."""
    log = logging.getLogger("memory_pipeline.server")
    handler = logging.StreamHandler()
    handler.setFormatter(_ZonedFormatter("%(asctime)s %(levelname)s %(name)s %(message)s", tz))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def mcp(
    host: str | None = typer.Option(None, "--host", help="Bind address (default memory.tower.mcp_host, 127.0.0.1)."),
    port: int | None = typer.Option(
        None, "--port", min=1, max=65535, help="Port (default memory.tower.mcp_port, 8900)."
    ),
    max_body_bytes: int = typer.Option(_DEFAULT.max_body_bytes, "--max-body-bytes", help="As serve."),
    rate_limit: float = typer.Option(_DEFAULT.rate, "--rate-limit", help="As serve."),
    rate_burst: int = typer.Option(_DEFAULT.burst, "--rate-burst", help="As serve."),
    call_timeout: float = typer.Option(_DEFAULT.call_timeout, "--call-timeout", help="As serve."),
    list_tools: bool = typer.Option(
        False, "--list-tools", help="Print the server's tools as a Markdown table (the README's) and exit."
    ),
) -> None:
    """Alias of `serve` (the MCP endpoint over streamable HTTP; bearer token required)."""
    serve(host, port, max_body_bytes, rate_limit, rate_burst, call_timeout, list_tools)
