"""A real OpenAI-compatible Chat Completions server on 127.0.0.1, run in a thread."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class ChatServer:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    body: bytes | None = None  # a raw reply instead of the echo


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    state = ChatServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length))
            state.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            prompt = body["messages"][-1]["content"]
            reply = (
                state.body
                or json.dumps(
                    {"choices": [{"message": {"role": "assistant", "content": f"echo: {prompt}"}}]}
                ).encode()
            )
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:  # quiet tests
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
