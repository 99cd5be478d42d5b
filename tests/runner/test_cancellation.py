"""A run stopped from another thread (what the agent server does when its client leaves):
it ends as RUNNER_CANCELLED, long before its timeout, and is recorded."""

from __future__ import annotations

import threading
import time

from sandbox_kernel.runner import ErrorCode, RunnerSettings, run_request
from sandbox_kernel.runner.capsules import CapsuleStore
from sandbox_kernel.runner.engine import Cancellation

FOREVER = {"query_type": "python", "dataset_id": "retail", "python_code": "while True:\n    pass"}


def test_a_cancel_stops_the_running_step(settings: RunnerSettings) -> None:
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
