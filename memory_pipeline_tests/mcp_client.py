"""The MCP SDK's streamable-HTTP client with headers on every request, as the tests' agents call
the memory server. The SDK deprecated ``streamablehttp_client(url, headers=...)`` for
``streamable_http_client(url, http_client=...)``, where the httpx client is the caller's: made here
with the timeouts the SDK gives its own (30 s, and 300 s to read a response stream)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def mcp_streams(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Any]:
    """(read, write, session id) as ``streamable_http_client`` yields them."""
    timeout = httpx.Timeout(30, read=300)
    async with httpx.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams
