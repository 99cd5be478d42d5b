"""Tests for SandboxResult, RuntimeType and LimitKind."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import pydantic
import pytest

from sandbox_kernel.core.results import LimitKind, RuntimeType, SandboxResult

# --- RuntimeType --------------------------------------------------------------------------


def test_runtime_values() -> None:
    assert [member.value for member in RuntimeType] == ["python", "javascript"]


@pytest.mark.parametrize("member", list(RuntimeType), ids=lambda m: m.value)
def test_runtime_is_a_string(member: RuntimeType) -> None:
    assert isinstance(member, str)
    assert isinstance(member, Enum)
    assert member == member.value
    assert str(member) == member.value
    assert f"{member}" == member.value
    assert json.dumps(member) == f'"{member.value}"'


def test_runtime_from_its_value_in_any_case() -> None:
    assert RuntimeType("python") is RuntimeType.PYTHON
    assert RuntimeType("JavaScript") is RuntimeType.JAVASCRIPT


def test_unknown_runtime_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="ruby"):
        RuntimeType("ruby")


# --- LimitKind ----------------------------------------------------------------------------


def test_limit_kind_values() -> None:
    assert {member.name: member.value for member in LimitKind} == {
        "FUEL": "fuel",
        "TIMEOUT": "timeout",
        "MEMORY": "memory",
        "OUTPUT": "output",
        "OPEN_FILES": "open_files",
        "FILE_SIZE": "file_size",
        "TRAP": "trap",
    }
    assert all(isinstance(member, str) for member in LimitKind)


# --- SandboxResult ------------------------------------------------------------------------


def test_defaults() -> None:
    result = SandboxResult(success=True)
    assert result.model_dump() == {
        "success": True,
        "stdout": "",
        "stderr": "",
        "exit_code": None,
        "fuel_consumed": 0,
        "startup_fuel": 0,
        "user_fuel": 0,
        "memory_used_bytes": 0,
        "duration_ms": 0.0,
        "files_created": [],
        "files_modified": [],
        "workspace_path": None,
        "stdout_truncated": False,
        "stderr_truncated": False,
        "limit": None,
        "runtime": RuntimeType.PYTHON,
        "error": None,
    }
    assert result.truncated is False


def test_success_is_required() -> None:
    with pytest.raises(pydantic.ValidationError):
        SandboxResult()  # type: ignore[call-arg]


def _full_result() -> SandboxResult:
    return SandboxResult(
        success=False,
        stdout="partial ✓\n",
        stderr="Traceback...\n",
        exit_code=None,
        fuel_consumed=2_000_000_000,
        memory_used_bytes=33_554_432,
        duration_ms=1234.567,
        files_created=["out/b.csv", "a.txt"],
        files_modified=["data.json"],
        workspace_path=Path("/tmp/ws"),
        stdout_truncated=True,
        limit=LimitKind.FUEL,
        runtime=RuntimeType.JAVASCRIPT,
        error="out of fuel after 2,000,000,000 instructions",
    )


def test_json_round_trip_gives_an_equal_result() -> None:
    result = _full_result()
    again = SandboxResult.model_validate_json(result.model_dump_json())
    assert again == result
    assert again.workspace_path == Path("/tmp/ws")
    assert again.limit is LimitKind.FUEL
    assert again.runtime is RuntimeType.JAVASCRIPT


def test_json_uses_plain_values() -> None:
    data = json.loads(_full_result().model_dump_json())
    assert data["limit"] == "fuel"
    assert data["runtime"] == "javascript"
    assert data["workspace_path"] == "/tmp/ws"
    assert "truncated" not in data


@pytest.mark.parametrize(
    ("stdout_truncated", "stderr_truncated", "expected"),
    [(False, False, False), (True, False, True), (False, True, True), (True, True, True)],
    ids=["neither", "stdout", "stderr", "both"],
)
def test_truncated(stdout_truncated: bool, stderr_truncated: bool, expected: bool) -> None:
    result = SandboxResult(
        success=True, stdout_truncated=stdout_truncated, stderr_truncated=stderr_truncated
    )
    assert result.truncated is expected


def test_file_lists_are_sorted_without_repeats() -> None:
    result = SandboxResult(success=True, files_created=["z.txt", "a/b.txt", "z.txt", "a.txt"])
    assert result.files_created == ["a.txt", "a/b.txt", "z.txt"]


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../outside.txt", "a/../../b", "dir\\file.txt", ""],
    ids=["absolute", "parent", "nested-parent", "backslash", "empty"],
)
@pytest.mark.parametrize("field", ["files_created", "files_modified"])
def test_file_lists_hold_paths_inside_the_workspace(field: str, path: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="relative to the workspace"):
        SandboxResult.model_validate({"success": True, field: [path]})


@pytest.mark.parametrize(
    ("field", "value"),
    [("fuel_consumed", -1), ("memory_used_bytes", -1), ("duration_ms", -0.1)],
)
def test_counters_are_never_negative(field: str, value: float) -> None:
    with pytest.raises(pydantic.ValidationError):
        SandboxResult.model_validate({"success": True, field: value})


def test_duration_must_be_finite() -> None:
    with pytest.raises(pydantic.ValidationError):
        SandboxResult(success=True, duration_ms=float("inf"))


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(pydantic.ValidationError):
        SandboxResult.model_validate({"success": True, "truncated": True})


def test_result_is_frozen() -> None:
    result = SandboxResult(success=True)
    with pytest.raises(pydantic.ValidationError):
        result.stdout = "changed"


def test_limit_and_runtime_accept_their_values() -> None:
    result = SandboxResult.model_validate({"success": False, "limit": "trap", "runtime": "python"})
    assert result.limit is LimitKind.TRAP
    assert result.runtime is RuntimeType.PYTHON
