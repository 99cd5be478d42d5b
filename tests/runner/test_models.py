"""RunnerRequest validation (every rule) and RunnerResponse's own consistency checks.

Invalid requests through run_request come back as VALIDATION_ERROR responses, never as
exceptions; nothing reaches the sandbox.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from sandbox_kernel.runner import (
    ErrorCode,
    QueryType,
    RunnerRequest,
    RunnerResponse,
    RunnerSettings,
    RunStatus,
    run_request,
)
from sandbox_kernel.runner.models import validation_messages

SQL = {"query_type": "sql", "dataset_id": "retail", "sql": "SELECT 1"}
PYTHON = {"query_type": "python", "dataset_id": "retail", "python_code": "result = 1"}


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        RunnerRequest.model_validate(data)
    return validation_messages(caught.value)


def test_a_minimal_request_gets_the_defaults() -> None:
    request = RunnerRequest.model_validate(SQL)
    assert request.query_type is QueryType.SQL
    assert (request.timeout_seconds, request.max_rows, request.max_output_bytes) == (
        10.0,
        1_000,
        1_000_000,
    )
    assert request.files is None and request.query == "SELECT 1"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"python_code": "x = 1"}, "sql and python_code are mutually exclusive"),
        ({"sql": None}, "query_type 'sql' needs the sql field"),
        ({"query_type": "python"}, "query_type 'python' needs the python_code field"),
        ({"query_type": "r"}, "query_type: must be one of 'sql' or 'python'"),
        ({"sql": "   \n"}, "sql: must not be empty"),
        ({"sql": "SELECT '\0'"}, "sql: must not contain NUL"),
        ({"sql": "x" * 100_001}, "sql: must be at most 100,000 characters"),
        ({"dataset_id": "../etc"}, "dataset_id: must match"),
        ({"dataset_id": ""}, "dataset_id: must match"),
        ({"dataset_id": "a" * 65}, "dataset_id: must match"),
        ({"timeout_seconds": 0}, "timeout_seconds: must be > 0"),
        ({"timeout_seconds": -1}, "timeout_seconds: must be > 0"),
        ({"timeout_seconds": math.inf}, "timeout_seconds: must be a finite number"),
        ({"timeout_seconds": math.nan}, "timeout_seconds: must be a finite number"),
        ({"timeout_seconds": 301}, "timeout_seconds: must be <= 300.0"),
        ({"timeout_seconds": True}, "timeout_seconds: must be a number, not a boolean"),
        ({"max_rows": 0}, "max_rows: must be > 0"),
        ({"max_rows": 100_001}, "max_rows: must be <= 100000"),
        ({"max_rows": True}, "max_rows: must be a number, not a boolean"),
        ({"max_rows": 1.5}, "max_rows: input should be a valid integer"),
        ({"max_output_bytes": 0}, "max_output_bytes: must be > 0"),
        ({"max_output_bytes": 50_000_001}, "max_output_bytes: must be <= 50000000"),
        ({"files": []}, "files: must name at least one file"),
        ({"files": ["a.csv", "a.csv"]}, "files: names a file more than once: a.csv"),
        ({"files": ["../x.csv"]}, "files.0: must be a file name of the dataset"),
        ({"files": ["/etc/passwd"]}, "files.0: must be a file name of the dataset"),
        ({"files": [".."]}, "files.0: must be a file name of the dataset"),
        ({"files": "orders.csv"}, "files: input should be a valid tuple"),
        ({"limit": 5}, "limit: unknown field"),
    ],
    ids=[
        "both-queries",
        "sql-without-sql",
        "python-without-code",
        "unknown-query-type",
        "blank-sql",
        "nul-in-sql",
        "sql-too-long",
        "dataset-path",
        "dataset-empty",
        "dataset-too-long",
        "timeout-zero",
        "timeout-negative",
        "timeout-inf",
        "timeout-nan",
        "timeout-too-long",
        "timeout-bool",
        "rows-zero",
        "rows-too-many",
        "rows-bool",
        "rows-float",
        "bytes-zero",
        "bytes-too-many",
        "files-empty",
        "files-repeated",
        "files-folder",
        "files-absolute",
        "files-dotdot",
        "files-not-a-list",
        "unknown-field",
    ],
)
def test_every_rule_is_checked(change: dict[str, Any], expected: str) -> None:
    found = problems({**SQL, **change})
    assert any(message.startswith(expected) for message in found), found


def test_required_fields_are_named() -> None:
    assert problems({}) == ["query_type: is required", "dataset_id: is required"]


def test_python_code_has_its_own_limits() -> None:
    assert problems({**PYTHON, "python_code": ""}) == ["python_code: must not be empty"]
    assert problems({**PYTHON, "python_code": "x" * 1_000_001}) == [
        "python_code: must be at most 1,000,000 characters"
    ]


def test_all_field_problems_are_reported_at_once() -> None:
    found = problems({**SQL, "max_rows": 0, "max_output_bytes": -1, "extra": 1})
    assert len(found) == 3, found


@pytest.mark.parametrize(
    "request_data",
    [
        {**SQL, "max_rows": -5},
        {**PYTHON, "sql": "SELECT 1"},
        {"dataset_id": "retail"},
        "not json",
        b"\xff\xfe",
        "[1, 2]",
    ],
    ids=["bad-limit", "both-queries", "no-query-type", "not-json", "not-utf8", "not-an-object"],
)
def test_invalid_requests_come_back_as_validation_errors(
    settings: RunnerSettings, request_data: Any
) -> None:
    response = run_request(request_data, settings=settings)
    assert response.status is RunStatus.ERROR
    assert response.error is not None and response.error.type is ErrorCode.VALIDATION_ERROR
    assert response.error.details, "each problem is listed"
    assert response.run_id is not None, "refused runs are recorded too"


def test_an_entrypoint_fills_in_and_checks_the_query_type(settings: RunnerSettings) -> None:
    wrong = run_request({**PYTHON}, settings=settings, query_type=QueryType.SQL)
    assert wrong.error is not None and wrong.error.type is ErrorCode.VALIDATION_ERROR
    assert "answers 'sql' requests" in wrong.error.message
    bare = {"dataset_id": "nowhere", "sql": "SELECT 1"}
    filled = run_request(bare, settings=settings, query_type=QueryType.SQL)
    assert filled.query_type is QueryType.SQL
    assert filled.error is not None and "unknown dataset_id 'nowhere'" in filled.error.message


def test_an_unknown_dataset_lists_the_registered_ones(settings: RunnerSettings) -> None:
    response = run_request({**SQL, "dataset_id": "sales"}, settings=settings)
    assert response.error is not None and response.error.type is ErrorCode.VALIDATION_ERROR
    assert response.error.message == (
        "dataset_id: unknown dataset_id 'sales'; registered: retail, weather"
    )


def test_unknown_files_list_the_dataset_s_tables(settings: RunnerSettings) -> None:
    response = run_request({**SQL, "files": ["orders.csv", "refunds.csv"]}, settings=settings)
    assert response.error is not None and response.error.type is ErrorCode.VALIDATION_ERROR
    assert "no file or table 'refunds.csv'" in response.error.message
    assert "orders.csv (orders)" in response.error.message


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"status": "success", "error": {"type": "RUNNER_TIMEOUT", "message": "x"}}, "no error"),
        ({"status": "error"}, "a failed one has one"),
        (
            {"status": "timeout", "error": {"type": "PYTHON_EXECUTION_ERROR", "message": "x"}},
            "RUNNER_TIMEOUT",
        ),
        ({"status": "success", "rows": [[1]], "columns": ["a"]}, "row_count is 0"),
        ({"status": "success", "rows": [[1, 2]], "columns": ["a"], "row_count": 1}, "2 values"),
    ],
    ids=["success-with-error", "error-without-error", "timeout-wrong-type", "count", "width"],
)
def test_a_response_is_consistent(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RunnerResponse.model_validate(fields)


def test_failure_builds_a_timeout_for_runner_timeout() -> None:
    response = RunnerResponse.failure(ErrorCode.RUNNER_TIMEOUT, "too slow")
    assert response.status is RunStatus.TIMEOUT and not response.ok
    other = RunnerResponse.failure(ErrorCode.SQL_EXECUTION_ERROR, "no such table: x")
    assert other.status is RunStatus.ERROR
