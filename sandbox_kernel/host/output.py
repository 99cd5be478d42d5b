"""A guest's stdout or stderr, kept up to a cap and never buffered without bound.

wasmtime calls the WASI output callbacks on its own worker threads, so a stream takes a lock.
Bytes past the cap are counted and dropped, yet reported as written: a guest whose write
"failed" would only retry. An optional listener sees every accepted chunk as it arrives (the
REPL streams lines to Jupyter through it); a listener that raises is detached and remembered,
never allowed to reach wasmtime, where it would become a trap.

Must not import: wasmtime, runtimes, repl.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["CappedStream"]


class CappedStream:
    """Collects up to `cap_bytes` of one output stream."""

    def __init__(
        self,
        name: str,
        cap_bytes: int,
        listener: Callable[[bytes], None] | None = None,
    ) -> None:
        self.name = name
        self.cap_bytes = cap_bytes
        self._chunks: list[bytes] = []
        self._kept = 0
        self.dropped_bytes = 0
        self._lock = threading.Lock()
        self._listener = listener
        self.listener_error: BaseException | None = None

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """The WASI callback: keep what fits, count the rest, claim all of it written."""
        try:
            size = len(data)
            with self._lock:
                room = self.cap_bytes - self._kept
                kept = bytes(data[: max(0, room)])
                if kept:
                    self._chunks.append(kept)
                    self._kept += len(kept)
                self.dropped_bytes += size - len(kept)
            if kept and self._listener is not None:
                self._notify(kept)
            return size
        except Exception:  # nothing may escape into wasmtime
            return len(data)

    def _notify(self, chunk: bytes) -> None:
        listener = self._listener
        if listener is None:
            return
        try:
            listener(chunk)
        except Exception as exc:
            self._listener = None
            self.listener_error = exc

    @property
    def truncated(self) -> bool:
        return self.dropped_bytes > 0

    def data(self) -> bytes:
        with self._lock:
            return b"".join(self._chunks)

    def text(self) -> str:
        """The kept bytes as text, with an omission notice when the cap cut them."""
        body = self.data().decode("utf-8", errors="replace")
        if self.truncated:
            if body and not body.endswith("\n"):
                body += "\n"
            body += self.notice()
        return body

    def notice(self) -> str:
        return (
            f"[sandbox: {self.dropped_bytes:,} bytes of {self.name} omitted; "
            f"the policy caps {self.name} at {self.cap_bytes:,} bytes]\n"
        )
