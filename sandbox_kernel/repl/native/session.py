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

How the child is wired (see child.py for its side): four pipes. Two carry JSON-RPC 2.0,
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

import itertools
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from sandbox_kernel.core.errors import SandboxExecutionError
from sandbox_kernel.core.output import CappedStream
from sandbox_kernel.repl.bridged import BridgedSession
from sandbox_kernel.repl.bridges import Bridge
from sandbox_kernel.repl.lines import LineSplitter
from sandbox_kernel.repl.models import (
    CodeExecution,
    ExecutionStatus,
    REPLConfig,
)
from sandbox_kernel.repl.native import child as rpc
from sandbox_kernel.repl.native.process import Child, Ended
from sandbox_kernel.repl.protocol import DRIVER_NAME, run_cell_turn
from sandbox_kernel.repl.results import (
    ChildTurn,
    UsageReading,
    execution_from_reply,
    stopped_execution,
)

__all__ = ["NativeReplSandbox"]

logger = logging.getLogger("sandbox_kernel")

_SETUP_TIMEOUT_SECONDS = 300.0  # start, driver install, context, get_variable
_SETUP_OUTPUT_BYTES = 1_000_000
_AFTER_REPLY_SECONDS = 5.0  # the cell reported; its turn must end soon after
_SECRET_PREFIX = "SANDBOX_KERNEL_LLM_"
_LOST_NOTE = (
    "the {kind} session was restarted and its state was lost "
    "(files written in the workspace were kept)"
)


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


class NativeReplSandbox(BridgedSession):
    """A persistent Python session in a plain CPython subprocess. UNSAFE: NOT A SANDBOX.

    Cells run with the host user's full rights; use it only for trusted code (and as the
    benchmarks' baseline). Memory is not limited and fuel is not metered. Same API as
    ReplSandbox; a hard stop restarts the process, losing the session's state.
    """

    sandboxed = False
    kind = "native Python"  # in messages
    unsafe_warning = (
        "the native REPL backend runs cells in a plain CPython process with NO "
        "sandbox (no isolation, no memory limit): use it only for trusted code"
    )

    def __init__(self, config: REPLConfig | None = None) -> None:
        super().__init__(config)
        self._child: Child | None = None
        self._ids = itertools.count(1)
        self._destroyed = False
        self._warned = False
        self.rollbacks = 0  # never: state is not rolled back here
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        """The child process's id while one runs."""
        return self._child.process.pid if self._child is not None else None

    # -- lifecycle ---------------------------------------------------------------------------

    def initialize(self, context: object = None) -> None:
        """Start the child (once) and bind `context` inside it."""
        with self._lock:
            self._check_usable()
            self._context = context
            if self._child is None:
                self._start()
            self._setup_turn(f"{DRIVER_NAME}.load_context()", context=True)

    def _check_usable(self) -> None:
        if self._destroyed:
            raise SandboxExecutionError("this session was destroyed")

    def _start(self) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(self.unsafe_warning)
        self.workspace.mkdir(parents=True, exist_ok=True)
        child = self._launch()
        stderr = CappedStream("stderr", _SETUP_OUTPUT_BYTES)
        child.route(CappedStream("stdout", _SETUP_OUTPUT_BYTES), stderr)
        ended = child.converse(
            rpc.Method.READY, self._door_for_setup(hello=True), _stop_after(_SETUP_TIMEOUT_SECONDS)
        )
        if ended.stop is not None:
            code = child.close(kill=True)
            detail = stderr.text().strip() or f"{ended.stop} (exit code {code})"
            raise SandboxExecutionError(f"the {self.kind} session could not start: {detail}")
        self._child = child

    def _launch(self) -> Child:
        """The child process (a subclass runs another interpreter with the same protocol)."""
        return Child(self.workspace, self._env())

    def _door_for_setup(self, **expect: Any) -> Bridge:
        self.bridge.begin(_SETUP_TIMEOUT_SECONDS)
        self.bridge.expect(**expect)  # the bookkeeping this turn may send
        return self.bridge

    def _env(self) -> dict[str, str]:
        env = dict(self.config.policy.guest_env())
        env.setdefault("PATH", os.environ.get("PATH", os.defpath))
        return {k: v for k, v in env.items() if not k.upper().startswith(_SECRET_PREFIX)}

    def _setup_turn(self, source: str, **expect: Any) -> None:
        """A turn of ours (context, get_variable): it must succeed."""
        child = self._live()
        stderr = CappedStream("stderr", _SETUP_OUTPUT_BYTES)
        child.route(CappedStream("stdout", _SETUP_OUTPUT_BYTES), stderr)
        door = self._door_for_setup(**expect)
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
        raise SandboxExecutionError(f"the {self.kind} session failed at {source!r}: {detail}")

    def _turn(
        self, child: Child, source: str, door: Bridge, stop: Callable[[], str | None]
    ) -> Ended:
        request_id = next(self._ids)
        try:
            child.send({"id": request_id, "method": rpc.Method.TURN, "params": {"source": source}})
        except OSError:
            return Ended(stop="exited")
        return child.converse(request_id, door, stop)

    def _live(self) -> Child:
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
            self._stop_escalation()
            self._discard(kill=False)
            self.bridge.close()
            self._destroyed = True

    # -- executions --------------------------------------------------------------------------

    def execute(self, code: str) -> CodeExecution:
        if not isinstance(code, str):
            raise TypeError(f"code must be str, not {type(code).__name__}")
        reading = UsageReading(self.config.llm_usage)
        return reading.attach(self._execute(code))

    def _execute(self, code: str) -> CodeExecution:
        with self._lock:
            self._check_usable()
            if self._child is None:
                self.initialize(self._context)
            child = self._live()
            self._count += 1
            number = self._count
            stdout, stderr = self._streams()
            child.route(stdout.stream, stderr.stream)
            started = time.perf_counter()
            try:
                ended = self._run_cell(child, number, code)
            finally:
                for stream in (stdout, stderr):
                    stream.flush()
            duration_ms = (time.perf_counter() - started) * 1000
            reply = self.bridge.replies.pop(number, None)
            outcome = ChildTurn(stdout.stream, stderr.stream, duration_ms)
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
            _Capture("stdout", policy.stdout_max_bytes, config.on_stdout),
            _Capture("stderr", policy.stderr_max_bytes, config.on_stderr),
        )

    def _run_cell(self, child: Child, number: int, code: str) -> Ended:
        timeout = self.config.policy.timeout_seconds
        deadline = time.monotonic() + timeout
        self.bridge.begin(timeout)
        self.bridge.expect(cell=number)

        def stop() -> str | None:
            now = time.monotonic()
            if number in self.bridge.replies:
                return "timeout" if now >= deadline + _AFTER_REPLY_SECONDS else None
            if self._hard_requested:
                return "cancelled"
            return "timeout" if now >= deadline else None

        with self._turn_running():
            return self._turn(child, run_cell_turn(number, code), self.bridge, stop)

    def _no_reply(self, ended: Ended, outcome: ChildTurn, number: int) -> CodeExecution:
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

    def _stopped(self, reason: str, outcome: ChildTurn, number: int) -> CodeExecution:
        """A hard stop: the process is killed and replaced; its state is gone."""
        code = self._restart(reason)
        if reason == "cancelled":
            status = ExecutionStatus.CANCELLED
            what = "interrupted (the cell did not stop by itself)"
        elif reason == "timeout":
            status = ExecutionStatus.TIMEOUT
            what = f"timed out after {self.config.policy.timeout_seconds:g} s"
        else:
            status, what = ExecutionStatus.ERROR, f"the {self.kind} process {_exit_text(code)}"
        ename = "KeyboardInterrupt" if status is ExecutionStatus.CANCELLED else "SandboxLimitError"
        return stopped_execution(
            status, ename, f"{what}; {_LOST_NOTE.format(kind=self.kind)}", outcome, number
        )

    def _restart(self, reason: str) -> int | None:
        """Kill the child and start a fresh one with the session's context. A fresh one that
        cannot start is logged; the next execute() tries again and raises."""
        code = self._discard(kill=True)
        self.restarts += 1
        logger.warning("%s REPL session restarted (%s); its state was lost", self.kind, reason)
        try:
            self.initialize(self._context)
        except SandboxExecutionError as exc:
            logger.error("the %s REPL session could not restart: %s", self.kind, exc)
        return code

    # -- interrupt ---------------------------------------------------------------------------

    def _stoppable(self) -> bool:
        return self._child is not None

    def _soft_stop(self) -> None:
        if (child := self._child) is not None:
            child.interrupt()  # SIGINT: KeyboardInterrupt in the cell

    # the hard stop is the turn's: it sees _hard_requested and the process is replaced

    def usage(self) -> dict[str, Any]:
        """What the session has done so far: executions, process restarts, the child's pid
        (no fuel or memory figures: nothing meters a native process)."""
        return {"executions": self._count, "restarts": self.restarts, "pid": self.pid}

    # -- variables ---------------------------------------------------------------------------

    def get_variable(self, name: str) -> Any:
        """The variable's value as plain Python (JSON-able; DataFrames as records), or None."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"not a variable name: {name!r}")
        with self._lock:
            self._check_usable()
            if self._child is None:
                self.initialize(self._context)
            self._setup_turn(f"{DRIVER_NAME}.get_variable({name!r})", value=name)
            found, value = self.bridge.values.pop(name, (False, None))
            return value if found else None


class _Capture:
    """One execution's stream: capped, and streamed by line to a callback."""

    def __init__(self, name: str, cap_bytes: int, callback: Callable[[str], None] | None) -> None:
        self._lines = _WholeLines(callback) if callback is not None else None
        self.stream = CappedStream(name, cap_bytes, self._lines.feed if self._lines else None)

    def flush(self) -> None:
        self.stream.close()
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
