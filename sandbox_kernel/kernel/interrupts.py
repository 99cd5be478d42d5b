"""SIGINT for the kernel (signal mode, and message mode, which ipykernel turns into one).

While a request is handled, SIGINT's number is written to a pipe by the C-level signal handler
itself (signal.set_wakeup_fd), at once, whatever the main thread is doing: it runs the cell,
inside the guest, where a Python-level handler would wait for the next host call. A thread of
ours reads the pipe and cancels. The Python-level handler does nothing (one is needed for the
C-level one to be installed): a handler runs between any two bytecodes of the main thread, and
one that took a lock (an Event's, a Thread.start's) could wait forever for a lock the
interrupted code holds, as a storm of interrupts showed.

An interrupt that finds nothing to cancel (the session still starting, or the cell not in the
guest yet) is kept as `pending` for the request it came in: that request ends before its cell
reaches the guest, instead of the interrupt being lost.

Must not import: wasmtime, anything of the kernel's but this.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["InterruptPipe"]

# What the C-level signal handler writes to the pipe for SIGINT.
_SIGINT_BYTE = bytes([signal.SIGINT])
_STOP_BYTE = b"\0"  # no signal's number: the reader's end (stop)


def _noticed_by_the_pipe(signum: int, frame: object) -> None:
    """SIGINT's Python-level handler while a request is handled: the C-level handler has
    written to the pipe already (InterruptPipe.begin)."""


class InterruptPipe:
    """The pipe, its reader thread and the interrupt kept for the current request.
    `cancel` stops what runs and says whether something was running."""

    def __init__(self, cancel: Callable[[], bool]) -> None:
        self._cancel = cancel
        self.pending = threading.Event()
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # a storm never blocks a signal handler
        self._saved_handler: Any = None
        self._saved_wakeup_fd = -1
        reader = threading.Thread(
            target=self._read_interrupts, name="sandbox-kernel-interrupts", daemon=True
        )
        reader.start()

    def _read_interrupts(self) -> None:
        while True:
            try:
                data = os.read(self._read, 4096)
            except OSError:
                return
            if not data or _STOP_BYTE in data:  # shutdown (stop)
                return
            if _SIGINT_BYTE not in data:  # another signal with a Python-level handler
                continue
            # One cancel for a burst: the second stage is already timed.
            if not self._cancel():
                self.pending.set()

    def begin(self) -> None:
        """On the main thread, before each request's handler: from now on SIGINT is this
        request's."""
        self.pending.clear()
        self._saved_handler = signal.signal(signal.SIGINT, _noticed_by_the_pipe)
        self._saved_wakeup_fd = signal.set_wakeup_fd(
            self._write,
            warn_on_full_buffer=False,  # full: an interrupt is waiting
        )

    def end(self) -> None:
        """After the request's handler: SIGINT as it was."""
        signal.set_wakeup_fd(self._saved_wakeup_fd)
        signal.signal(signal.SIGINT, self._saved_handler)

    def stop(self) -> None:
        """End the reader (shutdown)."""
        with contextlib.suppress(OSError):  # full: the reader stays, a daemon thread
            # Not closed: while a handler runs it is the wakeup fd, and a reused descriptor
            # would get SIGINT's byte. Both ends are closed when the process ends.
            os.write(self._write, _STOP_BYTE)
