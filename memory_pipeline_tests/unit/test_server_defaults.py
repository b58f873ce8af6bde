"""The memory server's default limits, as docs/server.md states them: a request body of at most
1 MiB, 50 tool calls a second per token with a burst of 100, 10 s per call. Pinned twice: the
defaults of `memory-pipeline serve`'s options (and its alias `mcp`), and what `serve` run without
options actually builds (the call guard and the SDK's body limit). No service: the store is SQLite
under a temporary MEMORY_DATA_DIR, and the server is built but never started."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
import typer
import uvicorn
from mcp.server import fastmcp
from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline.server import app as server_app

MIB = 1024 * 1024
DEFAULTS = {"max_body_bytes": MIB, "rate_limit": 50.0, "rate_burst": 100, "call_timeout": 10.0}


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_the_serve_options_default_to_1_mib_50_calls_a_second_burst_100_and_10_s(command):
    cli = typer.main.get_command(app)
    params = {p.name: p.default for p in cli.commands[command].params}  # type: ignore[attr-defined]
    assert {name: params[name] for name in DEFAULTS} == DEFAULTS


def test_serve_without_options_builds_its_server_with_those_limits(monkeypatch, tmp_path):
    for name in ("MEMORY_DATABASE_URL", "MEMORY_CONFIG_FILE", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEMORY_TIMEZONE", "Asia/Shanghai")
    guards: list[server_app.CallGuard] = []
    sdk: dict = {}
    servers: list[uvicorn.Server] = []

    class Guard(server_app.CallGuard):
        def __init__(self, limits=None):
            super().__init__(limits)
            guards.append(self)

    sdk_init = fastmcp.FastMCP.__init__

    def record_sdk(self, *args, **kwargs):
        sdk.update(kwargs)
        sdk_init(self, *args, **kwargs)

    monkeypatch.setattr(server_app, "CallGuard", Guard)
    monkeypatch.setattr(fastmcp.FastMCP, "__init__", record_sdk)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *a, **k: servers.append(self))  # built, not started
    server_log = logging.getLogger("memory_pipeline.server")
    monkeypatch.setattr(server_log, "handlers", [])  # serve adds its call log's handler: gone after
    monkeypatch.setattr(server_log, "propagate", server_log.propagate)
    monkeypatch.setattr(server_log, "level", server_log.level)

    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 0, result.output
    assert len(servers) == 1 and (servers[0].config.host, servers[0].config.port) == ("127.0.0.1", 8900)
    (guard,) = guards
    limits = guard.limits
    assert (limits.max_body_bytes, limits.rate, limits.burst, limits.call_timeout) == (MIB, 50.0, 100, 10.0)
    assert (guard.buckets.rate, guard.buckets.burst) == (50.0, 100)  # the per-token buckets
    assert sdk["max_request_body_size"] == MIB  # the SDK answers 413 past it
    # the call log's time: the configured zone (+08:00), ISO with T, to the millisecond (it was
    # the machine's local time, `2026-12-07 07:22:41,331`)
    (handler,) = server_log.handlers
    record = logging.LogRecord("memory_pipeline.server", logging.INFO, __file__, 1, "call token=demo", None, None)
    record.created = datetime(2026, 12, 7, 7, 22, 41, 331_000, tzinfo=UTC).timestamp()
    assert handler.format(record) == "2026-12-07T15:22:41.331+08:00 INFO memory_pipeline.server call token=demo"
