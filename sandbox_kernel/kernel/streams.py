"""A cell's stdout and stderr, published to its own request in batches while it runs.

The guest writes a line at a time, and wasmtime delivers output on its own threads, where
ipykernel's notion of "the current request" is not set. So each execution gets a publisher
bound to its request's parent header, and lines are gathered and sent at most every
`INTERVAL_SECONDS` (as ipykernel flushes its own stdout): a loop printing 20,000 lines sends
a few dozen messages, and a line printed before a long sleep still arrives within 50 ms. The
ticker thread starts with the first output: a cell that prints nothing starts none (a thread
started and joined per cell was 0.3 ms of a trivial cell's round trip).

Must not import: wasmtime, sandbox_kernel.host.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["INTERVAL_SECONDS", "StreamPublisher"]

INTERVAL_SECONDS = 0.05
_MAX_PENDING_CHARS = 64 * 1024  # sent at once past this, whatever the clock says

Send = Callable[[str, str, dict[str, Any]], None]  # (stream name, text, parent header)


class StreamPublisher:
    """Batches one execution's output; a context manager that flushes on exit."""

    def __init__(self, send: Send, parent: dict[str, Any]) -> None:
        self._send = send
        self._parent = parent
        self._pending: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._sizes = {"stdout": 0, "stderr": 0}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> StreamPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done.set()
            ticker = self._ticker
        if ticker is not None:
            ticker.join()
        self.flush()

    def stdout(self, text: str) -> None:
        self._add("stdout", text)

    def stderr(self, text: str) -> None:
        self._add("stderr", text)

    def _add(self, name: str, text: str) -> None:
        with self._lock:
            self._pending[name].append(text)
            self._sizes[name] += len(text)
            full = self._sizes[name] >= _MAX_PENDING_CHARS
            if self._ticker is None and not self._done.is_set():
                self._ticker = threading.Thread(
                    target=self._tick, name="sandbox-kernel-streams", daemon=True
                )
                self._ticker.start()
        if full:
            self.flush()

    def flush(self) -> None:
        """Send what is pending, stdout first (order within a stream is kept)."""
        with self._lock:
            batches = [(n, "".join(parts)) for n, parts in self._pending.items() if parts]
            for name in self._pending:
                self._pending[name] = []
                self._sizes[name] = 0
        for name, text in batches:
            self._send(name, text, self._parent)

    def _tick(self) -> None:
        while not self._done.wait(INTERVAL_SECONDS):
            self.flush()
