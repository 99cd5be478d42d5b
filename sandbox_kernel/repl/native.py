"""NativeReplSandbox: a persistent session in a plain CPython subprocess. UNSAFE: no sandbox.

For trusted code, and as the baseline benchmarks measure the sandbox against. Same API as
ReplSandbox, same cell driver (sandbox_kernel/guest/driver.py) and the same Bridge answering
its door, so results, displays, llm_query, input and sleep behave alike. What differs:

- Nothing is isolated: cells run as the host user, with the host's files, network and
  processes. Only the environment is trimmed (the policy's guest_env() plus PATH; never a
  SANDBOX_KERNEL_LLM_* variable). The working folder is the workspace (a host path, not /app).
- Memory is not limited and fuel is not metered (fuel_consumed is always 0).
- A hard stop (the cancel grace passed, the timeout, the process died) kills the process and
  starts a fresh one: the state is lost, never rolled back (rolled_back False, rollbacks 0).
- POSIX only: SIGINT is the soft interrupt and pipes are multiplexed with selectors.

How the child is wired (see native_child.py for its side): four pipes. Two carry JSON-RPC 2.0,
one object per line (REQUESTS parent -> child, REPLIES child -> parent), passed with pass_fds;
the child's fd 1 and 2 are the other two. The thread inside execute() multiplexes the three
pipes it reads; before it acts on any message it drains the output pipes, and everything the
child printed before sending that message is in them by then, so output stays in order with
displays and lands in the right execution. Callbacks (on_stdout, on_display, ...) therefore run
on the thread that called execute(), as REPLConfig promises. Output a cell's threads print
between executions waits in the pipe and goes to the next one.

Must not import: wasmtime (host/ does that), anything Jupyter.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_kernel.core.errors import SandboxExecutionError
from sandbox_kernel.host.output import CappedStream
from sandbox_kernel.host.session import StopTurn, TurnOutcome
from sandbox_kernel.repl import native_child as rpc
from sandbox_kernel.repl.bridges import Bridge, LineSplitter
from sandbox_kernel.repl.models import CodeExecution, ExecutionStatus, REPLConfig
from sandbox_kernel.repl.protocol import DRIVER_NAME
from sandbox_kernel.repl.results import execution_from_reply, stopped_execution

__all__ = ["NativeReplSandbox"]

logger = logging.getLogger("sandbox_kernel")

_CHILD = Path(__file__).resolve().with_name("native_child.py")
_DRIVER = Path(__file__).resolve().parent.parent / "guest" / "driver.py"
_SLICE_SECONDS = 0.02  # how soon a cancel or the deadline is noticed
_READ_BYTES = 1 << 20
_DRAIN_READS = 64  # per output pipe per message: a thread that never stops printing can't hold us
_SETUP_TIMEOUT_SECONDS = 300.0  # start, driver install, context, get_variable
_SETUP_OUTPUT_BYTES = 1_000_000
_EXIT_GRACE_SECONDS = 1.0  # destroy(): time to exit by itself before SIGKILL
_AFTER_REPLY_SECONDS = 5.0  # the cell reported; its turn must end soon after
_SECRET_PREFIX = "SANDBOX_KERNEL_LLM_"
_LOST_NOTE = (
    "the native session was restarted and its state was lost "
    "(files written in the workspace were kept)"
)


@dataclass
class _Ended:
    """How one conversation with the child ended: the awaited message, or why it was cut."""

    result: Any = None
    error: Any = None  # a JSON-RPC error object
    stop: str | None = None  # "timeout", "cancelled" or "exited"


class _Child:
    """One child interpreter: the process, its two JSON-RPC pipes and its two output pipes."""

    def __init__(self, cwd: Path, env: Mapping[str, str]) -> None:
        ends: list[int] = []
        try:
            requests_r, self._requests = _pipe(ends)
            self._replies, replies_w = _pipe(ends)
            self._stdout, stdout_w = _pipe(ends)
            self._stderr, stderr_w = _pipe(ends)
            fds = (requests_r, replies_w)
            argv = [sys.executable, "-u", "-P", str(_CHILD), str(_DRIVER), *map(str, fds)]
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
    ) -> _Ended:
        """Answer the child's door calls until the response to request `expect` (an id) or
        the notification `expect` (a method) comes, `stop` names a reason, or the child ends."""
        while (reason := stop()) is None:
            line = self._receive(_SLICE_SECONDS)
            if line is None:
                if self.eof:
                    return _Ended(stop="exited")
                continue
            try:
                ended = self._handle(line, expect, door)
            except StopTurn as stopped:
                return _Ended(stop=stopped.reason)
            except OSError:  # the child is gone: an answer could not be written
                return _Ended(stop="exited")
            if ended is not None:
                return ended
        return _Ended(stop=reason)

    def _handle(
        self, line: bytes, expect: int | str, door: Callable[[bytes], bytes]
    ) -> _Ended | None:
        """One message: the awaited one ends the conversation; door calls are answered."""
        message = self._parse(line)
        if message is None:
            return None
        if "method" not in message:
            if message.get("id") == expect:
                return _Ended(message.get("result"), message.get("error"))
            return None  # a response nobody waits for
        if message.get("method") == expect:
            return _Ended(message.get("params"))
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


class _WholeLines:
    """Feeds a LineSplitter whole lines only: a pipe read may cut a UTF-8 character in two."""

    def __init__(self, callback: Callable[[str], None]) -> None:
        self._splitter = LineSplitter(callback)
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        data = self._pending + chunk
        cut = data.rfind(b"\n") + 1
        self._pending = data[cut:]
        if cut:
            self._splitter.feed(data[:cut])

    def flush(self) -> None:
        self._splitter.feed(self._pending)
        self._pending = b""
        self._splitter.flush()


class NativeReplSandbox:
    """A persistent Python session in a plain CPython subprocess. UNSAFE: NOT A SANDBOX.

    Cells run with the host user's full rights; use it only for trusted code (and as the
    benchmarks' baseline). Memory is not limited and fuel is not metered. Same API as
    ReplSandbox; a hard stop restarts the process, losing the session's state.
    """

    sandboxed = False

    def __init__(self, config: REPLConfig | None = None) -> None:
        self.config = config if config is not None else REPLConfig()
        policy = self.config.policy
        root = self.config.workspace if self.config.workspace else policy.mount_host_dir
        self.workspace = Path(root).expanduser().resolve()
        self._lock = threading.RLock()
        self._child: _Child | None = None
        self._ids = itertools.count(1)
        self._context: object = None
        self._count = 0
        self._running = threading.Event()
        self._hard_requested = False
        self._escalation: threading.Timer | None = None
        self._destroyed = False
        self._warned = False
        self.rollbacks = 0  # never: state is not rolled back here
        self.restarts = 0
        self.bridge = Bridge(self.config, lambda: self._context)

    @property
    def pid(self) -> int | None:
        """The child process's id while one runs."""
        return self._child.process.pid if self._child is not None else None

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> NativeReplSandbox:
        self.initialize()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def initialize(self, context: object = None) -> None:
        """Start the child (once) and bind `context` inside it."""
        with self._lock:
            self._check_usable()
            self._context = context
            if self._child is None:
                self._start()
            self._setup_turn(f"{DRIVER_NAME}.load_context()")

    def _check_usable(self) -> None:
        if self._destroyed:
            raise SandboxExecutionError("this session was destroyed")

    def _start(self) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "the native REPL backend runs cells in a plain CPython process with NO "
                "sandbox (no isolation, no memory limit): use it only for trusted code"
            )
        self.workspace.mkdir(parents=True, exist_ok=True)
        child = _Child(self.workspace, self._env())
        stderr = CappedStream("stderr", _SETUP_OUTPUT_BYTES)
        child.route(CappedStream("stdout", _SETUP_OUTPUT_BYTES), stderr)
        ended = child.converse(
            rpc.Method.READY, self._door_for_setup(), _stop_after(_SETUP_TIMEOUT_SECONDS)
        )
        if ended.stop is not None:
            code = child.close(kill=True)
            detail = stderr.text().strip() or f"{ended.stop} (exit code {code})"
            raise SandboxExecutionError(f"the native Python session could not start: {detail}")
        self._child = child

    def _door_for_setup(self) -> Bridge:
        self.bridge.begin(_SETUP_TIMEOUT_SECONDS)
        return self.bridge

    def _env(self) -> dict[str, str]:
        env = dict(self.config.policy.guest_env())
        env.setdefault("PATH", os.environ.get("PATH", os.defpath))
        return {k: v for k, v in env.items() if not k.upper().startswith(_SECRET_PREFIX)}

    def _setup_turn(self, source: str) -> None:
        """A turn of ours (context, get_variable): it must succeed."""
        child = self._live()
        stderr = CappedStream("stderr", _SETUP_OUTPUT_BYTES)
        child.route(CappedStream("stdout", _SETUP_OUTPUT_BYTES), stderr)
        door = self._door_for_setup()
        ended = self._turn(child, source, door, _stop_after(_SETUP_TIMEOUT_SECONDS))
        if ended.stop is None and ended.error is None:
            return
        if ended.stop is not None:
            self._discard(kill=True)  # the next execute() starts a fresh process
            detail = (
                "the process exited"
                if ended.stop == "exited"
                else f"no answer within {_SETUP_TIMEOUT_SECONDS:g} s"
            )
        else:
            detail = str(ended.error.get("message") if isinstance(ended.error, dict) else "")
        detail = f"{detail}\n{stderr.text()}".strip()
        raise SandboxExecutionError(f"the native session failed at {source!r}: {detail}")

    def _turn(
        self, child: _Child, source: str, door: Bridge, stop: Callable[[], str | None]
    ) -> _Ended:
        request_id = next(self._ids)
        try:
            child.send({"id": request_id, "method": rpc.Method.TURN, "params": {"source": source}})
        except OSError:
            return _Ended(stop="exited")
        return child.converse(request_id, door, stop)

    def _live(self) -> _Child:
        self._check_usable()
        if self._child is None:
            raise SandboxExecutionError("the session is not initialized")
        return self._child

    def _discard(self, kill: bool) -> int | None:
        child, self._child = self._child, None
        return child.close(kill) if child is not None else None

    def destroy(self) -> None:
        """End the child and everything it started; the session cannot run again."""
        with self._lock:
            timer, self._escalation = self._escalation, None
            if timer is not None:
                timer.cancel()
                timer.join()
            self._discard(kill=False)
            self._destroyed = True

    # -- executions --------------------------------------------------------------------------

    def execute(self, code: str) -> CodeExecution:
        if not isinstance(code, str):
            raise TypeError(f"code must be str, not {type(code).__name__}")
        with self._lock:
            self._check_usable()
            if self._child is None:
                self.initialize(self._context)
            child = self._live()
            self._count += 1
            number = self._count
            self.bridge.sources[number] = code
            stdout, stderr = self._streams()
            child.route(stdout.stream, stderr.stream)
            started = time.perf_counter()
            try:
                ended = self._run_cell(child, number)
            finally:
                for stream in (stdout, stderr):
                    stream.flush()
            duration_ms = (time.perf_counter() - started) * 1000
            self.bridge.sources.pop(number, None)
            reply = self.bridge.replies.pop(number, None)
            outcome = TurnOutcome(0, None, None, 0, duration_ms, stdout.stream, stderr.stream)
            if reply is not None:
                if ended.stop is not None:  # it reported, then its turn never ended
                    self._restart(ended.stop)
                return execution_from_reply(reply, outcome, number)
            if ended.stop is None:
                return self._no_reply(ended, outcome, number)
            return self._stopped(ended.stop, outcome, number)

    def _streams(self) -> tuple[_Capture, _Capture]:
        config, policy = self.config, self.config.policy
        return (
            _Capture(
                "stdout", min(policy.stdout_max_bytes, config.max_output_length), config.on_stdout
            ),
            _Capture(
                "stderr", min(policy.stderr_max_bytes, config.max_output_length), config.on_stderr
            ),
        )

    def _run_cell(self, child: _Child, number: int) -> _Ended:
        timeout = self.config.timeout_ms / 1000
        deadline = time.monotonic() + timeout
        self.bridge.begin(timeout)

        def stop() -> str | None:
            now = time.monotonic()
            if number in self.bridge.replies:
                return "timeout" if now >= deadline + _AFTER_REPLY_SECONDS else None
            if self._hard_requested:
                return "cancelled"
            return "timeout" if now >= deadline else None

        self._hard_requested = False
        self._running.set()
        try:
            return self._turn(child, f"{DRIVER_NAME}.run_cell({number})", self.bridge, stop)
        finally:
            self._running.clear()
            if self._escalation is not None:
                self._escalation.cancel()

    def _no_reply(self, ended: _Ended, outcome: TurnOutcome, number: int) -> CodeExecution:
        """The turn failed before the driver reported (an interrupt that came between the
        driver's own steps, or a driver failure); the process and its state live on."""
        error: dict[str, Any] = ended.error if isinstance(ended.error, dict) else {}
        data: dict[str, Any] = error["data"] if isinstance(error.get("data"), dict) else {}
        if self.bridge.soft_cancel.is_set():
            ename, evalue = "KeyboardInterrupt", "interrupted"
            status = ExecutionStatus.CANCELLED
        else:
            ename = str(data.get("ename") or "RuntimeError")
            evalue = f"the cell driver stopped answering: {error.get('message', '')}"
            status = ExecutionStatus.ERROR
        return stopped_execution(status, ename, evalue, outcome, number)

    def _stopped(self, reason: str, outcome: TurnOutcome, number: int) -> CodeExecution:
        """A hard stop: the process is killed and replaced; its state is gone."""
        code = self._restart(reason)
        if reason == "cancelled":
            status = ExecutionStatus.CANCELLED
            what = "interrupted (the cell did not stop by itself)"
        elif reason == "timeout":
            status = ExecutionStatus.TIMEOUT
            what = f"timed out after {self.config.timeout_ms / 1000:g} s"
        else:
            status, what = ExecutionStatus.ERROR, f"the native Python process {_exit_text(code)}"
        ename = "KeyboardInterrupt" if status is ExecutionStatus.CANCELLED else "SandboxLimitError"
        return stopped_execution(status, ename, f"{what}; {_LOST_NOTE}", outcome, number)

    def _restart(self, reason: str) -> int | None:
        """Kill the child and start a fresh one with the session's context. A fresh one that
        cannot start is logged; the next execute() tries again and raises."""
        code = self._discard(kill=True)
        self.restarts += 1
        logger.warning("native REPL session restarted (%s); its state was lost", reason)
        try:
            self.initialize(self._context)
        except SandboxExecutionError as exc:
            logger.error("the native REPL session could not restart: %s", exc)
        return code

    # -- interrupt ---------------------------------------------------------------------------

    def cancel(self) -> bool:
        """Interrupt the running execution: SIGINT now (KeyboardInterrupt in the cell), a
        restart after `interrupt_grace_seconds`. False when nothing runs."""
        child = self._child
        if child is None or not self._running.is_set():
            return False
        number = self._count
        self.bridge.soft_cancel.set()
        child.interrupt()

        def escalate() -> None:
            if self._running.is_set() and self._count == number:
                self._hard_requested = True
                self.bridge.hard_cancel.set()

        timer = threading.Timer(self.config.interrupt_grace_seconds, escalate)
        timer.daemon = True
        self._escalation = timer
        timer.start()
        return True

    # -- variables ---------------------------------------------------------------------------

    def get_variable(self, name: str) -> Any:
        """The variable's value as plain Python (JSON-able; DataFrames as records), or None."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"not a variable name: {name!r}")
        with self._lock:
            self._check_usable()
            if self._child is None:
                self.initialize(self._context)
            self._setup_turn(f"{DRIVER_NAME}.get_variable({name!r})")
            found, value = self.bridge.values.pop(name, (False, None))
            return value if found else None


class _Capture:
    """One execution's stream: capped, and streamed by line to a callback."""

    def __init__(self, name: str, cap_bytes: int, callback: Callable[[str], None] | None) -> None:
        self._lines = _WholeLines(callback) if callback is not None else None
        self.stream = CappedStream(name, cap_bytes, self._lines.feed if self._lines else None)

    def flush(self) -> None:
        if self._lines is not None:
            self._lines.flush()


def _stop_after(seconds: float) -> Callable[[], str | None]:
    deadline = time.monotonic() + seconds
    return lambda: "timeout" if time.monotonic() >= deadline else None


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited (exit code {code})"
