"""The door protocol between the guest's cell driver and the host: the one place it is written.

Every request the guest makes is one frame through the image's door (`_host.call(frame)` in
the WebAssembly guest, a JSON-RPC 2.0 request over stdio in the native backend): a UTF-8 JSON
object with an "op" and its fields. Every answer is a JSON object too: either {"ok": ...} with
the op's value or {"error": {"type": T, "message": M}}, which the guest raises as an exception
of that type (T in ERROR_TYPES; anything else becomes RuntimeError). A context and a wheel
come as binary answers (see `context` below).

Guest -> host requests (the driver's side is sandbox_kernel/guest/driver.py):

    hello      {"flag_magic": hex}         once, at session start: the 16 bytes that follow
                                           the soft-interrupt flag byte in guest memory
               -> {"ok": true}
    done       {"cell": n, "reply": {...}}  the cell's outcome (CellReply below) -> {"ok": true}
    display    {"data": {mime: value}, "metadata": {...}}   a display() or a figure, live;
               IPython's may add "transient": {"display_id": id} and "update": true
               -> {"ok": true}
    clear_output  {"wait": bool}           IPython's clear_output() -> {"ok": true}
    sleep      {"seconds": s}              time.sleep through the host: bounded by the cell's
                                           deadline, ended early by cancel()
               -> {"ok": true} | {"error": {"type": "KeyboardInterrupt", ...}}
    input      {"prompt": p, "password": bool}          -> {"ok": "<line>"} | EOFError
    llm_query  {"prompt": p}                            -> {"ok": "<answer>"}
    llm_query_batched  {"prompts": [p, ...]}            -> {"ok": ["<answer>", ...]}
    rlm_query  {"task": t, "has_ctx": bool, "ctx": ...}  -> {"ok": "<answer>"}
    pip        {"args": [...], "installed": {name: {"version", "session"}},
                "environment": {marker: value}}   %pip install: the host's pip picks and
                                           downloads pure-Python wheels (host/packages.py)
               -> {"ok": {"log": [line, ...], "wheels": [{name, version, filename, sha256,
                  size}, ...]}} or {"ok": {"log": [...], "error": why}}
    wheel      {"sha256": h}               one wheel the last pip answer named, as a binary
                                           answer of kind "bytes" (the zip's bytes)
    context    {}                          the session's context, as a binary answer:
                                           b"<json header>\n<payload>" with header
                                           {"kind": "none"|"str"|"bytes"|"json", "length": n}
                                           (an error is the usual JSON answer)
    value      {"name": n, "value": ..., "found": bool}  get_variable's answer -> {"ok": true}
    image      {"address": a, "count": n, "static": None's count}   as a warm image is made
                                           only: n addresses of its objects, as 32-bit words
                                           at a, for the host to make immortal now, while the
                                           driver waits (host/immortal.py) -> {"ok": written}

Host -> guest: the host only ever enters the guest with a `turn` whose source is one call
into the driver, `__sandbox_kernel__.<method>(<int or repr'd str>, ...)`, so no user text is
ever spliced into code. A cell's source comes with its turn (`run_cell_turn`, as hex digits):
asking for it through the door cost a crossing, 0.1 ms of a trivial cell.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CELL_NAME_SEED",
    "CELL_TURN",
    "DRIVER_NAME",
    "DRIVER_PARTS",
    "ERROR_TYPES",
    "CellReply",
    "ErrorInfo",
    "binary_answer",
    "cell_hash",
    "decode_request",
    "error_answer",
    "ok_answer",
    "run_cell_turn",
]

DRIVER_NAME: Final = "__sandbox_kernel__"
# The driver's parts (guest modules, files in sandbox_kernel/guest), in the order they load
# before driver.py itself: the guest's loader, and Pyodide's worker, send them; under host
# CPython driver.py loads its own copy of this list (tests/repl/test_driver_parts.py).
DRIVER_PARTS: Final = (
    ("sandbox_kernel_streams", "streams.py"),
    ("sandbox_kernel_bundles", "bundles.py"),
    ("sandbox_kernel_cells", "cells.py"),
    ("sandbox_kernel_helpers", "helpers.py"),
    ("sandbox_kernel_door", "door.py"),
    ("sandbox_kernel_calls", "calls.py"),
    ("sandbox_kernel_binding", "binding.py"),
)
# Exception types a host answer may ask the guest to raise; anything else is RuntimeError.
ERROR_TYPES: Final = frozenset(
    {
        "KeyboardInterrupt",
        "EOFError",
        "RuntimeError",
        "ValueError",
        "TypeError",
        "TimeoutError",
        "ConnectionError",
        "PermissionError",
        "MemoryError",
    }
)


class ErrorInfo(BaseModel):
    """An exception the guest's code raised (or a limit reported as one)."""

    model_config = ConfigDict(frozen=True)

    ename: str
    evalue: str
    traceback: list[str] = Field(default_factory=list)  # lines as IPython prints them
    # Already shown on stderr, as IPython shows a UsageError (a magic's): no traceback, and
    # the kernel sends no error output for it, as ipykernel does not.
    shown: bool = False


class CellReply(BaseModel):
    """What the driver reports when a cell ends by itself (not by a trap)."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["ok", "error", "cancelled"]
    error: ErrorInfo | None = None
    result: dict[str, Any] | None = None  # the last expression's MIME bundle
    result_metadata: dict[str, Any] = Field(default_factory=dict)
    displays: list[dict[str, Any]] = Field(default_factory=list)  # {"data":..., "metadata":...}
    payload: list[dict[str, Any]] = Field(default_factory=list)  # IPython's payloads


def decode_request(frame: bytes) -> dict[str, Any]:
    """A request frame as a dict with an "op"; ValueError for anything else."""
    try:
        request = json.loads(frame.decode("utf-8"))
    except RecursionError:  # the host's parser must not be the guest's stack to exhaust
        raise ValueError("a door request is nested too deeply") from None
    if not isinstance(request, dict) or not isinstance(request.get("op"), str):
        raise ValueError("a door request is a JSON object with an 'op'")
    return request


def ok_answer(value: Any = True) -> bytes:
    """`{"ok": value}`; for the answer that only says the request was done, no bytes at all
    (the guest's door reads them as `{"ok": true}`): the WebAssembly door writes an empty
    answer without asking the guest for memory, 0.05 ms of every cell's report."""
    if value is True:
        return b""
    return json.dumps({"ok": value}, ensure_ascii=False).encode("utf-8")


def error_answer(kind: str, message: str) -> bytes:
    kind = kind if kind in ERROR_TYPES else "RuntimeError"
    return json.dumps({"error": {"type": kind, "message": message}}).encode("utf-8")


def binary_answer(value: object) -> bytes:
    """A binary answer (a context, a wheel): a JSON header line, then the payload."""
    if value is None:
        kind, payload = "none", b""
    elif isinstance(value, str):
        kind, payload = "str", value.encode("utf-8")
    elif isinstance(value, bytes | bytearray | memoryview):
        kind, payload = "bytes", bytes(value)
    else:
        kind, payload = "json", json.dumps(value, ensure_ascii=False).encode("utf-8")
    header = json.dumps({"kind": kind, "length": len(payload)}).encode("utf-8")
    return header + b"\n" + payload


# A cell's turn is `__sandbox_kernel__.run_cell(3, bytes.fromhex('78203d2031').decode(...),
# 1794950278)`: these four parts around its number, its source's hex digits and the hash that
# names its file (guest cells.CELL_TURN).
CELL_TURN: Final = (
    f"{DRIVER_NAME}.run_cell(",
    ", bytes.fromhex('",
    "').decode('utf-8', 'surrogatepass'), ",
    ")",
)
# ipykernel's seed for the MurmurHash2 that names a cell's file (guest shell._CELL_NAME_SEED).
CELL_NAME_SEED: Final = 0xC70F6907
_MURMUR_M = 0x5BD1E995
_WORD = 0xFFFFFFFF


def run_cell_turn(number: int, code: str) -> str:
    """The turn that runs cell `number`. Its source travels as the hex digits of its UTF-8
    (lone surrogates, which a client's JSON can carry, included), so the cell's text is data,
    never code of the turn itself, and the guest's turn runner takes it apart without
    compiling the turn (a compile was a tenth of a trivial cell's guest instructions); any
    other runner evaluates it as the expression it is. With it comes the hash that names the
    cell's file as ipykernel names it (`cell_hash`), which the guest would otherwise compute
    in WebAssembly: 0.8M instructions for a 25-line cell."""
    head, middle, tail, end = CELL_TURN
    data = code.encode("utf-8", "surrogatepass")
    return f"{head}{int(number)}{middle}{data.hex()}{tail}{cell_hash(data)}{end}"


def cell_hash(data: bytes) -> int:
    """MurmurHash2 (32-bit, Austin Appleby's) of a cell's UTF-8 with ipykernel's seed: the
    name of the file ipykernel compiles the cell as (its compiler.murmur2_x86; the guest's
    own is shell.murmur2, for a cell that does not come from the host)."""
    length = len(data)
    whole = length & ~3
    h = (CELL_NAME_SEED ^ length) & _WORD
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _MURMUR_M) & _WORD
        k = ((k ^ (k >> 24)) * _MURMUR_M) & _WORD
        h = ((h * _MURMUR_M) & _WORD) ^ k
    if length > whole:
        h = ((h ^ int.from_bytes(data[whole:], "little")) * _MURMUR_M) & _WORD
    h = ((h ^ (h >> 13)) * _MURMUR_M) & _WORD
    return h ^ (h >> 15)
