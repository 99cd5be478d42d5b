"""A guest's stdout or stderr, kept up to a cap and never buffered without bound.

wasmtime calls the WASI output callbacks on its own worker threads, so a stream takes a lock.
Bytes past the cap are counted and dropped, yet reported as written: a guest whose write
"failed" would only retry.

The cap is the cap, notice included: a stream cut short reads as its first bytes, then a
notice saying how much was omitted, and the whole is at most `cap_bytes` long (UTF-8).

An optional listener sees the stream as it arrives (the REPL streams lines to Jupyter through
it): the bytes that will surely be kept at once, the last `reserve` bytes before the cap only
at `close()`, when it is known whether they stay or make room for the notice. So the listener
sees exactly what `text()` returns. A listener that raises is detached and remembered, never
allowed to reach wasmtime, where it would become a trap.

Shared by host/ (a guest's WASI streams) and the REPL's native backends (a child's pipes).

Must not import: anything of sandbox_kernel but core, nor wasmtime.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["CappedStream"]

# Room kept for the notice: its length with the largest omitted count we format, plus the
# bytes a cut UTF-8 character may lose.
_LONGEST_COUNT = 10**18


class CappedStream:
    """Collects up to `cap_bytes` of one output stream, its omission notice included."""

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
        self._sent = 0  # bytes already given to the listener
        self._closed = False
        self.dropped_bytes = 0
        self._lock = threading.Lock()
        self._listener = listener
        self.listener_error: BaseException | None = None
        reserve = len(self._notice(_LONGEST_COUNT).encode()) + 4
        self._live_bytes = max(0, cap_bytes - reserve)  # surely kept, whatever comes later

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """The WASI callback: keep what fits, count the rest, claim all of it written."""
        try:
            size = len(data)
            with self._lock:
                before = self._kept
                kept = bytes(data[: max(0, self.cap_bytes - before)])
                if kept:
                    self._chunks.append(kept)
                    self._kept += len(kept)
                self.dropped_bytes += size - len(kept)
                live = b""
                if self._listener is not None and before < self._live_bytes:
                    live = kept[: self._live_bytes - before]  # everything before was sent
                    self._sent = before + len(live)
            if live:
                self._notify(live)
            return size
        except Exception:  # nothing may escape into wasmtime
            return len(data)

    def close(self) -> None:
        """The stream has ended: the listener gets the rest of what `text()` holds."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            rest = self._final()[self._sent :]
            self._sent += len(rest)
        if rest:
            self._notify(rest)

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
        """The bytes the guest wrote that were kept (up to the cap, before any notice)."""
        with self._lock:
            return b"".join(self._chunks)

    def text(self) -> str:
        """The stream as text, with an omission notice when the cap cut it; at most
        `cap_bytes` bytes in UTF-8."""
        with self._lock:
            final = self._final()
        text = final.decode("utf-8", errors="replace")
        encoded = text.encode("utf-8")
        if len(encoded) > self.cap_bytes:  # replaced bad bytes grew it: cut, whole characters
            text = encoded[: self.cap_bytes].decode("utf-8", errors="ignore")
        return text

    def _final(self) -> bytes:
        """What the stream amounts to (under the lock): all of it, or its first bytes and the
        notice, within the cap."""
        data = b"".join(self._chunks)
        if not self.truncated:
            return data
        total, room = self._kept + self.dropped_bytes, self.cap_bytes
        notice = self._fitting_notice(total)
        if len(notice) >= room:
            return notice[:room]
        body = _whole_characters(data[: room - len(notice) - 1])
        notice = self._fitting_notice(total - len(body))  # the count of what is really omitted
        body = _whole_characters(body[: room - len(notice) - 1])
        return body + (b"\n" if body and not body.endswith(b"\n") else b"") + notice

    def _fitting_notice(self, omitted: int) -> bytes:
        """The notice, or its short form where the full one would take over half the cap."""
        full = self._notice(omitted).encode()
        if len(full) <= self.cap_bytes // 2:
            return full
        return f"[sandbox: {self.name} cut at {self.cap_bytes:,} bytes]\n".encode()

    def notice(self) -> str:
        """The notice as `text()` ends with it (the omitted count includes the bytes held
        back to make room for it)."""
        with self._lock:
            final = self._final()
        start = final.rfind(b"[sandbox: ")
        return final[start:].decode() if self.truncated and start >= 0 else ""

    def _notice(self, omitted: int) -> str:
        return (
            f"[sandbox: {omitted:,} bytes of {self.name} omitted; the policy caps {self.name} "
            f"at {self.cap_bytes:,} bytes, this notice included]\n"
        )


def _whole_characters(data: bytes) -> bytes:
    """`data` without a UTF-8 character cut in two at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data
