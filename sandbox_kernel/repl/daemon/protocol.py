"""The daemon's wire format, shared by the daemon, its workers and DaemonClientSandbox.

A frame is a 4-byte big-endian length, then that many bytes of one UTF-8 JSON object with an
"op". Frames larger than MAX_FRAME_BYTES are refused before their body is read (the sender is
told, and the connection closed: a stream cannot be resynchronised past an unread body).

Client -> daemon, the first frame of every connection:

    open     {"config": {...}, "callbacks": [name, ...]}   a session; the daemon hands the
             connection to a warm worker, which answers {"op": "ready", "pid": p}. The
             config's fields are DATA_FIELDS, and the specification's names SPEC_FIELDS
             (`timeout` and `timeout_ms` in milliseconds, `max_output_length`), which set
             the policy as REPLConfig reads them (a conflict with the policy is refused)
    status   {}        -> {"op": "status", ...} (pid, workers, sessions, socket)
    shutdown {}        -> {"op": "bye"}; the daemon stops its workers and exits

Client -> worker (after ready); each request has an "id", answered by {"op": "result",
"id": n, "value": ...} or {"op": "error", "id": n, "type": T, "message": M}:

    initialize {"context": <value>}     execute {"code": c}     get_variable {"name": n}
    usage {}                            destroy {}  (then the worker exits)

and, at any time: cancel {} (no answer), answer {"call": k, "value": v} or
{"call": k, "error": message} (to a call below).

Worker -> client, while a request runs: stdout / stderr {"line": text}; display {"data",
"metadata"}; display_message {DisplayMessage}; clear_output {"wait": bool}; and call {"call":
k, "name": "llm_query" | "rlm_query" | "input", "args": [...]}, which the client answers with
its own callback.

A context travels as {"kind": "none" | "str" | "json" | "bytes", "value": v} (bytes in base64).

Both ends check the peer: a Unix socket's SO_PEERCRED must name this process's own uid.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any, Final

from sandbox_kernel.core.errors import SandboxExecutionError

__all__ = [
    "CALLBACKS",
    "DATA_FIELDS",
    "MAX_FRAME_BYTES",
    "DaemonUnavailable",
    "FrameError",
    "connect",
    "decode_context",
    "default_socket",
    "encode_context",
    "exchange",
    "peer_uid",
    "read_frame",
    "same_user",
    "send_frame",
]

MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
_HEADER: Final = struct.Struct(">I")

# REPLConfig's fields that travel from the client (data; callbacks stay with the client).
DATA_FIELDS: Final = frozenset(
    {
        "policy",
        "workspace",
        "warm_start_modules",
        "interrupt_grace_seconds",
        "max_bridge_calls",
        "max_bridge_bytes",
        "llm_concurrency",
        "ipython",
        "packages",
        "max_package_bytes",
        "package_index_url",
        "stream_partial_lines",
        "notebook_dir",
        "notebook_overlay",
    }
)
# The specification's names for the policy's limits, accepted in `open` as REPLConfig
# accepts them (repl/models.py: spec_names_to_policy).
SPEC_FIELDS: Final = frozenset({"timeout", "timeout_ms", "max_output_length"})
# The client's callbacks the worker stands in for (REPLConfig's on_<name>).
CALLBACKS: Final = (
    "stdout",
    "stderr",
    "llm_query",
    "rlm_query",
    "input",
    "display",
    "display_message",
    "clear_output",
)


class FrameError(ValueError):
    """A frame that is malformed or too large (`fatal`: the stream cannot go on)."""

    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class DaemonUnavailable(SandboxExecutionError):
    """No daemon answers at the socket, or it stopped, or its worker died."""


def default_socket() -> Path:
    """~/.rlm/daemon.sock, the seed's path."""
    return Path.home() / ".rlm" / "daemon.sock"


def send_frame(sock: socket.socket, message: dict[str, Any]) -> None:
    body = json.dumps(message, ensure_ascii=False).encode("utf-8")
    if len(body) > MAX_FRAME_BYTES:
        raise FrameError(f"a frame of {len(body):,} bytes is over {MAX_FRAME_BYTES:,}")
    sock.sendall(_HEADER.pack(len(body)) + body)


def read_frame(sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES) -> dict[str, Any] | None:
    """The next frame; None at a clean EOF (between frames).

    Raises:
        FrameError: a frame over `max_bytes` (fatal), cut short (fatal), or not a JSON
            object with a string "op" (the stream goes on).
    """
    header = _read_exactly(sock, _HEADER.size, eof_ok=True)
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    if length > max_bytes:
        raise FrameError(f"a frame of {length:,} bytes is over {max_bytes:,}", fatal=True)
    body = _read_exactly(sock, length, eof_ok=False) or b""
    try:
        message = json.loads(body.decode("utf-8"))
    except RecursionError:
        raise FrameError("a frame is nested too deeply") from None
    except ValueError as exc:
        raise FrameError(f"a frame is not UTF-8 JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise FrameError('a frame is a JSON object with an "op"')
    return message


def _read_exactly(sock: socket.socket, count: int, *, eof_ok: bool) -> bytes | None:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(min(count - len(data), 1 << 20))
        if not chunk:
            if eof_ok and not data:
                return None
            raise FrameError("the connection closed inside a frame", fatal=True)
        data += chunk
    return bytes(data)


def connect(path: Path, timeout: float) -> socket.socket:
    """A connection to the Unix socket at `path`, its timeout set to `timeout`. A full
    backlog (the daemon flooded) is waited out, not taken for an absent daemon.

    Raises:
        OSError: nothing listens there (FileNotFoundError, ConnectionRefusedError), or the
            backlog stayed full for `timeout` seconds (TimeoutError).
    """
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
            return sock
        except BlockingIOError:
            sock.close()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the daemon at {path} stayed too busy to connect") from None
            time.sleep(0.01)
        except BaseException:
            sock.close()
            raise


def exchange(
    path: Path, request: dict[str, Any], timeout: float, answer_timeout: float | None = None
) -> tuple[socket.socket, dict[str, Any] | None]:
    """Connect to the daemon at `path` (it must run as this user), send `request` and read
    the first answer (within `answer_timeout`, default `timeout`); the socket stays open.

    Raises:
        DaemonUnavailable: nothing answers there, it runs as another user, or it broke off.
    """
    try:
        sock = connect(path, timeout)
    except OSError as exc:
        raise DaemonUnavailable(f"no daemon answers at {path}: {exc}") from None
    try:
        if not same_user(sock):
            raise DaemonUnavailable(f"the daemon at {path} runs as another user")
        send_frame(sock, request)
        sock.settimeout(answer_timeout if answer_timeout is not None else timeout)
        return sock, read_frame(sock)
    except (OSError, FrameError) as exc:
        sock.close()
        raise DaemonUnavailable(f"no daemon answers at {path}: {exc}") from None
    except BaseException:
        sock.close()
        raise


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (Linux SO_PEERCRED)."""
    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return int(uid)


def same_user(sock: socket.socket) -> bool:
    return peer_uid(sock) == os.getuid()


def encode_context(value: object) -> dict[str, Any]:
    if value is None:
        return {"kind": "none", "value": None}
    if isinstance(value, str):
        return {"kind": "str", "value": value}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"kind": "bytes", "value": base64.b64encode(bytes(value)).decode("ascii")}
    return {"kind": "json", "value": value}


def decode_context(encoded: object) -> object:
    if not isinstance(encoded, dict) or encoded.get("kind") not in {"none", "str", "json", "bytes"}:
        raise FrameError("a context is {kind, value}")
    if encoded["kind"] == "bytes":
        return base64.b64decode(str(encoded.get("value", "")))
    return encoded.get("value")
