"""What a running cell shows, on IOPub, always through the output firewall: its displays and
updates, clear_output, its result and error, the kernel's own lines, and the firewall's notes
on what it removed (kept for the run log).

The kernel owns one Publisher and hands it `send` (its send_response on IOPub). A cell's
streams are batched by a StreamPublisher (streams.py), which `flush` empties first so that
what a cell printed comes before what it displayed.

Must not import: ipykernel (the kernel passes its send in), wasmtime, sandbox_kernel.host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandbox_kernel.kernel import messages
from sandbox_kernel.kernel.firewall import OutputFirewall, Shown, removal_note
from sandbox_kernel.kernel.streams import StreamPublisher
from sandbox_kernel.repl.models import CodeExecution, DisplayMessage

__all__ = ["Publisher"]

Send = Callable[[str, dict[str, Any]], None]  # (msg_type, content) on IOPub


class Publisher:
    """One kernel's IOPub output, for the execution running now."""

    def __init__(self, firewall: OutputFirewall, send: Send) -> None:
        self.firewall = firewall
        self._send = send
        self.silent = False  # a silent execution publishes nothing
        self.removed: list[str] = []  # what the firewall removed in the running execution
        self.streams: StreamPublisher | None = None  # the running cell's
        self.count: int | None = None  # the running execution's number
        self.result_shown = False  # its result was shown when the guest gave it

    def begin(self, silent: bool, count: int | None = None) -> None:
        """A new execution: its silence, its number, and a fresh record of removals."""
        self.silent = silent
        self.removed = []
        self.count = count
        self.result_shown = False

    def result(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        """The cell's result as its display hook gives it, shown now (as ipykernel's), after
        what the cell printed and before what it shows afterwards."""
        if self.silent or self.count is None or self.result_shown:
            return
        self.flush()
        shown = self.firewall.bundle(data, metadata)
        self._shown("execute_result", messages.execute_result_content(self.count, shown), shown)
        self.result_shown = True

    def stream(self, name: str, text: str) -> None:
        """Output of the kernel itself (magics, notices), for the current request."""
        if not self.silent:
            self._send("stream", messages.stream_content(name, text))

    def display(self, message: DisplayMessage) -> None:
        """display() and IPython's update_display (by display_id), through the firewall."""
        if self.silent:
            return
        self.flush()  # what the cell printed before it comes first
        shown = self.firewall.bundle(message.data, message.metadata)
        transient = self.firewall.transient(message.transient)
        updates = message.update and "display_id" in transient
        msg_type = "update_display_data" if updates else "display_data"
        self._shown(msg_type, messages.display_content(shown, transient), shown)

    def clear_output(self, wait: bool) -> None:
        if not self.silent:
            self.flush()
            self._send("clear_output", messages.clear_output(wait))

    def flush(self) -> None:
        streams = self.streams
        if streams is not None:
            streams.flush()

    def outcome(
        self, execution: CodeExecution, count: int, silent: bool
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The execution's result and error (unless silent); its error content and the payloads
        that pass the firewall, for the reply."""
        error = messages.error_content(execution)
        if not silent:
            if execution.result and not self.result_shown:
                shown = self.firewall.bundle(execution.result, execution.result_metadata)
                self._shown("execute_result", messages.execute_result_content(count, shown), shown)
            if error is not None and not execution.error_shown:  # a UsageError: on stderr
                self._send("error", error)
        payload, removed = self.firewall.payloads(execution.payload)
        if removed and not silent:
            self.removed.extend(removed)
            self.stream("stderr", removal_note(removed))
        return error, payload

    def _shown(self, msg_type: str, content: dict[str, Any], shown: Shown) -> None:
        """A bundle that passed the firewall, then the note on what it removed, unless its
        HTML says it (an output left with nothing to show is not sent: the note says what it
        was)."""
        if shown.data:
            self._send(msg_type, content)
        self.removed.extend(shown.removed)  # the run log's record
        if shown.note:
            self.stream("stderr", shown.note)
