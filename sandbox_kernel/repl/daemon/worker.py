"""A daemon worker: one process, warmed before it is needed, that serves one client session.

    python -m sandbox_kernel.repl.daemon.worker CONTROL_FD

At start the worker warms itself (wasmtime imported, the compiled guest mapped from the disk
cache, the warm image restored once and a cell run), then says {"op": "warm"} on its control
socket to the daemon and waits. The daemon hands it a client's connection (SCM_RIGHTS) with
that client's `open` frame; the worker starts a ReplSandbox for the client's configuration
(from the warm image: tens of ms) and serves it until the client destroys the session or
leaves; then it exits. One session per process: nothing of one client's session reaches the
next. An idle worker whose daemon is gone (its control socket at EOF) exits.

While a request runs, a reader thread takes the client's next frames: `cancel` reaches the
session at once (soft, then hard with rollback), answers complete the callbacks waiting for
them, and a client that leaves cancels the running cell and ends the worker.

Must not import: anything Jupyter.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import json
import logging
import os
import queue
import socket
import struct
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.repl.daemon.protocol import (
    CALLBACKS,
    DATA_FIELDS,
    SPEC_FIELDS,
    FrameError,
    decode_context,
    read_frame,
    send_frame,
)
from sandbox_kernel.repl.models import DisplayMessage, REPLConfig
from sandbox_kernel.repl.sandbox import ReplSandbox

__all__ = ["WorkerSession", "main"]

logger = logging.getLogger("sandbox_kernel")

_SLACK_SECONDS: Final = 5.0  # past the cell's own time limit and grace, the client is gone
_MAX_HANDOFF_BYTES: Final = 1 << 20


class _ClientGone(Exception):
    pass


class WorkerSession:
    """One client's session: the connection, the ReplSandbox, the calls awaiting answers."""

    def __init__(self, conn: socket.socket, request: dict[str, Any]) -> None:
        self.conn = conn
        self._send_lock = threading.Lock()
        self._calls: dict[int, concurrent.futures.Future[Any]] = {}
        self._call_ids = itertools.count(1)
        self._requests: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.gone = threading.Event()
        self.config = self._config(request)
        self.sandbox = ReplSandbox(self.config)
        # How long the worker waits on its client (an answer to a call, room for a send): the
        # cell's whole time limit, its grace and a slack. A client that stops reading must not
        # hold the worker in a send forever: past this it counts as gone.
        config = self.config
        grace = config.interrupt_grace_seconds
        self.patience = config.policy.timeout_seconds + grace + _SLACK_SECONDS
        timeval = struct.pack("ll", max(1, round(self.patience)), 0)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)

    # -- configuration -----------------------------------------------------------------------

    def _config(self, request: dict[str, Any]) -> REPLConfig:
        data = request.get("config")
        names = request.get("callbacks")
        if not isinstance(data, dict) or not isinstance(names, list):
            raise FrameError("open needs config (an object) and callbacks (a list)")
        unknown = set(data) - DATA_FIELDS - SPEC_FIELDS
        if unknown:
            raise FrameError(f"open: unknown config fields {sorted(unknown)}")
        callbacks: dict[str, Any] = {}
        for name in names:
            if name not in CALLBACKS:
                raise FrameError(f"open: no callback {name!r}")
            callbacks[f"on_{name}"] = self._callback(name)
        try:
            return REPLConfig.model_validate({**data, **callbacks, "backend": "wasm"})
        except ValidationError as exc:
            raise FrameError(f"open: bad config: {exc}") from None

    def _callback(self, name: str) -> Callable[..., Any]:
        if name in {"stdout", "stderr"}:
            return lambda line: self.send({"op": name, "line": line})
        if name == "display":
            return lambda data, metadata: self.send(
                {"op": "display", "data": data, "metadata": metadata}
            )
        if name == "display_message":
            return lambda message: self.send(
                {"op": "display_message", "message": DisplayMessage.model_dump(message)}
            )
        if name == "clear_output":
            return lambda wait: self.send({"op": "clear_output", "wait": bool(wait)})
        return lambda *args: self._call(name, list(args))

    # -- the connection ------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        if self.gone.is_set():
            raise _ClientGone
        try:
            with self._send_lock:
                send_frame(self.conn, message)
        except OSError:
            self._lost()
            raise _ClientGone from None

    def _call(self, name: str, args: list[Any]) -> Any:
        """A callback of the client's: ask, and wait for its answer (at most `patience`; the
        bridge gives up sooner, at the deadline or a cancel)."""
        call = next(self._call_ids)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls[call] = future
        try:
            self.send({"op": "call", "call": call, "name": name, "args": args})
            return future.result(timeout=self.patience)
        except _ClientGone:
            raise ConnectionError("the client left") from None
        finally:
            self._calls.pop(call, None)

    def _read(self) -> None:
        """The reader thread: requests to the queue, cancel and answers at once."""
        try:
            while True:
                try:
                    message = read_frame(self.conn)
                except FrameError as exc:
                    with contextlib.suppress(_ClientGone):
                        self.send({"op": "error", "type": "ValueError", "message": str(exc)})
                    if exc.fatal:
                        break
                    continue
                if message is None:
                    break
                op = message["op"]
                if op == "cancel":
                    self.sandbox.cancel()
                elif op == "answer":
                    self._answered(message)
                else:
                    self._requests.put(message)
        except OSError:
            pass
        self._lost()

    def _answered(self, message: dict[str, Any]) -> None:
        future = self._calls.get(message.get("call"))  # type: ignore[arg-type]
        if future is None or future.done():
            return  # a late answer to a call the bridge gave up on
        if "error" in message:
            future.set_exception(RuntimeError(str(message["error"])))
        else:
            future.set_result(message.get("value"))

    def _lost(self) -> None:
        """The client left: stop the running cell, fail the waiting calls, end the loop."""
        if self.gone.is_set():
            return
        self.gone.set()
        self.sandbox.cancel()
        for future in list(self._calls.values()):
            if not future.done():
                future.set_exception(ConnectionError("the client left"))
        self._requests.put(None)

    # -- requests ------------------------------------------------------------------------------

    def serve(self) -> None:
        reader = threading.Thread(target=self._read, name="sandbox-kernel-client", daemon=True)
        reader.start()
        try:
            self.send({"op": "ready", "pid": os.getpid()})
            while (request := self._requests.get()) is not None:
                if not self._handle(request):
                    break
        except _ClientGone:
            pass
        finally:
            self.sandbox.destroy()
            with contextlib.suppress(OSError):
                self.conn.close()

    def _set_limits(self, policy: ExecutionPolicy) -> None:
        """The client's new limits; the session's folders and environment stay as opened."""
        self.sandbox.set_limits(self.sandbox.config.policy.with_limits_of(policy))
        self.patience = policy.timeout_seconds + self.sandbox.config.interrupt_grace_seconds
        self.patience += _SLACK_SECONDS

    def _handle(self, request: dict[str, Any]) -> bool:
        """Run one request and answer it; False after destroy."""
        op, request_id = request["op"], request.get("id")
        try:
            value, more = self._run(op, request)
        except _ClientGone:
            raise
        except (FrameError, ValueError, TypeError) as exc:
            self.send({"op": "error", "id": request_id, "type": "ValueError", "message": str(exc)})
            return True
        except Exception as exc:  # the session failed: the client hears of it
            message = f"{type(exc).__name__}: {exc}"
            self.send({"op": "error", "id": request_id, "type": "RuntimeError", "message": message})
            return True
        self.send({"op": "result", "id": request_id, "value": value})
        return more

    def _run(self, op: str, request: dict[str, Any]) -> tuple[Any, bool]:
        if op == "initialize":
            self.sandbox.initialize(decode_context(request.get("context")))
            return True, True
        if op == "execute":
            code = request.get("code")
            if not isinstance(code, str):
                raise TypeError("execute needs code, a str")
            return self.sandbox.execute(code).model_dump(mode="json"), True
        if op == "get_variable":
            return self.sandbox.get_variable(str(request.get("name"))), True
        if op == "usage":
            return self.sandbox.usage(), True
        if op == "limits":
            self._set_limits(ExecutionPolicy.model_validate(request.get("policy")))
            return True, True
        if op == "destroy":
            return True, False
        raise ValueError(f"no request {op!r}")


def _warm_up() -> None:
    """Everything a first session needs, loaded once before any client waits for it."""
    with (
        tempfile.TemporaryDirectory(prefix="sandbox-kernel-daemon-warm-") as folder,
        ReplSandbox(REPLConfig(workspace=Path(folder))) as sandbox,
    ):
        sandbox.execute("1")


def _serve_one(control: socket.socket) -> int:
    message, fds, _flags, _address = socket.recv_fds(control, _MAX_HANDOFF_BYTES, 1)
    if not fds:
        return 0  # the daemon is gone (EOF) or stopping: nothing to serve
    conn = socket.socket(fileno=fds[0])
    try:
        request = json.loads(message.decode("utf-8"))
        session = WorkerSession(conn, request)
    except (ValueError, FrameError) as exc:
        with contextlib.suppress(OSError):
            send_frame(conn, {"op": "error", "type": "ValueError", "message": str(exc)})
        conn.close()
        return 0
    session.serve()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m sandbox_kernel.repl.daemon.worker CONTROL_FD", file=sys.stderr)
        return 2
    control = socket.socket(fileno=int(argv[1]))
    _warm_up()
    send_frame(control, {"op": "warm", "pid": os.getpid()})
    return _serve_one(control)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
