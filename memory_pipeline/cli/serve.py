"""`memory-pipeline serve` (and its alias `memory-pipeline mcp`): the agent memory server over MCP,
every request with a bearer token from `memory-pipeline tokens create`."""

from __future__ import annotations

import typer

from memory_pipeline.cli.console import err, refuse


def serve(
    host: str = typer.Option(None, "--host", help="Bind address (default memory.tower.mcp_host, 127.0.0.1)."),
    port: int = typer.Option(None, "--port", help="Port (default memory.tower.mcp_port, 8900)."),
    list_tools: bool = typer.Option(
        False, "--list-tools", help="Print the server's tools as a Markdown table (the README's) and exit."
    ),
):
    """Serve the agent memory tools over MCP (streamable HTTP) at http://HOST:PORT and /mcp: the 13 mem/*
    tower tools, memory/search, temporal/prompt_block and objects/find, read, evidence, status. Every request needs 'Authorization: Bearer <token>' (tokens create);
    off the loopback address the server refuses to start while no token exists."""
    from memory_pipeline.access import tokens
    from memory_pipeline.cli.tower import _tower
    from memory_pipeline.server.app import ServeError, make_uvicorn, tool_table

    t = _tower()
    if list_tools:
        typer.echo(tool_table(t), nl=False)
        t.close()
        return
    t.run_jobs = "thread"
    host = host or t.cfg.mcp_host
    port = port or t.cfg.mcp_port
    # Printed once the port accepts connections, so a client started on the banner finds it.
    banner = f"MCP endpoint: http://{host}:{port} (and /mcp); Ctrl-C stops it"
    try:
        server = make_uvicorn(t, host, port, on_ready=lambda: err.print(banner))
    except ServeError as exc:
        refuse(str(exc))
    if tokens.active_count(t.store) == 0:
        err.print("[yellow]no access token exists: every request is refused (memory-pipeline tokens create)[/]")
    server.run()
    t.close()


def mcp(
    host: str = typer.Option(None, "--host", help="Bind address (default memory.tower.mcp_host, 127.0.0.1)."),
    port: int = typer.Option(None, "--port", help="Port (default memory.tower.mcp_port, 8900)."),
    list_tools: bool = typer.Option(
        False, "--list-tools", help="Print the server's tools as a Markdown table (the README's) and exit."
    ),
):
    """Alias of `serve` (the MCP endpoint over streamable HTTP; bearer token required)."""
    serve(host, port, list_tools)
