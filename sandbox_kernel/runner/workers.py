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
{"op": "ready"} once warm, then {"op": "started", "id"} and {"op": "done", "id", "response"}
for each run.

A worker acknowledges each run ({"op": "started", "id"}) before it begins it. A worker that dies
while idle is replaced as soon as its pipe closes, and one found dead when a run is handed to it
(it died before it could say "started") is replaced and the run given to another: the run never
ran, so its caller never hears of it (at most `_HANDOVERS` times a run: a request that kills
every worker it reaches is answered as one lost mid-run). A worker that dies mid-run (killed,
out of memory) or does not answer within the run's timeout and `grace_seconds` (then killed) is
replaced, and its run answered with RUNNER_INTERNAL_ERROR saying so; the run's capsule is
written under the run id the host chose, unless the worker wrote it first, so no run goes
unrecorded and none is recorded twice. A cancel (the client went away) is passed on to the
worker, which stops the run as an in-process cancel would.

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
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import IO, Any, Final

from pydantic import JsonValue, ValidationError

from sandbox_kernel.core.launch import host_python
from sandbox_kernel.runner.api import failed_run
from sandbox_kernel.runner.engine import Cancellation
from sandbox_kernel.runner.models import ErrorCode, RunnerResponse
from sandbox_kernel.runner.settings import RunnerSettings

__all__ = ["WorkerPool"]

logger = logging.getLogger("sandbox_kernel.serve")

_START_TIMEOUT_SECONDS: Final = 600.0  # a cold cache compiles the guest first (~1 min)
_RESTART_PAUSE_SECONDS: Final = 1.0  # between a worker that would not start and the next
_MAX_LINE_BYTES: Final = 256 * 1024 * 1024  # one answer (capped by the runner long before)
_HANDOVERS: Final = 3  # workers a run is given to when each is found gone before it began


class WorkerLost(Exception):
    """The worker running a run died or stopped answering; why, in words. `started`: whether
    the worker had begun the run (said so) before it was lost."""

    def __init__(self, why: str, *, started: bool = True) -> None:
        super().__init__(why)
        self.started = started


class _Worker:
    """One worker process and the runs it has been given (one at a time)."""

    def __init__(
        self, settings: RunnerSettings, number: int, on_exit: Callable[[_Worker], None]
    ) -> None:
        self.number = number
        self._on_exit = on_exit  # called on the reader thread once the process has gone
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            host_python("-m", "sandbox_kernel.runner.worker"),
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
        self._started: set[str] = set()  # pending runs the worker said it began
        self._lock = threading.Lock()
        self.gone = threading.Event()  # its pipe closed: the process ended or is ending
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
        self.gone.set()
        self._lost(self.why_gone())
        self._on_exit(self)

    def _answer(self, line: bytes) -> None:
        try:
            message = json.loads(line)
            if message.get("op") == "ready":
                if not self.ready.done():
                    self.ready.set_result(None)
                return
            if message.get("op") == "started":
                with self._lock:
                    if str(message["id"]) in self._pending:
                        self._started.add(str(message["id"]))
                return
            response = RunnerResponse.model_validate(message["response"])
            with self._lock:
                future = self._pending.pop(str(message["id"]), None)
                self._started.discard(str(message["id"]))
        except (ValueError, KeyError, TypeError, ValidationError, AttributeError) as exc:
            logger.error("worker %d said something unreadable: %s", self.number, exc)
            self.kill()
            return
        if future is not None and not future.done():
            future.set_result(response)

    def why_gone(self) -> str:
        try:
            status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "it stopped answering"
        if status < 0:
            with contextlib.suppress(ValueError):
                return f"it was killed by {signal.Signals(-status).name}"
        return f"it exited with status {status}"

    def _lost(self, why: str) -> None:
        if not self.ready.done():
            self.ready.set_exception(WorkerLost(why))
        with self._lock:
            pending, self._pending = self._pending, {}
            started, self._started = self._started, set()
        for run, future in pending.items():
            if not future.done():
                future.set_exception(WorkerLost(why, started=run in started))

    def submit(self, run: str, request: JsonValue, run_id: str) -> Future[RunnerResponse]:
        future: Future[RunnerResponse] = Future()
        with self._lock:
            if self.gone.is_set():  # _lost has answered the runs it had: this one is new
                future.set_exception(WorkerLost(self.why_gone(), started=False))
                return future
            self._pending[run] = future
        try:
            self._send({"op": "run", "id": run, "request": request, "run_id": run_id})
        except (OSError, ValueError):  # its pipe is broken (or closed): it never got the run
            with self._lock:
                self._pending.pop(run, None)
            if not future.done():
                future.set_exception(WorkerLost(self.why_gone(), started=False))
        return future

    def cancel(self, run: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._send({"op": "cancel", "id": run})

    @property
    def alive(self) -> bool:
        return not self.gone.is_set() and self.process.poll() is None

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
        self._busy: set[_Worker] = set()  # taken from the idle ones, not yet given back
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
        worker = _Worker(self.settings, next(self._numbers), self._exited)
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

    def _retire(self, worker: _Worker) -> bool:
        """Kill `worker` and forget it; False when it had been retired already (by another
        thread that saw it go), so that each lost worker is replaced once."""
        worker.kill()
        with self._lock:
            known = worker in self._workers
            self._workers.discard(worker)
        with contextlib.suppress(ChildProcessError, subprocess.TimeoutExpired):
            worker.process.wait(timeout=10)
        return known

    def _exited(self, worker: _Worker) -> None:
        """A worker's process ended (its reader thread says so). A warm one that ends while
        idle is replaced now, not when a run would find it dead; one that never became warm
        is _await_ready's, and one lost mid-run is run()'s to report (it replaces it too)."""
        if self._closed.is_set() or not worker.ready.done() or worker.ready.exception():
            return
        with self._lock:
            busy = worker not in self._workers or worker in self._busy
        if not busy:
            logger.warning("worker %d ended while idle (%s)", worker.number, worker.why_gone())
            self._replace(worker)

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
        deadline = time.monotonic() + wait
        for handover in range(1, _HANDOVERS + 1):
            worker = self._take_idle(deadline)
            if worker is None:
                message = f"no worker process was free within {wait:g} s (they are being replaced)"
                return self._failed(request, run_id, message)
            run = str(next(self._runs))
            future = worker.submit(run, request, run_id)
            cancellation.attach(_RemoteRun(worker, run))
            try:
                response = future.result(timeout=wait)
            except WorkerLost as exc:
                self._replace(worker)
                if not exc.started and handover < _HANDOVERS:  # it never began: another runs it
                    logger.warning(
                        "worker %d was gone before run %s: %s", worker.number, run_id, exc
                    )
                    continue
                return self._lost(request, run_id, worker, str(exc))
            except FutureTimeout:
                self._replace(worker)
                return self._lost(request, run_id, worker, f"it did not answer within {wait:g} s")
            finally:
                cancellation.attach(None)
            self._give_back(worker)
            return response
        raise AssertionError("unreachable: the last handover returns")

    def _take_idle(self, deadline: float) -> _Worker | None:
        """A live idle worker, marked busy (dead ones found on the way are replaced); None
        when none comes by `deadline`."""
        while True:
            try:
                worker = self._idle.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            with self._lock:
                self._busy.add(worker)
            if worker.alive:
                return worker
            logger.warning(
                "worker %d was found dead while idle (%s)", worker.number, worker.why_gone()
            )
            self._replace(worker)

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
        self._idle.put(worker)
        if not worker.alive:  # it went just now: _exited saw it busy and left it to us
            self._exited(worker)

    def _lost(
        self, request: dict[str, Any], run_id: str, worker: _Worker, why: str
    ) -> RunnerResponse:
        logger.error("worker %d lost its run %s: %s", worker.number, run_id, why)
        message = f"the worker process running this query stopped ({why}); it was replaced"
        return self._failed(request, run_id, message)

    def _replace(self, worker: _Worker) -> None:
        """Retire `worker` and start another, once however many threads saw it go."""
        with self._lock:
            self._busy.discard(worker)
        if self._retire(worker):
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
