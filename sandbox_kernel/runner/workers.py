"""Worker processes for the agent server: runs spread over the cores, each worker replaceable.

A run is mostly Python on the host (the request, the guard, the session's turns, the
capsule) and the guest's own interpreter; on threads of one process they share one GIL and
a second worker added nothing. So the server hands each run to one of `size` worker
processes (`python -m sandbox_kernel.runner.worker`), each of which answers runs one at a
time with the same `run_request` a caller in-process would use, from the same warm images on
disk (the warm-start image and each dataset's: the page cache holds one copy for all).

    pool = WorkerPool(settings, size=2)       started in the background; warm when ready
    response = pool.run(request, run_id=..., timeout_seconds=10, cancellation=c)
    pool.shutdown()

The protocol is JSON lines on the worker's stdin and its own copy of stdout (the worker's
sys.stdout is its stderr, so nothing it prints can be taken for an answer): the host sends
{"op": "run", "id", "request", "run_id"} and {"op": "cancel", "id"}; the worker says
{"op": "ready"} once warm, then {"op": "done", "id", "response"} for each run.

A worker that dies mid-run (killed, out of memory) or does not answer within the run's timeout
and `grace_seconds` (then killed) is replaced, and its run answered with RUNNER_INTERNAL_ERROR
saying so; the run's capsule is written under the run id the host chose, unless the worker
wrote it first, so no run goes unrecorded and none is recorded twice. A cancel (the client went
away) is passed on to the worker, which stops the run as an in-process cancel would.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import IO, Any, Final

from pydantic import JsonValue, ValidationError

from sandbox_kernel.runner.api import failed_run
from sandbox_kernel.runner.engine import Cancellation
from sandbox_kernel.runner.models import ErrorCode, RunnerResponse
from sandbox_kernel.runner.settings import RunnerSettings

__all__ = ["WorkerPool"]

logger = logging.getLogger("sandbox_kernel.serve")

_START_TIMEOUT_SECONDS: Final = 600.0  # a cold cache compiles the guest first (~1 min)
_RESTART_PAUSE_SECONDS: Final = 1.0  # between a worker that would not start and the next
_MAX_LINE_BYTES: Final = 256 * 1024 * 1024  # one answer (capped by the runner long before)


class WorkerLost(Exception):
    """The worker running a run died or stopped answering; why, in words."""


class _Worker:
    """One worker process and the runs it has been given (one at a time)."""

    def __init__(self, settings: RunnerSettings, number: int) -> None:
        self.number = number
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sandbox_kernel.runner.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a terminal's ^C reaches the server, which stops us
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stdin: IO[bytes] = self.process.stdin
        self._send_lock = threading.Lock()
        self.ready: Future[None] = Future()
        self._pending: dict[str, Future[RunnerResponse]] = {}
        self._lock = threading.Lock()
        self._send({"op": "settings", "settings": settings.model_dump(mode="json")})
        self._reader = threading.Thread(
            target=self._read,
            args=(self.process.stdout,),
            name=f"sandbox-kernel-worker-{number}",
            daemon=True,
        )
        self._reader.start()

    def _send(self, message: dict[str, JsonValue]) -> None:
        line = json.dumps(message, ensure_ascii=False).encode() + b"\n"
        with self._send_lock:
            self._stdin.write(line)
            self._stdin.flush()

    def _read(self, stdout: IO[bytes]) -> None:
        try:
            for line in iter(lambda: stdout.readline(_MAX_LINE_BYTES), b""):
                self._answer(line)
        except (OSError, ValueError):
            pass
        finally:
            stdout.close()
        self._lost(WorkerLost(self._why_gone()))

    def _answer(self, line: bytes) -> None:
        try:
            message = json.loads(line)
            if message.get("op") == "ready":
                if not self.ready.done():
                    self.ready.set_result(None)
                return
            response = RunnerResponse.model_validate(message["response"])
            with self._lock:
                future = self._pending.pop(str(message["id"]), None)
        except (ValueError, KeyError, TypeError, ValidationError, AttributeError) as exc:
            logger.error("worker %d said something unreadable: %s", self.number, exc)
            self.kill()
            return
        if future is not None and not future.done():
            future.set_result(response)

    def _why_gone(self) -> str:
        try:
            status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "it stopped answering"
        if status < 0:
            with contextlib.suppress(ValueError):
                return f"it was killed by {signal.Signals(-status).name}"
        return f"it exited with status {status}"

    def _lost(self, error: WorkerLost) -> None:
        if not self.ready.done():
            self.ready.set_exception(error)
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        for future in pending:
            if not future.done():
                future.set_exception(error)

    def submit(self, run: str, request: JsonValue, run_id: str) -> Future[RunnerResponse]:
        future: Future[RunnerResponse] = Future()
        with self._lock:
            self._pending[run] = future
        try:
            self._send({"op": "run", "id": run, "request": request, "run_id": run_id})
        except OSError:
            with self._lock:
                self._pending.pop(run, None)
            future.set_exception(WorkerLost(self._why_gone()))
        return future

    def cancel(self, run: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._send({"op": "cancel", "id": run})

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    def close(self, wait_seconds: float) -> None:
        """Ask the worker to end (its stdin closes), then kill it if it has not."""
        with contextlib.suppress(OSError, ValueError):
            self._stdin.close()
        try:
            self.process.wait(timeout=wait_seconds)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait()


class _RemoteRun:
    """What a Cancellation stops when the run is in a worker: the worker is told."""

    def __init__(self, worker: _Worker, run: str) -> None:
        self._worker, self._run = worker, run

    def abandon(self) -> None:
        self._worker.cancel(self._run)


class WorkerPool:
    """`size` worker processes; `run()` gives a run to an idle one and waits for its answer."""

    def __init__(self, settings: RunnerSettings, size: int, *, grace_seconds: float = 5.0) -> None:
        self.settings = settings
        self.size = size
        self.grace_seconds = grace_seconds
        self.replaced = 0  # workers replaced after dying or hanging
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._workers: set[_Worker] = set()
        self._numbers = itertools.count(1)
        self._runs = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        for _ in range(size):
            self._start_worker()

    def _start_worker(self) -> None:
        """Start a worker; it joins the idle ones once warm (on a thread: never waited for)."""
        if self._closed.is_set():
            return
        worker = _Worker(self.settings, next(self._numbers))
        with self._lock:
            self._workers.add(worker)
        threading.Thread(
            target=self._await_ready,
            args=(worker,),
            name="sandbox-kernel-worker-start",
            daemon=True,
        ).start()

    def _await_ready(self, worker: _Worker) -> None:
        try:
            worker.ready.result(timeout=_START_TIMEOUT_SECONDS)
        except (WorkerLost, FutureTimeout) as exc:
            logger.error("worker %d did not start: %s", worker.number, exc)
            self._retire(worker)
            if not self._closed.wait(_RESTART_PAUSE_SECONDS):
                self._start_worker()
            return
        if self._closed.is_set():
            worker.close(self.grace_seconds)
            return
        self._idle.put(worker)

    def _retire(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._workers.discard(worker)
        with contextlib.suppress(ChildProcessError, subprocess.TimeoutExpired):
            worker.process.wait(timeout=10)

    def wait_ready(self, timeout: float = _START_TIMEOUT_SECONDS) -> int:
        """Wait until every worker is warm (or `timeout` passes); how many are."""
        deadline = time.monotonic() + timeout
        while self._idle.qsize() < self.size and time.monotonic() < deadline:
            time.sleep(0.05)
        return self._idle.qsize()

    def pids(self) -> list[int]:
        """The worker processes' ids (for operators and tests)."""
        with self._lock:
            return sorted(w.process.pid for w in self._workers if w.alive)

    def run(
        self,
        request: dict[str, Any],
        *,
        run_id: str,
        timeout_seconds: float,
        cancellation: Cancellation,
    ) -> RunnerResponse:
        """Answer `request` in a worker: its response, or a recorded RUNNER_INTERNAL_ERROR
        when no worker became free in time or the worker was lost."""
        wait = timeout_seconds + self.grace_seconds
        try:
            worker = self._idle.get(timeout=wait)
        except queue.Empty:
            message = f"no worker process was free within {wait:g} s (they are being replaced)"
            return self._failed(request, run_id, message)
        run = str(next(self._runs))
        future = worker.submit(run, request, run_id)
        cancellation.attach(_RemoteRun(worker, run))
        try:
            response = future.result(timeout=wait)
        except (WorkerLost, FutureTimeout) as exc:
            why = str(exc) or f"it did not answer within {wait:g} s"
            logger.error("worker %d lost its run %s: %s", worker.number, run_id, why)
            self._replace(worker)
            message = f"the worker process running this query stopped ({why}); it was replaced"
            return self._failed(request, run_id, message)
        finally:
            cancellation.attach(None)
        self._idle.put(worker)
        return response

    def _replace(self, worker: _Worker) -> None:
        self._retire(worker)
        self.replaced += 1
        self._start_worker()

    def _failed(self, request: dict[str, Any], run_id: str, message: str) -> RunnerResponse:
        return failed_run(
            request,
            settings=self.settings,
            run_id=run_id,
            code=ErrorCode.RUNNER_INTERNAL_ERROR,
            message=message,
        )

    def shutdown(self) -> None:
        """Stop every worker (a run in progress is cut off: its caller is gone too)."""
        self._closed.set()
        with self._lock:
            workers = list(self._workers)
        for worker in workers:
            worker.close(self.grace_seconds)
