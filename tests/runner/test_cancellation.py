"""A run stopped from another thread (what the agent server does when its client leaves):
it ends as RUNNER_CANCELLED, long before its timeout, and is recorded."""

from __future__ import annotations

import threading
import time

import pytest

from sandbox_kernel.runner import ErrorCode, RunnerSettings, run_request
from sandbox_kernel.runner.capsules import CapsuleStore
from sandbox_kernel.runner.datasets import DatasetRegistry
from sandbox_kernel.runner.engine import Cancellation, RunFailed, SandboxRun
from sandbox_kernel.runner.models import RunnerRequest

FOREVER = {"query_type": "python", "dataset_id": "retail", "python_code": "while True:\n    pass"}


def test_a_cancel_stops_the_running_step(settings: RunnerSettings) -> None:
    # The dataset's warm image first: made cold (a new guest driver), loading it takes longer
    # than the second below, and the cancel would land there rather than in the query.
    assert run_request({**FOREVER, "python_code": "result = 1"}, settings=settings).ok
    cancellation = Cancellation()
    threading.Timer(1.0, cancellation.cancel).start()
    started = time.monotonic()
    response = run_request({**FOREVER, "timeout_seconds": 60}, settings=settings,
                           cancellation=cancellation)  # fmt: skip
    assert time.monotonic() - started < 30
    assert response.error is not None and response.error.type is ErrorCode.RUNNER_CANCELLED
    assert "during the query" in response.error.message
    assert response.run_id is not None
    capsule = CapsuleStore(settings.capsules).get(response.run_id)
    assert capsule.response["error"]["type"] == "RUNNER_CANCELLED"


def test_a_run_cancelled_before_it_starts_makes_no_sandbox(settings: RunnerSettings) -> None:
    cancellation = Cancellation()
    cancellation.cancel()
    response = run_request(FOREVER, settings=settings, cancellation=cancellation)
    assert response.error is not None and response.error.type is ErrorCode.RUNNER_CANCELLED
    assert "before it started" in response.error.message
    assert response.run_id is not None
    capsule = CapsuleStore(settings.capsules).get(response.run_id)
    assert "start" not in capsule.timings_ms


def test_a_cancel_after_the_end_changes_nothing(settings: RunnerSettings) -> None:
    cancellation = Cancellation()
    request = {"query_type": "sql", "dataset_id": "retail", "sql": "SELECT 1 AS one"}
    response = run_request(request, settings=settings, cancellation=cancellation)
    cancellation.cancel()
    assert response.ok and response.rows == [[1]]


def test_a_cancel_between_two_steps_stops_the_next_one(settings: RunnerSettings) -> None:
    """The client left just as one step ended and the next waited for the session (behind
    the first's rollback image): that step must not run to its timeout, holding a worker."""
    cancellation = Cancellation()
    request = RunnerRequest(**FOREVER, timeout_seconds=300)
    dataset = DatasetRegistry.load(settings.datasets).get("retail")
    failures: list[RunFailed] = []
    with SandboxRun(settings, request, dataset, cancellation) as run:
        run.load(dataset.tables())

        def query() -> None:
            with pytest.raises(RunFailed) as failed:
                run.python(request.python_code or "")
            failures.append(failed.value)

        worker = threading.Thread(target=query)
        with run.repl._lock:  # the step has passed its check and waits for the session
            worker.start()
            time.sleep(0.3)
            cancellation.cancel()
        worker.join(timeout=30)
        stopped = not worker.is_alive()
        if not stopped:  # a lost cancel: the step spins to its timeout
            run.repl.cancel()
            worker.join()
    assert stopped, "the cancel was lost: the step ran on"
    assert len(failures) == 1
    assert failures[0].code is ErrorCode.RUNNER_CANCELLED
    assert "during the query" in str(failures[0])
