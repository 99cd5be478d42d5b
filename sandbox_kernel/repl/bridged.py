"""The part of a session that backends answering the driver's door themselves share (wasm,
native, pyodide): the running-turn bookkeeping and the two-stage interrupt, soft first
(KeyboardInterrupt in the cell) and hard after the grace period (the guest stopped from
outside: rolled back, or the process replaced).

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import threading
from abc import abstractmethod
from collections.abc import Iterator
from pathlib import Path

from sandbox_kernel.repl.base import ReplBackend
from sandbox_kernel.repl.bridges import Bridge, escalate_after
from sandbox_kernel.repl.models import REPLConfig

__all__ = ["BridgedSession"]


class BridgedSession(ReplBackend):
    """A backend that runs the driver in this process's care and talks to it through a
    Bridge (wasm, native, pyodide): the running-turn bookkeeping and the two-stage cancel.

    Subclasses call `_turn_running()` around each turn that cancel() may stop, say in
    `_stoppable()` whether a guest is there to stop, in `_soft_stop()` how to interrupt it and
    in `_hard_stop()` how to end its turn from outside; a turn that sees `_hard_requested`
    knows it was cancelled.
    """

    def __init__(self, config: REPLConfig | None) -> None:
        self.config = config if config is not None else REPLConfig()
        root = self.config.workspace or self.config.policy.mount_host_dir
        self.workspace = Path(root).expanduser().resolve()  # the host folder at /app
        self._lock = threading.RLock()  # one execution, or call into the guest, at a time
        self._context: object = None
        self._count = 0  # executions started; a stop is aimed at one of them
        self._running = threading.Event()
        self._hard_requested = False
        self._escalation: threading.Timer | None = None
        self._ending = threading.Lock()  # an execution is marked ended, or hard-stopped, not both
        self.bridge = Bridge(self.config, lambda: self._context)

    def _configure(self, config: REPLConfig) -> None:
        self.config = self.bridge.config = config  # the bridges read the same limits

    @abstractmethod
    def _stoppable(self) -> bool:
        """A guest is there to stop (started, not yet discarded)."""

    @abstractmethod
    def _soft_stop(self) -> None:
        """Ask the running turn to stop by itself (KeyboardInterrupt in the cell)."""

    def _hard_stop(self) -> None:
        """End the running turn from outside, once the grace period has passed."""

    def cancel(self) -> bool:
        """Interrupt the running execution: soft now, hard after `interrupt_grace_seconds`.
        False when nothing runs (a cancel while idle does nothing)."""
        if not self._stoppable() or not self._running.is_set():
            return False
        number = self._count
        self.bridge.soft_cancel.set()
        self._soft_stop()

        def hard() -> None:
            self._hard_requested = True
            self.bridge.hard_cancel.set()
            self._hard_stop()

        self._escalation = escalate_after(
            self.config.interrupt_grace_seconds,
            lambda: self._running.is_set() and self._count == number,
            hard,
            self._ending,
        )
        return True

    @contextlib.contextmanager
    def _turn_running(self) -> Iterator[None]:
        """Around one turn that cancel() may stop: marked running, and after it (under the
        lock the hard stop takes) marked ended, with any pending escalation called off."""
        self._hard_requested = False
        self._running.set()
        try:
            yield
        finally:
            with self._ending:
                self._running.clear()
            if self._escalation is not None:
                self._escalation.cancel()

    def _stop_escalation(self) -> None:
        """Call off (and wait for) a pending hard stop: before the session is destroyed."""
        timer, self._escalation = self._escalation, None
        if timer is not None:
            timer.cancel()
            timer.join()
