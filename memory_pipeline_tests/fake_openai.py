"""A local OpenAI-compatible HTTP server the tests start on 127.0.0.1 (no provider is reachable).

Responses are scripted: ``step(body)`` when set decides each request's step (kind, arg); else each
request pops the next step, or gets the default answer (tool calls
``tool_answer(body)`` when set, else the text ``answer(body)`` when set, else ``default_text``). Tool
calls are (name, arguments) pairs; arguments given as a string are sent exactly as they are. ``length`` answers a text cut short (finish_reason "length", as a
provider stopping at max_tokens), ``tools_length`` tool calls with that finish reason, ``filtered`` a text
with finish_reason "content_filter", ``no_choices`` a completion whose choices are empty, ``retry_after`` a 429 whose Retry-After
header is ``arg``; ``usage = None`` leaves the usage report out of every answer. ``hold(marker)`` keeps every request whose messages contain
``marker`` unanswered until ``release()``: a call in flight, for a fault injected at that moment."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    def __init__(self, default_text: str = "Garden day: tomatoes staked, compost turned"):
        self.default_text = default_text
        self.script: deque = deque()
        self.requests: list[dict] = []
        self.usage = (21, 9)
        self.echo_url = "https://svc-user:proxy-pass-123@llm-proxy.internal/v1"
        self.latency = 0.0  # seconds every answer takes (a provider is never instant)
        self.answer = None  # callable(request body) -> text of the default answer
        self.tool_answer = None  # callable(request body) -> tool calls [(name, arguments)] of the default answer
        self.step = None  # callable(request body) -> the step (kind, arg) this request gets, before the script
        self.hold_marker: str | None = None
        self.held = threading.Event()  # a request with the marker has arrived and is held
        self.released = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(body)
                if server.hold_marker and server.hold_marker in json.dumps(body.get("messages")):
                    server.held.set()
                    server.released.wait(timeout=900)
                time.sleep(server.latency)
                if server.step:
                    step = server.step(body)
                elif server.script:
                    step = server.script.popleft()
                elif server.tool_answer:
                    step = ("tools", server.tool_answer(body))
                else:
                    step = ("ok", server.answer(body) if server.answer else server.default_text)
                kind, arg = step
                if kind == "sleep":
                    time.sleep(arg)
                    kind, arg = "ok", server.default_text
                if kind == "status":
                    self._send(arg, {"error": {"message": f"scripted {arg}", "type": "server_error", "code": arg}})
                elif kind == "echo_key":
                    # What some providers and proxies do: the key they were sent, and the URL with
                    # its credentials, back in the error text.
                    auth = self.headers.get("Authorization", "")
                    message = f"Incorrect API key provided: {auth}. Upstream {server.echo_url} refused it"
                    self._send(arg, {"error": {"message": message, "type": "invalid_request_error", "code": arg}})
                elif kind == "malformed":
                    self._raw(200, b"this is not json {")
                elif kind == "tools":
                    self._send(200, server._completion(None, arg))
                elif kind == "tools_length":
                    self._send(200, server._completion(None, arg, finish="length"))
                elif kind == "length":
                    self._send(200, server._completion(arg, None, finish="length"))
                elif kind == "retry_after":  # 429 asking the client to wait `arg` (the header's text)
                    data = json.dumps({"error": {"message": "slow down", "type": "rate_limit", "code": 429}})
                    self._raw(429, data.encode(), {"Retry-After": str(arg)})
                elif kind == "no_choices":
                    self._send(200, {**server._completion("", None), "choices": []})
                elif kind == "filtered":
                    self._send(200, server._completion(arg, None, finish="content_filter"))
                else:
                    self._send(200, server._completion(arg, None))

            def _send(self, status, payload):
                self._raw(status, json.dumps(payload).encode())

            def _raw(self, status, data, headers=None):
                try:
                    self.send_response(status)
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _completion(self, text, tool_calls, finish=None):
        message = {"role": "assistant", "content": text}
        if tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
                }
                for i, (name, args) in enumerate(tool_calls)
            ]
        finish = finish or ("tool_calls" if tool_calls else "stop")
        out = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if self.usage is not None:
            out["usage"] = {
                "prompt_tokens": self.usage[0],
                "completion_tokens": self.usage[1],
                "total_tokens": sum(self.usage),
            }
        return out

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def push(self, kind: str, arg=None) -> FakeOpenAI:
        self.script.append((kind, arg))
        return self

    def hold(self, marker: str) -> FakeOpenAI:
        self.hold_marker = marker
        return self

    def release(self) -> None:
        self.released.set()

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.released.set()  # no handler thread left waiting
        self.httpd.shutdown()
        self.httpd.server_close()
