"""DaemonClientSandbox: a persistent sandboxed session held by the REPL daemon.

The same interface and behaviour as ReplSandbox (initialize, execute, get_variable, cancel,
destroy, usage): the session is a ReplSandbox in one of the daemon's warm worker processes
(see daemon.py), reached over its Unix socket. The client's callbacks stay here: stdout and
stderr lines, displays, and llm_query / rlm_query / input, which the worker asks for over the
same connection and this process answers (calls run on a small thread pool, so
llm_query_batched stays concurrent). cancel() is soft, then hard with rollback, as in process.

If the worker ends (it crashed, or the daemon was stopped), the execution that was running
returns an error saying the session was lost; the next call opens a new session (the context
is loaded again) or raises DaemonUnavailable when no daemon answers. No wait is unbounded: a
request's answer is awaited for the cell's time limit plus its interrupt grace plus a margin.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from sandbox_kernel.core.errors import SandboxExecutionError
from sandbox_kernel.repl.base import ReplBackend
from sandbox_kernel.repl.daemon import daemon_answers
from sandbox_kernel.repl.daemon.protocol import (
    CALLBACKS,
    DATA_FIELDS,
    DaemonUnavailable,
    FrameError,
    default_socket,
    encode_context,
    exchange,
    read_frame,
    send_frame,
)
from sandbox_kernel.repl.models import (
    CodeExecution,
    DisplayMessage,
    ExecutionStatus,
    REPLConfig,
)
from sandbox_kernel.repl.results import UsageReading

__all__ = ["DaemonClientSandbox"]

_CONNECT_SECONDS: Final = 5.0
_OPEN_SECONDS: Final = 300.0  # a daemon with a cold cache warms its first worker (~1 min)
_MARGIN_SECONDS: Final = 60.0  # past a request's own limits: restore, rebuild, a busy host
_SLICE_SECONDS: Final = 0.5
_LOST_NOTE: Final = (
    "the daemon's worker for this session ended, so the session and its variables are lost "
    "(files written under /app were kept); the next call opens a new session"
)


class _Lost(Exception):
    """The connection to the worker ended."""


class DaemonClientSandbox(ReplBackend):
    """A persistent sandboxed Python session in the REPL daemon (backend="daemon")."""

    sandboxed = True

    def __init__(self, config: REPLConfig | None = None) -> None:
        self.config = config if config is not None else REPLConfig()
        self.socket_path = (self.config.daemon_socket or default_socket()).expanduser()
        policy = self.config.policy
        root = self.config.workspace if self.config.workspace else policy.mount_host_dir
        self.workspace = Path(root).expanduser().resolve()
        self._lock = threading.RLock()
        self._send_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self._context: object = None
        self._initialized = False
        self._running = threading.Event()
        self._destroyed = False
        self._calls = concurrent.futures.ThreadPoolExecutor(
            self.config.llm_concurrency, "sandbox-kernel-daemon-call"
        )
        self.worker_pid: int | None = None
        self.sessions_opened = 0

    @staticmethod
    def available(path: Path | None = None, timeout: float = 1.0) -> bool:
        """Whether a daemon of this user answers at `path` (default ~/.rlm/daemon.sock)."""
        return daemon_answers(path, timeout)

    # -- lifecycle -----------------------------------------------------------------------------

    def initialize(self, context: object = None) -> None:
        """Open the session (once) and bind `context` inside it."""
        with self._lock:
            self._check_usable()
            self._context = context
            try:
                self._request("initialize", {"context": encode_context(context)}, _OPEN_SECONDS)
            except _Lost as exc:
                raise DaemonUnavailable(f"{_LOST_NOTE} ({exc})") from None
            self._initialized = True

    def destroy(self) -> None:
        """End the session (its worker exits); the object cannot run again."""
        with self._lock:
            if self._destroyed:
                return
            self._destroyed = True
            if self._sock is not None:
                with contextlib.suppress(_Lost, SandboxExecutionError):
                    self._request("destroy", {}, _CONNECT_SECONDS)
                self._close()
            self._calls.shutdown(wait=False, cancel_futures=True)

    def _check_usable(self) -> None:
        if self._destroyed:
            raise SandboxExecutionError("this session was destroyed")

    # -- the connection ------------------------------------------------------------------------

    def _connection(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        names = [name for name in CALLBACKS if self._callback(name) is not None]
        request = {"op": "open", "config": self._wire_config(), "callbacks": names}
        sock, answer = exchange(self.socket_path, request, _CONNECT_SECONDS, _OPEN_SECONDS)
        if answer is None or answer.get("op") != "ready":
            sock.close()
            detail = answer.get("message") if answer else "it closed the connection"
            raise DaemonUnavailable(f"the daemon could not open a session: {detail}")
        sock.settimeout(_SLICE_SECONDS)
        self._sock = sock
        self.worker_pid = answer.get("pid")
        self.sessions_opened += 1
        return sock

    def _wire_config(self) -> dict[str, Any]:
        data = self.config.model_dump(mode="json", include=set(DATA_FIELDS))
        data["workspace"] = str(self.workspace)
        if self.config.notebook_dir is not None:
            data["notebook_dir"] = str(Path(self.config.notebook_dir).expanduser().resolve())
        return data

    def _callback(self, name: str) -> Callable[..., Any] | None:
        callback: Callable[..., Any] | None = getattr(self.config, f"on_{name}")
        return callback

    def _close(self) -> None:
        sock, self._sock = self._sock, None
        self._initialized = False
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _send(self, sock: socket.socket, message: dict[str, Any]) -> None:
        try:
            with self._send_lock:
                send_frame(sock, message)
        except OSError as exc:
            raise _Lost(str(exc)) from None

    # -- requests ------------------------------------------------------------------------------

    def _request(
        self,
        op: str,
        fields: dict[str, Any],
        limit_seconds: float,
        streams: dict[str, Callable[[str], None] | None] | None = None,
    ) -> Any:
        """Send one request and serve what the worker sends until its answer."""
        sock = self._connection()
        request_id = next(self._ids)
        self._send(sock, {"op": op, "id": request_id, **fields})
        deadline = time.monotonic() + limit_seconds
        while True:
            try:
                message = read_frame(sock)
            except TimeoutError:
                if time.monotonic() >= deadline:
                    self._close()
                    raise _Lost(f"no answer within {limit_seconds:g} s") from None
                continue
            except (OSError, FrameError) as exc:
                self._close()
                raise _Lost(str(exc)) from None
            if message is None:
                self._close()
                raise _Lost("the worker closed the connection")
            if message.get("id") == request_id and message["op"] in {"result", "error"}:
                if message["op"] == "error":
                    _raise(message)
                return message.get("value")
            self._serve(sock, message, streams or {})

    def _serve(
        self,
        sock: socket.socket,
        message: dict[str, Any],
        streams: dict[str, Callable[[str], None] | None],
    ) -> None:
        """What the worker sends while a request runs: output, displays, calls."""
        op = message["op"]
        if op in {"stdout", "stderr"}:
            callback = streams.get(op) or self._callback(op)
            if callback is not None:
                with contextlib.suppress(Exception):  # a failing stream callback is detached
                    callback(str(message.get("line", "")))
        elif op == "display" and self.config.on_display is not None:
            self.config.on_display(message.get("data") or {}, message.get("metadata") or {})
        elif op == "display_message" and self.config.on_display_message is not None:
            self.config.on_display_message(DisplayMessage.model_validate(message.get("message")))
        elif op == "clear_output" and self.config.on_clear_output is not None:
            self.config.on_clear_output(bool(message.get("wait")))
        elif op == "call":
            self._calls.submit(self._answer_call, sock, message)

    def _answer_call(self, sock: socket.socket, message: dict[str, Any]) -> None:
        name, args = message.get("name"), message.get("args")
        callback = (
            self._callback(str(name)) if name in {"llm_query", "rlm_query", "input"} else None
        )
        answer: dict[str, Any] = {"op": "answer", "call": message.get("call")}
        try:
            if callback is None or not isinstance(args, list):
                raise ValueError(f"no callback {name!r}")
            answer["value"] = callback(*args)
        except Exception as exc:
            answer["error"] = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(_Lost, FrameError):
            self._send(sock, answer)

    # -- executions ----------------------------------------------------------------------------

    def execute(
        self,
        code: str,
        *,
        on_stdout: Callable[[str], None] | None = None,
        on_stderr: Callable[[str], None] | None = None,
    ) -> CodeExecution:
        """Run one cell in the daemon's session; a CodeExecution comes back whatever happens
        (a lost worker included). DaemonUnavailable when no daemon answers."""
        if not isinstance(code, str):
            raise TypeError(f"code must be str, not {type(code).__name__}")
        reading = UsageReading(self.config.llm_usage)
        with self._lock:
            self._check_usable()
            if not self._initialized:
                self.initialize(self._context)
            limit = self._limit_seconds()
            started = time.perf_counter()
            self._running.set()
            try:
                value = self._request(
                    "execute", {"code": code}, limit, {"stdout": on_stdout, "stderr": on_stderr}
                )
            except _Lost as exc:
                return CodeExecution(
                    status=ExecutionStatus.ERROR,
                    error=f"SandboxSessionLost: {_LOST_NOTE} ({exc})",
                    ename="SandboxSessionLost",
                    evalue=f"{_LOST_NOTE} ({exc})",
                    duration_ms=(time.perf_counter() - started) * 1000,
                )
            finally:
                self._running.clear()
        return reading.attach(CodeExecution.model_validate(value))

    def _limit_seconds(self) -> float:
        config = self.config
        return config.policy.timeout_seconds + config.interrupt_grace_seconds + _MARGIN_SECONDS

    def cancel(self) -> bool:
        """Interrupt the running execution (soft now, hard with rollback after the grace).
        False when nothing runs."""
        sock = self._sock
        if sock is None or not self._running.is_set():
            return False
        try:
            self._send(sock, {"op": "cancel"})
        except _Lost:
            return False
        return True

    def get_variable(self, name: str) -> Any:
        """The variable's value as plain Python (JSON-able; DataFrames as records), or None."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"not a variable name: {name!r}")
        return self._call_session("get_variable", {"name": name})

    def usage(self) -> dict[str, Any]:
        """The session's usage, as ReplSandbox.usage() reports it in the worker."""
        value = self._call_session("usage", {})
        return dict(value) if isinstance(value, dict) else {}

    def _configure(self, config: REPLConfig) -> None:
        """New limits reach the worker's session before the next execution (they travel
        with the policy; the worker refuses one that would move the session's folders)."""
        self.config = config
        if self._initialized:
            self._call_session("limits", {"policy": config.policy.model_dump(mode="json")})

    def _call_session(self, op: str, fields: dict[str, Any]) -> Any:
        with self._lock:
            self._check_usable()
            if not self._initialized:
                self.initialize(self._context)
            try:
                return self._request(op, fields, self._limit_seconds())
            except _Lost as exc:
                raise DaemonUnavailable(f"{_LOST_NOTE} ({exc})") from None


def _raise(message: dict[str, Any]) -> None:
    text = str(message.get("message", "the daemon refused the request"))
    if message.get("type") == "ValueError":
        raise ValueError(text)
    raise SandboxExecutionError(text)
