"""Attacks on the runner's host-side paths (issue 12): what a request makes the runner answer
and store is capped by its own max_output_bytes, and its time by its own timeout_seconds.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel.runner import RunnerResponse, RunnerSettings, execute_python
from tests.runner.conftest import DATASETS, RunPython


@pytest.fixture
def settings(tmp_path: Path) -> RunnerSettings:
    return RunnerSettings(
        datasets=DATASETS, capsules=tmp_path / "capsules.sqlite3", enable_python_execution=True
    )


@pytest.fixture
def run_python(settings: RunnerSettings) -> RunPython:
    def run(code: str, dataset: str = "retail", **limits: Any) -> RunnerResponse:
        return execute_python(dataset, code, settings=settings, **limits)

    return run


def test_a_huge_error_message_is_capped_in_the_response_and_capsule(
    run_python: RunPython, settings: RunnerSettings
) -> None:
    response = run_python("raise ValueError('e' * 20_000_000)", max_output_bytes=1000)
    assert response.status.value == "error"
    assert response.error is not None
    assert len(response.error.message.encode()) <= 1000
    assert "cut at max_output_bytes" in response.error.message
    assert len(response.model_dump_json()) < 10_000
    with sqlite3.connect(settings.capsules) as db:
        (stored,) = db.execute("select capsule from capsules").fetchone()
    assert len(stored) < 10_000, f"the capsule stored {len(stored):,} bytes"


def test_a_huge_column_name_is_capped(run_python: RunPython) -> None:
    response = run_python("result_df = pd.DataFrame({'c' * 20_000_000: [1, 2]})")
    assert response.status.value == "success", response.error
    assert len(response.columns[0]) <= 1_000 and "omitted" in response.columns[0]
    assert len(response.model_dump_json()) < 100_000


def test_the_request_timeout_bounds_the_whole_request(settings: RunnerSettings) -> None:
    """A result whose repr sleeps: collecting it is guest code too, bounded by the request."""
    code = (
        "import time\n"
        "class Slow:\n"
        "    def __repr__(self):\n        time.sleep(30); return 'slow'\n"
        "    def __str__(self):\n        time.sleep(30); return 'slow'\n"
        "time.sleep(2)\n"
        "result = Slow()"
    )
    started = time.monotonic()
    response = execute_python("retail", code, settings=settings, timeout_seconds=3)
    elapsed = time.monotonic() - started
    assert response.status.value == "error", json.dumps(response.model_dump(mode="json"))[:500]
    assert elapsed < 3 + 3, f"a 3 s request took {elapsed:.1f} s"
