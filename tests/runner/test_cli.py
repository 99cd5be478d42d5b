"""The runner's commands end to end: `sandbox-kernel runner sql|python|datasets` and
`sandbox-kernel capsules list|show`, each a real process reading stdin and printing JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.runner.conftest import DATASETS, GOLDEN

VENV_BIN = Path(sys.executable).parent


def _command() -> list[str]:
    script = VENV_BIN / "sandbox-kernel"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sandbox_kernel.cli"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("cli")
    environment = dict(os.environ)
    environment["SANDBOX_KERNEL_DATASETS"] = str(DATASETS)
    environment["SANDBOX_KERNEL_CAPSULES"] = str(folder / "capsules.sqlite3")
    environment.pop("ENABLE_PYTHON_EXECUTION", None)
    return environment


def sandbox_kernel(
    env: dict[str, str], *args: str, stdin: str = "", **extra_env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_command(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**env, **extra_env},
        timeout=120,
        check=False,
    )


def response_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = done.stdout.splitlines()
    assert len(lines) == 1, f"one JSON line expected: {done.stdout!r} {done.stderr!r}"
    parsed: dict[str, Any] = json.loads(lines[0])
    return parsed


def test_runner_sql_answers_on_stdout(env: dict[str, str]) -> None:
    request = {"dataset_id": "weather", "sql": (GOLDEN / "weather.sql").read_text()}
    done = sandbox_kernel(env, "runner", "sql", stdin=json.dumps(request))
    assert done.returncode == 0, done.stderr
    response = response_of(done)
    expected = json.loads((GOLDEN / "expected.json").read_text())["weather.sql"]
    assert response["status"] == "success" and response["rows"] == expected["rows"]
    assert response["query_type"] == "sql" and response["run_id"]


def test_runner_python_honours_the_flag(env: dict[str, str]) -> None:
    request = json.dumps({"dataset_id": "retail", "python_code": "result = len(orders)"})
    disabled = sandbox_kernel(env, "runner", "python", stdin=request)
    assert disabled.returncode == 2
    assert response_of(disabled)["error"]["type"] == "PYTHON_EXECUTION_DISABLED"
    enabled = sandbox_kernel(env, "runner", "python", stdin=request, ENABLE_PYTHON_EXECUTION="1")
    assert enabled.returncode == 0, enabled.stderr
    assert response_of(enabled)["rows"] == [[30]]


@pytest.mark.parametrize(
    ("command", "stdin", "status", "error"),
    [
        (
            "python",
            '{"dataset_id": "retail", "python_code": "result = 1/0"}',
            1,
            "PYTHON_EXECUTION_ERROR",
        ),
        (
            "python",
            '{"dataset_id": "retail", "python_code": "import os"}',
            1,
            "PYTHON_POLICY_VIOLATION",
        ),
        ("sql", '{"dataset_id": "retail", "sql": "DELETE FROM orders"}', 1, "SQL_POLICY_VIOLATION"),
        ("sql", '{"dataset_id": "retail", "sql": "SELECT * FROM nope"}', 1, "SQL_EXECUTION_ERROR"),
        ("sql", "{not json", 2, "VALIDATION_ERROR"),
        ("sql", '{"dataset_id": "retail", "python_code": "result = 1"}', 2, "VALIDATION_ERROR"),
        ("sql", '{"dataset_id": "nowhere", "sql": "SELECT 1"}', 2, "VALIDATION_ERROR"),
    ],
    ids=[
        "code-error",
        "policy",
        "sql-policy",
        "sql-error",
        "not-json",
        "wrong-entrypoint",
        "unknown-dataset",
    ],
)
def test_the_exit_status_reflects_the_outcome(
    env: dict[str, str], command: str, stdin: str, status: int, error: str
) -> None:
    done = sandbox_kernel(env, "runner", command, stdin=stdin, ENABLE_PYTHON_EXECUTION="1")
    assert done.returncode == status, done.stdout + done.stderr
    assert response_of(done)["error"]["type"] == error


def test_a_broken_configuration_still_answers_in_json(env: dict[str, str]) -> None:
    done = sandbox_kernel(
        env,
        "runner",
        "sql",
        stdin='{"dataset_id": "retail", "sql": "SELECT 1"}',
        ENABLE_PYTHON_EXECUTION="perhaps",
    )
    assert done.returncode == 2
    assert response_of(done)["error"]["type"] == "RUNNER_INTERNAL_ERROR"
    assert "ENABLE_PYTHON_EXECUTION must be" in done.stderr


def test_runner_datasets_lists_the_registry(env: dict[str, str]) -> None:
    done = sandbox_kernel(env, "runner", "datasets")
    assert done.returncode == 0, done.stderr
    described = [json.loads(line) for line in done.stdout.splitlines()]
    assert [d["id"] for d in described] == ["retail", "weather"]
    assert str(DATASETS.parent) not in done.stdout


def test_capsules_list_and_show(env: dict[str, str]) -> None:
    request = json.dumps({"dataset_id": "retail", "sql": "SELECT COUNT(*) AS n FROM customers"})
    run_id = response_of(sandbox_kernel(env, "runner", "sql", stdin=request))["run_id"]
    listed = sandbox_kernel(env, "capsules", "list", "--limit", "3")
    assert listed.returncode == 0, listed.stderr
    header, newest = listed.stdout.splitlines()[:2]
    assert header.split()[:2] == ["ID", "CREATED"] and newest.startswith(run_id)
    as_json = sandbox_kernel(env, "capsules", "list", "--json", "--limit", "1")
    assert json.loads(as_json.stdout)["id"] == run_id
    shown = sandbox_kernel(env, "capsules", "show", run_id[:8])
    assert shown.returncode == 0, shown.stderr
    capsule = json.loads(shown.stdout)
    assert capsule["code"] == "SELECT COUNT(*) AS n FROM customers"
    assert capsule["response"]["rows"] == [[12]]
    missing = sandbox_kernel(env, "capsules", "show", "ffffffffffff")
    assert missing.returncode == 2 and "no capsule has the id" in missing.stderr
