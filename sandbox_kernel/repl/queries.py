"""The host's questions to a wasm session's guest, each a bounded call into guest code:
completion, inspection, user expressions, a variable's value, and comms (a frontend's
message to a guest comm, the list of open comms).

Each runs as `_host_call` runs it (sandbox.py): the policy's fuel and time, ended by cancel(),
rolled back after a hard stop; a guest failure is an empty answer, never an exception.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sandbox_kernel.repl.models import COMM_TYPES
from sandbox_kernel.repl.protocol import DRIVER_NAME

__all__ = ["GuestCalls", "Streams"]

Streams = tuple[Callable[[str], None] | None, Callable[[str], None] | None]


class GuestCalls:
    """complete, inspect, evaluate, get_variable and the comm calls, over `_host_call`."""

    def _host_call(self, key: str, call: str, streams: Streams | None = None) -> tuple[bool, Any]:
        raise NotImplementedError

    def complete(self, code: str, cursor_pos: int) -> dict[str, Any]:
        """Jupyter complete_reply content, computed in the guest ({} when it failed)."""
        call = f"{DRIVER_NAME}.complete({code!r}, {int(cursor_pos)})"
        found, value = self._host_call("__complete__", call)
        return dict(value) if found and isinstance(value, dict) else {}

    def inspect(self, code: str, cursor_pos: int, detail_level: int = 0) -> dict[str, Any]:
        """Jupyter inspect_reply content (signature and docstring), computed in the guest."""
        call = f"{DRIVER_NAME}.inspect({code!r}, {int(cursor_pos)}, {int(detail_level)})"
        found, value = self._host_call("__inspect__", call)
        return dict(value) if found and isinstance(value, dict) else {}

    def evaluate(self, expressions: dict[str, str]) -> dict[str, Any]:
        """Jupyter's user_expressions: each expression's MIME bundle or error, evaluated in
        one call (an interrupt or the time limit ends them all: the rest say so)."""
        call = f"{DRIVER_NAME}.evaluate({dict(expressions)!r})"
        found, value = self._host_call("__expressions__", call)
        answers = value if found and isinstance(value, dict) else {}
        stopped = {"status": "error", "ename": "KeyboardInterrupt", "evalue": "not evaluated"}
        return {key: answers.get(key, stopped) for key in expressions}

    def get_variable(self, name: str) -> Any:
        """The variable's value as plain Python (JSON-able; DataFrames as records), or None."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"not a variable name: {name!r}")
        found, value = self._host_call(name, f"{DRIVER_NAME}.get_variable({name!r})")
        return value if found else None

    # -- comms -------------------------------------------------------------------------------

    def deliver_comm(
        self, msg_type: str, message: dict[str, Any], streams: Streams = (None, None)
    ) -> bool:
        """A frontend's comm_open, comm_msg or comm_close, handled in the guest as ipykernel
        handles it (the guest's comm manager runs the comm's handler: a widget's value set,
        its observers run). `message` is the Jupyter message (header, parent_header, metadata,
        content) with `buffers` as base64 strings. The handler's output goes to `streams`;
        what it changed is kept. Whether the message reached the guest's manager."""
        if msg_type not in COMM_TYPES:
            raise ValueError(f"not a comm message type: {msg_type!r}")
        text = json.dumps(message, ensure_ascii=False, default=str)  # the header's date
        call = f"{DRIVER_NAME}.comm_handle({msg_type!r}, {text!r})"
        found, value = self._host_call("__comm__", call, streams)
        return found and value is True

    def comm_info(self, target_name: str | None = None) -> dict[str, dict[str, str]]:
        """comm_info_reply's comms: the guest's open comms, of one target or all."""
        call = f"{DRIVER_NAME}.comm_info({target_name!r})"
        found, value = self._host_call("__comm_info__", call)
        if not found or not isinstance(value, dict):
            return {}
        return {
            str(comm_id): {"target_name": str(entry.get("target_name"))}
            for comm_id, entry in value.items()
            if isinstance(entry, dict)
        }
