"""A session's output as its callbacks hear it: whole lines, or whatever has arrived.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable

__all__ = ["LineSplitter"]


class LineSplitter:
    """Turns output chunks into text for a callback: whole lines, or with `partial` whatever
    has arrived (a progress bar's `\r` update, `print(..., end='')`), as ipykernel streams it.
    UTF-8 is decoded incrementally, so a character split between chunks arrives whole.

    A callback that raises is detached (and its error kept in `error`): output is still
    captured, and nothing a callback does can make `execute()` itself fail.
    """

    def __init__(self, callback: Callable[[str], None], *, partial: bool = False) -> None:
        self._callback: Callable[[str], None] | None = callback
        self._partial = partial
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self.error: Exception | None = None

    def feed(self, chunk: bytes) -> None:
        text = self._decoder.decode(chunk)
        if self._partial:
            if text:
                self._deliver(text)
            return
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._deliver(line + "\n")

    def flush(self) -> None:
        rest, self._pending = self._pending + self._decoder.decode(b"", final=True), ""
        if rest:
            self._deliver(rest)

    def _deliver(self, text: str) -> None:
        callback = self._callback
        if callback is None:
            return
        try:
            callback(text)
        except Exception as exc:
            self._callback, self.error = None, exc
