"""Real model servers on 127.0.0.1 for the tests: OpenAI Chat Completions and Anthropic
Messages, answering from a Python function, with planned failures.

    with ModelServer(answer=lambda messages: "hi") as server:
        server.plan(Reply(status=429), Reply(status=429))   # the next two requests fail
        ... OpenAICompatibleProvider(server.openai_url, ...) ...
        server.requests[0].headers["authorization"]

The server speaks HTTP over a real socket; the clients under test run unchanged.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.local_http import LocalHTTPServer

Answer = Callable[[list[dict[str, Any]]], str]


def echo(messages: list[dict[str, Any]]) -> str:
    return f"echo: {messages[-1]['content']}"


@dataclass(frozen=True)
class Reply:
    """A planned reply for one request: a status, a raw body, a delay, extra headers."""

    status: int = 200
    body: bytes | None = None  # None: the protocol's normal answer from `answer`
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]  # lower-case names
    body: dict[str, Any]


class ModelServer:
    def __init__(self, answer: Answer = echo, delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay  # every answer's delay, unless a planned reply says otherwise
        self.requests: list[Seen] = []
        self.always: Reply | None = None  # a reply for every request (a server that is down)
        self._planned: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._active = 0
        self.peak_concurrency = 0
        self._http = LocalHTTPServer(self._handler())

    @property
    def base(self) -> str:
        return self._http.base

    @property
    def openai_url(self) -> str:
        return f"{self.base}/v1"

    def plan(self, *replies: Reply) -> None:
        with self._lock:
            self._planned.extend(replies)

    def __enter__(self) -> ModelServer:
        self._http.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.stop()

    def _next(self) -> Reply | None:
        with self._lock:
            if self._planned:
                return self._planned.popleft()
            return self.always

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.requests.append(Seen(self.path, headers, body))
                    server._active += 1
                    server.peak_concurrency = max(server.peak_concurrency, server._active)
                try:
                    self._reply(body)
                finally:
                    with server._lock:
                        server._active -= 1

            def _reply(self, body: dict[str, Any]) -> None:
                planned = server._next() or Reply(delay=server.delay)
                if planned.delay:
                    time.sleep(planned.delay)
                payload = planned.body
                if payload is None:
                    payload = self._normal(body) if planned.status < 400 else self._error(planned)
                self.send_response(planned.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in planned.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def _normal(self, body: dict[str, Any]) -> bytes:
                if self.path.endswith("/messages"):  # Anthropic
                    messages = list(body["messages"])
                    text = server.answer(messages)
                    return json.dumps(
                        {
                            "id": "msg_test",
                            "type": "message",
                            "role": "assistant",
                            "model": body["model"],
                            "content": [{"type": "text", "text": text}],
                            "stop_reason": "end_turn",
                            "usage": {"input_tokens": _words(messages), "output_tokens": 7},
                        }
                    ).encode()
                messages = list(body["messages"])
                text = server.answer(messages)
                return json.dumps(
                    {
                        "id": "chatcmpl-test",
                        "object": "chat.completion",
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": _words(messages),
                            "completion_tokens": 7,
                            "total_tokens": _words(messages) + 7,
                        },
                    }
                ).encode()

            def _error(self, planned: Reply) -> bytes:
                return json.dumps(
                    {"error": {"message": f"planned failure {planned.status}", "type": "test"}}
                ).encode()

            def log_message(self, *args: object) -> None:  # quiet tests
                pass

        return Handler


def _words(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in messages)
