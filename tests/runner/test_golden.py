"""The golden queries: one Python and one SQL query per example dataset, with the exact
columns and rows each must return (datasets/golden/expected.json, computed independently of
pandas with the host's csv and sqlite3 modules)."""

from __future__ import annotations

import json

import pytest

from sandbox_kernel.runner import RunnerSettings, execute_python, execute_sql
from tests.runner.conftest import GOLDEN, ok

EXPECTED = json.loads((GOLDEN / "expected.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_query(settings: RunnerSettings, name: str) -> None:
    dataset, kind = name.split(".")
    query = (GOLDEN / name).read_text()
    run = execute_python if kind == "py" else execute_sql
    response = ok(run(dataset, query, settings=settings))
    assert response.columns == EXPECTED[name]["columns"]
    assert response.rows == EXPECTED[name]["rows"]
    assert response.truncated is False


def test_every_dataset_has_a_python_and_a_sql_golden_query() -> None:
    assert sorted(EXPECTED) == ["retail.py", "retail.sql", "weather.py", "weather.sql"]
