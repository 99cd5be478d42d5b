"""The driver's door client: requests to the host, their answers, the soft interrupt flag.

Runs INSIDE the sandbox's CPython, as the guest module "sandbox_kernel_door" (a part of the
cell driver, driver.py). Every request goes through one callable, the door (`_host.call` in
the WebAssembly guest, a pipe in the native backends): a JSON frame out, a JSON answer or a
binary answer (protocol.binary_answer) back. Under host CPython 3.11 in the unit tests: no
newer syntax.

Soft interrupt: byte 0 of a 17-byte bytearray is the flag; the other 16 bytes are a random
pattern sent in `hello`, by which the host finds the flag in linear memory and sets it.

Must import only the standard library and the driver's earlier parts; never sandbox_kernel.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

from sandbox_kernel_bundles import not_jsonable

__all__ = ["DoorClient", "loads"]

# The exceptions a host answer may name (protocol.ERROR_TYPES); anything else is RuntimeError.
_ERRORS: dict[str, type[BaseException]] = {
    kind.__name__: kind
    for kind in (
        KeyboardInterrupt,
        EOFError,
        RuntimeError,
        ValueError,
        TypeError,
        TimeoutError,
        ConnectionError,
        PermissionError,
        MemoryError,
    )
}
_SURROGATE = re.compile("[\ud800-\udfff]")
# What the reactor's turns and run_cell themselves use: put back when a cell replaces them.


def loads(raw: bytes) -> Any:
    """A JSON answer, or None when it is not JSON (shown as a malformed answer). No bytes at
    all are `{"ok": true}`, the answer that only says the request was done (protocol.py)."""
    if not raw:
        return {"ok": True}
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _new_flag() -> bytearray:
    flag = bytearray(17)
    flag[1:] = os.urandom(16)
    for i in range(1, 17):
        flag[i] ^= 0xA5  # in place, so the final pattern lives in this bytearray only
    return flag


class DoorClient:
    """Requests through the door, and the interrupt flag the host sets."""

    def __init__(self, door: Callable[[bytes], bytes]) -> None:
        self.door = door
        self.flag = _new_flag()  # never resized: the host holds its address

    # -- the door ------------------------------------------------------------------------

    def request(self, op: str, **fields: Any) -> Any:
        """Send one request through the door and return the answer's value, or raise its error."""
        return self._unwrap(op, loads(self._send(op, fields)))

    def _send(self, op: str, fields: dict[str, Any]) -> bytes:
        message = {"op": op, **fields}
        try:
            text = json.dumps(message, ensure_ascii=False, default=not_jsonable)
        except RecursionError:
            raise ValueError(f"what {op} was given is nested too deeply to send") from None
        try:
            frame = text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates (a str from bad bytes): shown as U+FFFD
            frame = _SURROGATE.sub("\ufffd", text).encode("utf-8")
        try:
            return self.door(frame)
        except ConnectionRefusedError as exc:
            raise RuntimeError(f"no sandbox host is bound to answer {op}") from exc
        except OSError as exc:
            raise RuntimeError(f"the sandbox host failed to answer {op}") from exc

    @staticmethod
    def _unwrap(op: str, answer: Any) -> Any:
        if isinstance(answer, dict):
            if "ok" in answer:
                return answer["ok"]
            error = answer.get("error")
            if isinstance(error, dict):
                kind = _ERRORS.get(str(error.get("type")), RuntimeError)
                raise kind(str(error.get("message", "")))
        raise RuntimeError(f"the sandbox host sent a malformed answer to {op}")

    def call_binary(self, op: str, **fields: Any) -> bytes:
        """A request from user code whose answer is bytes (a wheel): a binary answer."""
        self.check_interrupt()
        value = self._binary(op, fields)
        if not isinstance(value, bytes):
            raise RuntimeError(f"the sandbox host sent a malformed answer to {op}")
        self.check_interrupt()
        return value

    def _binary(self, op: str, fields: dict[str, Any]) -> Any:
        """The value of a binary answer (protocol.binary_answer): a JSON header line, then the
        payload; an error comes as the usual JSON answer and is raised."""
        raw = self._send(op, fields)
        end = raw.find(b"\n")
        header = loads(raw[:end] if end >= 0 else raw)
        if not isinstance(header, dict) or "kind" not in header or end < 0:
            self._unwrap(op, header)  # raises the host's error, if that is what came
            raise RuntimeError(f"the sandbox host sent a malformed answer to {op}")
        payload = memoryview(raw)[end + 1 :]  # a view: a large payload is not copied again
        if header.get("length") != len(payload):
            raise RuntimeError(f"the sandbox host sent an answer of the wrong length to {op}")
        kind = header["kind"]
        if kind == "none":
            return None
        if kind == "str":
            return str(payload, "utf-8")
        if kind == "bytes":
            return bytes(payload)
        if kind == "json":
            return json.loads(str(payload, "utf-8"))
        raise RuntimeError(f"the sandbox host sent an answer of unknown kind {kind!r} to {op}")

    def call(self, op: str, **fields: Any) -> Any:
        """A request from user code: a safe point for the soft interrupt before and after."""
        self.check_interrupt()
        value = self.request(op, **fields)
        self.check_interrupt()
        return value

    # -- interrupt -----------------------------------------------------------------------

    def check_interrupt(self) -> None:
        """Raise KeyboardInterrupt (once) if the host has asked for a soft interrupt."""
        if self.flag[0]:
            self.interrupted()

    def interrupted(self) -> None:
        """Clear the flag and raise KeyboardInterrupt (called by the checks put in cell loops)."""
        self.flag[0] = 0
        raise KeyboardInterrupt
