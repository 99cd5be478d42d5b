"""The native backend's child process: its four pipes, JSON-RPC framing and lifetime.

One `Child` is one plain CPython interpreter running native/child.py: two pipes carry JSON-RPC
2.0 (requests parent -> child, replies child -> parent), two carry its fd 1 and 2. The reading
side multiplexes them with selectors and drains output before acting on any message, so
output stays in order with displays. UNSAFE like the backend it serves: no sandbox.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_kernel.core.output import CappedStream
from sandbox_kernel.core.stops import StopTurn
from sandbox_kernel.repl.native import child as rpc

__all__ = ["CHILD", "DRIVER", "SLICE_SECONDS", "Child", "Ended", "python_child"]

CHILD = Path(__file__).resolve().with_name("child.py")
DRIVER = Path(__file__).resolve().parents[2] / "guest" / "driver.py"
SLICE_SECONDS = 0.02  # how soon a cancel or the deadline is noticed
_READ_BYTES = 1 << 20
_DRAIN_READS = 64  # per output pipe per message: a thread that never stops printing can't hold us
_EXIT_GRACE_SECONDS = 1.0  # destroy(): time to exit by itself before SIGKILL


@dataclass
class Ended:
    """How one conversation with the child ended: the awaited message, or why it was cut."""

    result: Any = None
    error: Any = None  # a JSON-RPC error object
    stop: str | None = None  # "timeout", "cancelled" or "exited"


def python_child(requests_fd: int, replies_fd: int) -> list[str]:
    """The native backend's command: a plain CPython running native/child.py."""
    return [sys.executable, "-u", "-P", str(CHILD), str(DRIVER), str(requests_fd), str(replies_fd)]


class Child:
    """One child interpreter: the process, its two JSON-RPC pipes and its two output pipes.

    `command(requests_fd, replies_fd)` is the child's argv: a plain CPython (python_child) or
    Node.js running Pyodide (repl/pyodide.py); both speak native/child.py's protocol."""

    def __init__(
        self,
        cwd: Path,
        env: Mapping[str, str],
        command: Callable[[int, int], list[str]] = python_child,
    ) -> None:
        ends: list[int] = []
        try:
            requests_r, self._requests = _pipe(ends)
            self._replies, replies_w = _pipe(ends)
            self._stdout, stdout_w = _pipe(ends)
            self._stderr, stderr_w = _pipe(ends)
            fds = (requests_r, replies_w)
            argv = command(*fds)
            self.process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=stdout_w,
                stderr=stderr_w,
                pass_fds=fds,
                start_new_session=True,  # a terminal's Ctrl-C is not a cancel; kill takes all
            )
        except BaseException:
            for fd in ends:
                os.close(fd)
            raise
        for fd in (requests_r, replies_w, stdout_w, stderr_w):
            os.close(fd)
        self.streams = {
            self._stdout: CappedStream("stdout", 0),
            self._stderr: CappedStream("stderr", 0),
        }
        self._outputs = [self._stdout, self._stderr]  # those not at EOF
        self._selector = selectors.DefaultSelector()
        for fd in (self._replies, self._stdout, self._stderr):
            os.set_blocking(fd, False)
            self._selector.register(fd, selectors.EVENT_READ)
        self._buffer = bytearray()
        self._scanned = 0
        self.eof = False
        self._closed = False

    def route(self, stdout: CappedStream, stderr: CappedStream) -> None:
        self.streams = {self._stdout: stdout, self._stderr: stderr}

    def interrupt(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGINT)

    # -- the pipes -----------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        """Write one message (blocking: the child reads whenever it waits for one)."""
        line = json.dumps({"jsonrpc": rpc.JSONRPC, **message}, ensure_ascii=False)
        data = memoryview(line.encode("utf-8") + b"\n")
        while data:
            data = data[os.write(self._requests, data) :]

    def _receive(self, timeout: float) -> bytes | None:
        """The next message line; None when `timeout` passed or the pipe is at EOF."""
        until = time.monotonic() + timeout
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                self._scanned = 0
                self._drain_outputs()
                return line
            self._scanned = len(self._buffer)
            left = until - time.monotonic()
            if self.eof or left <= 0:
                self._drain_outputs()
                return None
            for key, _ in self._selector.select(left):
                if key.fd == self._replies:
                    self._read_replies()
                else:
                    self._read_output(key.fd)

    def _read_replies(self) -> None:
        try:
            chunk = os.read(self._replies, _READ_BYTES)
        except BlockingIOError:
            return
        if chunk:
            self._buffer += chunk
        else:
            self.eof = True
            self._selector.unregister(self._replies)

    def _read_output(self, fd: int) -> bool:
        """One read from an output pipe into its stream; False when nothing more is there."""
        try:
            chunk = os.read(fd, _READ_BYTES)
        except BlockingIOError:
            return False
        if not chunk:
            self._outputs.remove(fd)
            self._selector.unregister(fd)
            return False
        self.streams[fd].write(chunk)
        return len(chunk) == _READ_BYTES

    def _drain_outputs(self) -> None:
        for fd in list(self._outputs):
            for _ in range(_DRAIN_READS):
                if not self._read_output(fd):
                    break

    # -- conversations -------------------------------------------------------------------

    def converse(
        self, expect: int | str, door: Callable[[bytes], bytes], stop: Callable[[], str | None]
    ) -> Ended:
        """Answer the child's door calls until the response to request `expect` (an id) or
        the notification `expect` (a method) comes, `stop` names a reason, or the child ends."""
        while (reason := stop()) is None:
            line = self._receive(SLICE_SECONDS)
            if line is None:
                if self.eof:
                    return Ended(stop="exited")
                continue
            try:
                ended = self._handle(line, expect, door)
            except StopTurn as stopped:
                return Ended(stop=stopped.reason)
            except OSError:  # the child is gone: an answer could not be written
                return Ended(stop="exited")
            if ended is not None:
                return ended
        return Ended(stop=reason)

    def _handle(
        self, line: bytes, expect: int | str, door: Callable[[bytes], bytes]
    ) -> Ended | None:
        """One message: the awaited one ends the conversation; door calls are answered."""
        message = self._parse(line)
        if message is None:
            return None
        if "method" not in message:
            if message.get("id") == expect:
                return Ended(message.get("result"), message.get("error"))
            return None  # a response nobody waits for
        if message.get("method") == expect:
            return Ended(message.get("params"))
        self._answer(message, door)
        return None

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        try:
            message = json.loads(line)
        except ValueError as exc:
            self._error(None, rpc.PARSE_ERROR, f"parse error: {exc}")
            return None
        if not isinstance(message, dict):
            self._error(None, rpc.INVALID_REQUEST, "a message is a JSON object")
            return None
        return message

    def _answer(self, message: dict[str, Any], door: Callable[[bytes], bytes]) -> None:
        request_id, method = message.get("id"), message.get("method")
        if message.get("jsonrpc") != rpc.JSONRPC or not isinstance(method, str):
            self._error(request_id, rpc.INVALID_REQUEST, "not a JSON-RPC 2.0 request")
            return
        if "id" not in message:
            return  # a notification nobody waits for
        if method != rpc.Method.DOOR:
            self._error(request_id, rpc.METHOD_NOT_FOUND, f"no method {method!r}")
            return
        params = message.get("params")
        text = params.get("frame") if isinstance(params, dict) else None
        try:
            frame = base64.b64decode(text if isinstance(text, str) else "-", validate=True)
        except ValueError:
            self._error(request_id, rpc.INVALID_PARAMS, "door needs params.frame, base64")
            return
        try:
            answer = door(frame)
        except StopTurn:
            raise
        except Exception as exc:  # a malformed request the bridge choked on
            self._error(request_id, rpc.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            return
        self.send({"id": request_id, "result": base64.b64encode(answer).decode("ascii")})

    def _error(self, request_id: Any, code: int, text: str) -> None:
        self.send({"id": request_id, "error": {"code": code, "message": text}})

    # -- the end -------------------------------------------------------------------------

    def close(self, kill: bool) -> int | None:
        """End the process (at once when `kill`, else after a grace to exit by itself), and
        everything it started; reap it and close the pipes. Its exit code."""
        if self._closed:
            return self.process.returncode
        self._closed = True
        os.close(self._requests)  # EOF: the child's serve loop returns
        if not kill:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(_EXIT_GRACE_SECONDS)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        code = self.process.wait()
        self._selector.close()
        for fd in (self._replies, self._stdout, self._stderr):
            os.close(fd)
        return code


def _pipe(ends: list[int]) -> tuple[int, int]:
    read, write = os.pipe()
    ends += [read, write]
    return read, write
