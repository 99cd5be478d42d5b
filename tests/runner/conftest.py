"""Shared fixtures for the runner tests: the project's example datasets, the real guest.

Every run goes through the real WebAssembly sandbox (a fresh session per request, started from
the warm image: about a quarter of a second). `settings` records capsules in a folder of the
test session, never in the developer's data folder; Python execution is on unless a test
asks for the default (`settings_default_flag`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import pytest

from sandbox_kernel.runner import (
    GuardConfig,
    RunnerResponse,
    RunnerSettings,
    execute_python,
    execute_sql,
)
from sandbox_kernel.runner.guard import DEFAULT_ALLOWED_IMPORTS, DEFAULT_BLOCKED_MODULES

REPO = Path(__file__).resolve().parents[2]
DATASETS = REPO / "datasets" / "datasets.toml"
GOLDEN = REPO / "datasets" / "golden"

# A guard that lets the dangerous modules and builtins through, to show what the sandbox
# itself contains when the AST check is not there.
PERMISSIVE_GUARD = GuardConfig(
    allowed_imports=(*DEFAULT_ALLOWED_IMPORTS, *DEFAULT_BLOCKED_MODULES, "urllib", "sqlite3"),
    blocked_modules=(),
    blocked_builtins=(),
    block_dunders=False,
    block_computed_attributes=False,
    blocked_attributes=(),
    block_private_attributes=False,
    block_runtime_formats=False,
)


class RunPython(Protocol):
    def __call__(self, code: str, dataset: str = "retail", **limits: Any) -> RunnerResponse: ...


class RunSql(Protocol):
    def __call__(self, sql: str, dataset: str = "retail", **limits: Any) -> RunnerResponse: ...


@pytest.fixture(scope="session")
def capsules_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("capsules") / "capsules.sqlite3"


@pytest.fixture(scope="session")
def settings(capsules_path: Path) -> RunnerSettings:
    return RunnerSettings(datasets=DATASETS, capsules=capsules_path, enable_python_execution=True)


@pytest.fixture(scope="session")
def settings_default_flag(capsules_path: Path) -> RunnerSettings:
    return RunnerSettings(datasets=DATASETS, capsules=capsules_path)


@pytest.fixture(scope="session")
def permissive(settings: RunnerSettings) -> RunnerSettings:
    return settings.model_copy(update={"guard": PERMISSIVE_GUARD})


@pytest.fixture(scope="session")
def run_python(settings: RunnerSettings) -> RunPython:
    def run(code: str, dataset: str = "retail", **limits: Any) -> RunnerResponse:
        return execute_python(dataset, code, settings=settings, **limits)

    return run


@pytest.fixture(scope="session")
def run_sql(settings: RunnerSettings) -> RunSql:
    def run(sql: str, dataset: str = "retail", **limits: Any) -> RunnerResponse:
        return execute_sql(dataset, sql, settings=settings, **limits)

    return run


def describe(response: RunnerResponse) -> str:
    """Enough of a response to see why an assertion failed."""
    return response.model_dump_json(exclude={"rows"})[:2000]


def ok(response: RunnerResponse) -> RunnerResponse:
    assert response.ok, describe(response)
    return response
