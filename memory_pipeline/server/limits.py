"""The memory server's limits under abuse, and what each tool call leaves behind (issue 19).

- Request body: the SDK's own limit (``FastMCP(max_request_body_size=...)``) answers HTTP 413 before
  the body is parsed, for a declared Content-Length and for a chunked body alike.
- Rate: a token bucket per token name (``burst`` calls at once, refilled at ``rate`` per second),
  checked before the call's arguments are read. A refusal is a tool error naming the limit, not an
  HTTP 429: the SDK's client ends the whole session on any HTTP error status, while a tool error
  leaves it open for the agent to retry.
- Time: each tool function runs in a worker thread, the server waiting at most ``call_timeout``
  seconds; then the client gets one line and the thread is abandoned to finish on its own. Domain
  writes are transactions, so such a call's write lands whole or not at all, never half.
- Body shape: a body holding NaN or Infinity (not JSON, though Python's parser takes them, and the
  SDK then passed them on as null), a number past a float's range (read as infinity) or of more
  digits than Python reads, or nested deeper than ``MAX_BODY_DEPTH``, is answered HTTP 400
  with a JSON-RPC parse error naming it, before the SDK parses the body (``BodyCheck``), and after
  the bearer token's check: a caller without a token in force gets 401 whatever it sent. A tool
  call whose arguments are no object, or hold a name with a lone surrogate, gets the SDK's -32602
  with what is wrong (the SDK's own has no word of it).
- Every call: one log line (logger ``memory_pipeline.server``: token name, tool, world, duration,
  outcome; never an argument's content, never the token) and Prometheus counters by tool and
  outcome, served at ``/metrics``."""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from memory_pipeline.lib.text import json_type

log = logging.getLogger("memory_pipeline.server")

T = TypeVar("T")

# Tool functions at once in worker threads (a thread past its timeout no longer counts). Apart from
# anyio's default pool, which the bearer-token checks use: slow calls never hold up authentication.
CALL_THREADS = 32


class Outcome(StrEnum):
    OK = "ok"
    INVALID = "invalid"  # a bad argument (the client's one line names it)
    REFUSED = "refused"  # the token may not: another world, read-only, no token
    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"  # the client cancelled the request, or its session closed
    ERROR = "error"  # the server's fault (logged with its traceback)


class LimitError(Exception):
    """A call refused by one of the server's limits (one line, safe to show the caller)."""


class RateLimited(LimitError):
    pass


class CallTimeout(LimitError):
    pass


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1 << 20
    rate: float = 50.0  # tool calls per second per token; 0 turns the limit off
    burst: int = 100
    call_timeout: float = 10.0  # seconds

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise ValueError(f"max body bytes must be at least 1, got {self.max_body_bytes}")
        if self.rate < 0 or self.burst < 1:
            raise ValueError(f"rate limit must be >= 0 calls/s with a burst >= 1, got {self.rate:g}/{self.burst}")
        if not 0 < self.call_timeout < float("inf"):
            raise ValueError(f"call timeout must be a positive number of seconds, got {self.call_timeout:g}")


class TokenBuckets:
    """One bucket per token name: ``burst`` calls, refilled at ``rate`` a second. Used on the event
    loop only (no lock); one entry per token name that called, and names are the operator's."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (calls left, when)

    def take(self, name: str) -> float:
        """0 when the call may go (and is counted), else the seconds until it may."""
        now = self.clock()
        left, then = self._buckets.get(name, (float(self.burst), now))
        left = min(float(self.burst), left + (now - then) * self.rate)
        if left >= 1:
            self._buckets[name] = (left - 1, now)
            return 0.0
        self._buckets[name] = (left, now)
        return (1 - left) / self.rate


class CallMetrics:
    """The server's own Prometheus registry (not the process-wide one: a test process runs many)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.calls = Counter(
            "memory_server_calls", "Tool calls by tool and outcome.", ["tool", "outcome"], registry=self.registry
        )
        self.seconds = Histogram(
            "memory_server_call_seconds",
            "Tool call duration in seconds, as the client waited (refusals included).",
            ["tool"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.running = Gauge(
            "memory_server_calls_running",
            "Tool functions running in worker threads now, a timed-out one until its thread returns.",
            registry=self.registry,
        )


class CallGuard:
    """The limits and the accounting of one server's tool calls."""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self.buckets = TokenBuckets(self.limits.rate, self.limits.burst)
        self.metrics = CallMetrics()
        self.threads = anyio.CapacityLimiter(CALL_THREADS)

    def admit(self, token: str) -> None:
        if self.limits.rate <= 0:
            return
        wait = self.buckets.take(token)
        if wait > 0:
            raise RateLimited(
                f"rate limit: token {token!r} is over {self.limits.rate:g} calls/s (burst {self.limits.burst}); "
                f"retry in {wait:.2f} s"
            )

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` in a worker thread, waited for at most the call timeout."""

        def counted() -> T:
            self.metrics.running.inc()
            try:
                return work()
            finally:
                self.metrics.running.dec()

        timeout = self.limits.call_timeout
        with anyio.move_on_after(timeout) as scope:
            # Abandoned on timeout (a thread cannot be stopped): it finishes its transaction alone.
            return await anyio.to_thread.run_sync(counted, abandon_on_cancel=True, limiter=self.threads)
        assert scope.cancelled_caught
        raise CallTimeout(
            f"call timed out after {timeout:g} s (the server's --call-timeout); "
            "a write it began lands whole or not at all"
        )

    def record(self, token: str, tool: str, world: str, seconds: float, outcome: Outcome) -> None:
        self.metrics.calls.labels(tool, outcome.value).inc()
        self.metrics.seconds.labels(tool).observe(seconds)
        log.info("call token=%s tool=%s world=%s ms=%d outcome=%s", token, tool, world, round(seconds * 1000), outcome)


# A tool call's body: the JSON-RPC envelope, the arguments, then at most the tower's own nesting of
# an entry's content (tower.logic.MAX_JSON_DEPTH, 32) and a few levels to spare.
MAX_BODY_DEPTH = 48


class _NotJsonNumber(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _NotJsonNumber(f"{name} is not a JSON number (JSON has no NaN or Infinity): send null, a number or a string")


def _deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e400: Python reads it as infinity
        raise _NotJsonNumber(f"{text[:24]} is beyond a 64-bit float's range (it would read as infinity)")
    return value


# A number that may overflow a float or Python's int parsing (over 4,300 digits): only a body holding
# one is parsed here to look. A float overflows past 1.8e308: with an exponent of at most two digits
# (99) that takes over 200 digits before it (JSON allows no leading zeros), so either form is caught.
_BIG_NUMBER = re.compile(rb"\d[eE][+-]?\d{3}|\d{200}")


def body_problem(body: bytes) -> str | None:
    """What is wrong with a request body the SDK would take wrongly, or None (then the SDK parses it,
    answering its own parse error for a body that is not JSON at all)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:  # the SDK answered 500 with a traceback in the log
        return f"the body is not UTF-8 (byte {exc.start}: {body[exc.start : exc.start + 1]!r}); JSON is sent as UTF-8"
    suspect = b"NaN" in body or b"Infinity" in body or _BIG_NUMBER.search(body) is not None
    if not suspect and body.count(b"[") + body.count(b"{") <= MAX_BODY_DEPTH:
        return None  # nothing to look at: no odd number, and too few brackets to nest that deep
    try:
        parsed = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except _NotJsonNumber as exc:
        return str(exc)
    except RecursionError:
        return f"nested deeper than {MAX_BODY_DEPTH} levels"
    except json.JSONDecodeError:
        return None
    except ValueError as exc:  # an integer of more than 4,300 digits
        return f"a number the server cannot read: {str(exc).split(';')[0]}"
    return f"nested deeper than {MAX_BODY_DEPTH} levels" if _deeper_than(parsed, MAX_BODY_DEPTH) else None


# A tool call whose arguments the SDK refuses with a bare "Invalid request parameters" (no data):
# arguments that are no object, or a key holding a lone surrogate (a value holding one reaches the
# tool, which names it). Only a body these match is parsed here to look.
_ARGUMENTS_NOT_OBJECT = re.compile(rb'(?<!\\)"arguments"\s*:\s*[\["0-9tf-]')
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def params_problem(body: bytes) -> tuple[Any, str] | None:
    """(the request's id, what is wrong) of a ``tools/call`` whose arguments are no object or hold a
    key that is no Unicode text, else None (the SDK then reads the call)."""
    if not (_ARGUMENTS_NOT_OBJECT.search(body) or _SURROGATE_ESCAPE.search(body)):
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None  # the SDK answers its own parse error
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    arguments = params.get("arguments") if isinstance(params, dict) else None
    if arguments is None:
        return None
    if not isinstance(arguments, dict):
        got = json_type(arguments)
        return message.get("id"), f"params.arguments: expected an object (the tool's arguments by name), got {got}"
    for key in arguments:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError as exc:
            shown = json.dumps(key)[:60]  # as JSON writes it: \ud800
            return message.get("id"), (
                f"params.arguments: the argument name {shown} holds a lone surrogate at position {exc.start} "
                "(not Unicode text)"
            )
    return None


class BodyCheck:
    """ASGI middleware: a POST's body checked by ``body_problem`` before the app reads it, then
    replayed to the app as it came. A body over ``max_body_bytes`` is not held: the app gets it as it
    comes and answers its own 413."""

    def __init__(self, app: Any, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        held: list[dict[str, Any]] = []
        size, whole = 0, False
        while size <= self.max_body_bytes:
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":
                break  # the client went away: the app sees it so
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                whole = True
                break
        body = b"".join(m.get("body", b"") for m in held) if whole else b""
        problem = body_problem(body) if whole else None
        if problem is not None:
            await _parse_error(send, problem)
            return
        bad_params = params_problem(body) if whole else None
        if bad_params is not None:
            await _invalid_params(send, *bad_params)
            return

        async def replay() -> Any:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)


async def _invalid_params(send: Any, request_id: Any, problem: str) -> None:
    """The SDK's own answer to a request whose params it refuses (HTTP 200, JSON-RPC -32602, the
    session left open), with what is wrong in the message and in ``data``."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": -32602, "message": f"Invalid request parameters: {problem}", "data": problem},
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _parse_error(send: Any, problem: str) -> None:
    """The SDK's own answer to a body that does not parse (HTTP 400, JSON-RPC code -32700)."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32700, "message": f"Parse error: {problem}"}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})
