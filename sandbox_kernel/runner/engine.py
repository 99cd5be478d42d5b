"""One run in the sandbox: a fresh persistent session over one dataset, and its steps.

    with SandboxRun(settings, request, dataset, tables=tables) as run:
        run.load(tables)                                   CSVs -> DataFrames, dfs, globals
        execution = run.python(code)                       the user's code, as its own cell
        payload = run.collect()                            result_df | result_rows | result
        payload = run.sql(sql, names)                      or: the read-only query

A `Cancellation` passed in stops a run from another thread (the agent server's client went
away): the step running is interrupted and the run ends as RUNNER_CANCELLED.

Every run gets its own ReplSandbox (nothing survives from one request to the next), a
scratch /app that is removed afterwards, and the dataset's folder read-only at /data. Given
the `tables` it will load, a run starts from the dataset's warm image (warm_data.py), its
tables already loaded, and load() has nothing left to do; when that image cannot be made, the
run starts plainly and load() reports what failed. A
step that does not end well raises `RunFailed` with the runner's error code: a timeout is
RUNNER_TIMEOUT, fuel or memory RUNNER_RESOURCE_EXCEEDED, the user's exception
PYTHON_EXECUTION_ERROR, a dataset that will not load RUNNER_INTERNAL_ERROR.

Must not import: wasmtime (repl/ and host/ do that), anything Jupyter.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final, Literal, Protocol

from sandbox_kernel.core.errors import SandboxAbandoned, SandboxError, SandboxExecutionError
from sandbox_kernel.core.scratch import ScratchFolder
from sandbox_kernel.repl.models import CodeExecution, ExecutionStatus, REPLConfig
from sandbox_kernel.repl.sandbox import ReplSandbox
from sandbox_kernel.runner import adapter
from sandbox_kernel.runner.adapter import FailurePayload, TablePayload
from sandbox_kernel.runner.datasets import Dataset, Table
from sandbox_kernel.runner.errors import RunnerConfigError
from sandbox_kernel.runner.models import ErrorCode, LimitHit, QueryType, RunnerRequest
from sandbox_kernel.runner.settings import RunnerSettings
from sandbox_kernel.runner.warm_data import dataset_setup

__all__ = ["Cancellation", "RunFailed", "SandboxRun", "user_line", "warm_up"]

Step = Literal["load", "query", "collect"]
_STEP_WORDS: Final = {"load": "loading the dataset", "query": "the query", "collect": "the result"}
USER_CELL_NAME: Final = "<code>"

logger = logging.getLogger("sandbox_kernel.runner")


class RunFailed(Exception):
    """A step ended badly; what the response says about it."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        line: int | None = None,
        limit: LimitHit | None = None,
        details: list[str] | None = None,
        stdout: str = "",
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.limit = limit
        self.details = details or []
        self.stdout = stdout
        self.stderr = stderr


class Stoppable(Protocol):
    """What a cancel stops: a session, or a run in a worker process."""

    def abandon(self) -> None: ...


class Cancellation:
    """Stops one run from another thread: `cancel()` abandons the run's session, which
    interrupts the step in the guest (soft, then hard with rollback) or stops one on its way
    there, and no further step starts. Safe to call at any time, twice."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._repl: Stoppable | None = None

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()
        with self._lock:
            if self._repl is not None:
                self._repl.abandon()  # also stops a step between its check and the guest

    def attach(self, repl: Stoppable | None) -> None:
        """The session a cancel interrupts (None once the run is over); cancelled at once when
        the cancel came first."""
        with self._lock:
            self._repl = repl
            if repl is not None and self.cancelled:
                repl.abandon()


class SandboxRun:
    """A fresh sandboxed session for one request; a context manager."""

    def __init__(
        self,
        settings: RunnerSettings,
        request: RunnerRequest,
        dataset: Dataset,
        cancellation: Cancellation | None = None,
        *,
        tables: Sequence[Table] = (),
    ) -> None:
        self.settings = settings
        self.request = request
        self.dataset = dataset
        self.cancellation = cancellation or Cancellation()
        self.timings: dict[str, float] = {}
        self._scratch = ScratchFolder("sandbox-kernel-runner-")
        self.workspace = Path(self._scratch.name)
        self.policy = settings.policy(request, self.workspace, dataset.folder)
        self._warm_tables = tuple(tables) if settings.warm_datasets else ()
        self._loaded: tuple[Table, ...] = ()  # the tables the session started with
        self.repl = ReplSandbox(self._config(warm=bool(self._warm_tables)))
        # The request's timeout bounds the whole request: each step gets what is left.
        self._deadline = time.monotonic() + request.timeout_seconds

    def _config(self, *, warm: bool) -> REPLConfig:
        setup = None
        if warm:
            try:
                with self._timed("digest"):
                    data = self.policy.guest_data_path
                    setup = dataset_setup(self.dataset, self._warm_tables, data)
            except OSError as exc:  # the load step will say what cannot be read
                logger.info("dataset %s: no warm image (%s)", self.dataset.id, exc)
        return REPLConfig(
            policy=self.policy,
            workspace=self.workspace,
            warm_start_modules=self.settings.warm_start_modules,
            warm_setup=setup,
            rollback_images=False,  # a run's session ends with it
        )

    def __enter__(self) -> SandboxRun:
        try:
            with self._timed("start"):
                self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        """Start from the dataset's warm image when there is one to be had, else plainly."""
        self.cancellation.attach(self.repl)  # a cancel also stops a warm image being made
        if self.repl.config.warm_setup is not None:
            try:
                self.repl.initialize()
                self._loaded = self._warm_tables
                return
            except SandboxExecutionError as exc:  # the load step will say what went wrong
                if self.cancellation.cancelled:
                    raise self._cancelled("load") from None
                logger.info("dataset %s: no warm image (%s)", self.dataset.id, exc)
                self.repl.destroy()
                self.repl = ReplSandbox(self._config(warm=False))
                self.cancellation.attach(self.repl)
        self.repl.initialize()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.cancellation.attach(None)
        self.repl.destroy()
        self._scratch.cleanup()

    @contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = round((time.perf_counter() - started) * 1000, 3)

    def _execute(self, step: Step, code: str) -> CodeExecution:
        with self._timed(step), self._guest_call(step):
            execution = self.repl.execute(code)
        if self.cancellation.cancelled:
            raise self._cancelled(step)
        return execution

    def _value(self, step: Step) -> object:
        """The result variable, read by guest code (its reprs) within what time is left."""
        with self._guest_call(step):
            value = self.repl.get_variable(adapter.RESULT_VARIABLE)
        if value is None and time.monotonic() >= self._deadline:
            raise self._out_of_time(step)  # stopped, not a result of None
        return value

    @contextmanager
    def _guest_call(self, step: Step) -> Iterator[None]:
        """Around one call into the guest: none after a cancel, and only the request's
        remaining time. A cancel that comes once it is made ends it (the session is abandoned)."""
        if self.cancellation.cancelled:
            raise self._cancelled(step)
        self.repl.set_limits(timeout_seconds=self._left(step))
        try:
            yield
        except SandboxAbandoned:
            raise self._cancelled(step) from None

    def _left(self, step: Step) -> float:
        """The request's time left for `step`; RunFailed when there is none."""
        left = self._deadline - time.monotonic()
        if left < 0.001:
            raise self._out_of_time(step)
        return left

    # -- steps -------------------------------------------------------------------------------

    def load(self, tables: Sequence[Table]) -> None:
        """Read the tables into the session (the dataset is at the policy's /data), unless
        it started with them (from their warm image)."""
        if tuple(tables) == self._loaded:
            self.timings["load"] = 0.0  # paid for once, by the image
            return
        data = self.policy.guest_data_path
        cell = adapter.load_cell({t.name: f"{data}/{t.file}" for t in tables})
        execution = self._execute("load", cell)
        if not execution.ok:
            self._fail("load", execution)

    def python(self, code: str) -> CodeExecution:
        """Run the user's code as its own cell, so its line numbers are its own."""
        execution = self._execute("query", code)
        if not execution.ok:
            self._fail("query", execution)
        return execution

    def collect(self) -> TablePayload | FailurePayload:
        request = self.request
        execution = self._execute(
            "collect", adapter.collect_cell(request.max_rows, request.max_output_bytes)
        )
        if not execution.ok:
            self._fail("collect", execution)
        return adapter.read_payload(self._value("collect"))

    def sql(self, sql: str, names: Sequence[str]) -> TablePayload | FailurePayload:
        request = self.request
        cell = adapter.sql_cell(sql, names, request.max_rows, request.max_output_bytes)
        execution = self._execute("query", cell)
        if not execution.ok:
            self._fail("query", execution)
        return adapter.read_payload(self._value("query"))

    # -- failures ----------------------------------------------------------------------------

    def _out_of_time(self, step: Step) -> RunFailed:
        message = (
            f"{_STEP_WORDS[step]} had no time left within timeout_seconds "
            f"({self.policy.timeout_seconds:g} s)"
        )
        return RunFailed(ErrorCode.RUNNER_TIMEOUT, message, limit=LimitHit.TIMEOUT)

    def _cancelled(self, step: Step) -> RunFailed:
        message = f"the run was cancelled during {_STEP_WORDS[step]}: its caller went away"
        return RunFailed(ErrorCode.RUNNER_CANCELLED, message)

    def _fail(self, step: Step, execution: CodeExecution) -> None:
        what = _STEP_WORDS[step]
        status = execution.status
        policy = self.policy
        if status is ExecutionStatus.TIMEOUT:
            message = f"{what} took longer than timeout_seconds ({policy.timeout_seconds:g} s)"
            raise RunFailed(ErrorCode.RUNNER_TIMEOUT, message, limit=LimitHit.TIMEOUT)
        if status is ExecutionStatus.OUT_OF_FUEL:
            message = f"{what} ran out of its instruction budget ({policy.fuel_budget:,})"
            raise RunFailed(ErrorCode.RUNNER_RESOURCE_EXCEEDED, message, limit=LimitHit.FUEL)
        if status is ExecutionStatus.MEMORY:
            message = f"{what} ran out of memory ({policy.memory_bytes:,} bytes)"
            raise RunFailed(ErrorCode.RUNNER_RESOURCE_EXCEEDED, message, limit=LimitHit.MEMORY)
        error = execution.error or f"status {status.value}"
        if step == "load":
            raise RunFailed(ErrorCode.RUNNER_INTERNAL_ERROR, f"{what} failed: {error}")
        if step == "query" and self.request.python_code is None:
            raise RunFailed(ErrorCode.RUNNER_INTERNAL_ERROR, f"the SQL step failed: {error}")
        if step == "collect":
            message = f"the result could not be collected: {error}"
            raise RunFailed(ErrorCode.PYTHON_EXECUTION_ERROR, message)
        traceback = user_traceback(execution)
        line = user_line(traceback)
        stderr = execution.stderr + "".join(f"{text}\n" for text in traceback)
        message = f"line {line}: {error}" if line else error
        raise RunFailed(
            ErrorCode.PYTHON_EXECUTION_ERROR,
            message,
            line=line,
            stdout=execution.stdout,
            stderr=stderr,
        )


def warm_up(settings: RunnerSettings) -> None:
    """Start and close one session over each registered dataset, so the images the runs start
    from (the warm-start image, and each dataset's with its tables loaded) exist before the
    first request (an agent server calls this at start). Nothing is recorded; a dataset that
    does not load is logged and left to its first run to report."""
    for dataset in settings.registry():
        request = RunnerRequest(query_type=QueryType.SQL, dataset_id=dataset.id, sql="SELECT 1")
        try:
            with SandboxRun(settings, request, dataset, tables=dataset.tables()):
                pass
        except (RunFailed, RunnerConfigError, SandboxError, OSError) as exc:
            logger.warning("dataset %s was not warmed: %s", dataset.id, exc)


def user_traceback(execution: CodeExecution) -> list[str]:
    """The traceback with the session's cell name replaced by "<code>"."""
    cell = f"<cell-{execution.execution_count}>"
    return [text.replace(cell, USER_CELL_NAME) for text in execution.traceback]


_FRAME: Final = re.compile(rf'File "{re.escape(USER_CELL_NAME)}", line (\d+)')


def user_line(traceback: list[str]) -> int | None:
    """The line of the user's code where the error was raised (its innermost frame)."""
    lines = [int(m.group(1)) for text in traceback for m in _FRAME.finditer(text)]
    return lines[-1] if lines else None
