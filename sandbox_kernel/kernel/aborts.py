"""stop_on_error by arrival: after a cell fails, abort the execute requests that had arrived before
its error reply went out, and never one that came after it.

ipykernel's contract (an execute_request with stop_on_error, the default, that fails aborts
what was queued behind it) is kept, but not its way of ending the aborting. ipykernel 7.4
sets `_aborting` when the error reply has been sent and clears it when a "stop aborting"
marker, posted to the shell channel thread after the reply, comes through the main shell's
queue. A client that waits for the reply and sends its next cell at once (agents, papermill,
after an interrupt) races that marker: its cell was aborted in 0-4 of 8 fresh ipykernel
kernels, and in 2-6 of 8 of this kernel's.

Here the shell channel thread stamps every request with its place in the order of arrival as
it reads it from the shell socket (`Arrivals.stamp`), before handing it on. Just before a
failed cell's reply is sent (`finish_metadata`, ipykernel's last step before the send), the
next place in that order is taken as the cut; ipykernel's `_abort_queues` then makes it the
line: an execute_request of the main shell is aborted when its place is before the cut. A
request that a client sends after reading the reply is read by the kernel after the reply was
sent, so it is always after the cut; the cells queued behind the failing one are before it.
Nothing has to be cleared later, so nothing can race. (A request still unread in the socket
when the reply went out is stamped later, so it runs: the shell channel thread reads while
cells run, so that window is the few microseconds between arrival and read.) Subshells keep
ipykernel's own aborting.

Must not import: wasmtime, pydantic (the kernel's first reply must not wait for it).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Final

from ipykernel.kernelbase import Kernel

__all__ = ["AbortsByArrival", "Arrivals"]

_DELIMITER: Final = b"<IDS|MSG>"
_MAX_WAITING: Final = 10_000  # stamps of requests never dispatched (an unknown subshell's)


def _header(frames: list[Any]) -> bytes | None:
    """The raw header frame of a wire message (identities, delimiter, signature, header, ...)."""
    for index, frame in enumerate(frames):
        data = frame if isinstance(frame, bytes) else frame.bytes
        if data == _DELIMITER:
            if index + 2 >= len(frames):
                return None
            header = frames[index + 2]
            return header if isinstance(header, bytes) else bytes(header.bytes)
    return None


class Arrivals:
    """Each request's place in the order of arrival, and the cut that aborts those before it.

    `stamp` runs on the shell channel thread, `dispatched` and `cut_now` on the main one."""

    def __init__(self) -> None:
        self._order = itertools.count(1)
        self._places: dict[bytes, int] = {}  # header frame -> place, until dispatched
        self._lock = threading.Lock()
        self._next_cut = 0  # taken as a failed cell's reply is about to go
        self.cut = 0  # execute requests that arrived before this place are aborted

    def stamp(self, frames: list[Any]) -> None:
        header = _header(frames)
        if header is None:
            return
        with self._lock:
            self._places[header] = next(self._order)
            if len(self._places) > _MAX_WAITING:
                del self._places[next(iter(self._places))]

    def dispatched(self, frames: list[Any]) -> int | None:
        """The request's place (None for one that was never stamped), forgotten here."""
        header = _header(frames)
        if header is None:
            return None
        with self._lock:
            return self._places.pop(header, None)

    def reply_going(self) -> None:
        """A failed cell's reply is about to be sent: what arrives from now on is after it."""
        with self._lock:
            self._next_cut = next(self._order)

    def abort_queued(self) -> None:
        """The failed cell's reply went out (ipykernel's `_abort_queues`): abort what came
        before it."""
        with self._lock:
            self.cut = max(self.cut, self._next_cut)

    def aborts(self, place: int | None) -> bool:
        return place is not None and place < self.cut


class AbortsByArrival(Kernel):  # ipykernel's Kernel is untyped: called as it is
    """ipykernel's Kernel whose stop_on_error aborts by arrival (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        self.arrivals = Arrivals()
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]

    async def shell_channel_thread_main(self, msg: list[Any]) -> None:
        """On the shell channel thread: stamp the request before it is handed on."""
        self.arrivals.stamp(msg)
        await super().shell_channel_thread_main(msg)  # type: ignore[no-untyped-call]

    async def dispatch_shell(
        self, msg: list[Any], /, subshell_id: str | None = None, *, concurrent: bool = False
    ) -> None:
        if len(msg) > 1:  # not ipykernel's "stop aborting" marker (a subshell's)
            place = self.arrivals.dispatched(msg)  # forgotten for a subshell's request too
            if subshell_id is None:
                # ipykernel reads `_aborting` before its first await: this request's alone.
                self._aborting = self.arrivals.aborts(place)
        await super().dispatch_shell(msg, subshell_id=subshell_id, concurrent=concurrent)

    def finish_metadata(
        self, parent: dict[str, Any], metadata: dict[str, Any], reply_content: dict[str, Any]
    ) -> dict[str, Any]:
        """ipykernel's last step before it sends a reply: a failed cell's takes the cut."""
        header = parent.get("header", {})
        if (
            reply_content.get("status") == "error"
            and header.get("msg_type") == "execute_request"
            and header.get("subshell_id") is None  # a subshell's aborting is ipykernel's
        ):
            self.arrivals.reply_going()
        result: dict[str, Any] = super().finish_metadata(  # type: ignore[no-untyped-call]
            parent, metadata, reply_content
        )
        return result

    def _abort_queues(self, subshell_id: str | None = None) -> None:
        if subshell_id is not None:
            super()._abort_queues(subshell_id)
            return
        self.log.info("Aborting the execute requests that came before the error reply")
        self.arrivals.abort_queued()
