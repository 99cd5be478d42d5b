"""Tests for ExecutionPolicy: defaults, validation, env, grants, copies, snapshots."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pydantic
import pytest

from sandbox_kernel.core.errors import FieldError, PolicyValidationError
from sandbox_kernel.core.policy import DEFAULT_ENV, ExecutionPolicy

POSITIVE_INT_FIELDS = [
    "fuel_budget",
    "memory_bytes",
    "stdout_max_bytes",
    "stderr_max_bytes",
    "max_open_files",
    "max_file_bytes",
    "workspace_max_bytes",
]


def _only_error(exc: PolicyValidationError) -> FieldError:
    assert len(exc.errors) == 1, exc.errors
    return exc.errors[0]


# --- defaults -----------------------------------------------------------------------------


def test_defaults() -> None:
    policy = ExecutionPolicy()
    assert policy.fuel_budget == 2_000_000_000
    assert policy.memory_bytes == 128_000_000
    assert policy.stdout_max_bytes == 2_000_000
    assert policy.stderr_max_bytes == 1_000_000
    assert policy.timeout_seconds == 30.0
    assert policy.mount_host_dir == Path("workspace")
    assert policy.guest_mount_path == "/app"
    assert policy.mount_data_dir is None
    assert policy.guest_data_path == "/data"
    assert policy.env == {"PYTHONUTF8": "1", "LC_ALL": "C.UTF-8"}
    assert policy.inherit_env == ()
    assert policy.max_open_files == 256
    assert policy.max_file_bytes == 256 * 1024 * 1024
    assert policy.workspace_max_bytes == 1024 * 1024 * 1024


def test_default_env_is_not_shared_between_policies() -> None:
    first, second = ExecutionPolicy(), ExecutionPolicy()
    assert first.env is not second.env
    assert dict(DEFAULT_ENV) == first.env


def test_fields_are_documented() -> None:
    for name, field in ExecutionPolicy.model_fields.items():
        assert field.description, name


# --- numeric limits -----------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, -(10**12)], ids=["zero", "minus-one", "huge-negative"])
@pytest.mark.parametrize("field", POSITIVE_INT_FIELDS)
def test_positive_limits_reject_zero_and_negatives(field: str, value: int) -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(**{field: value})
    assert _only_error(info.value) == FieldError(field, "must be > 0", value)
    assert str(info.value) == f"invalid policy: {field}: must be > 0 (got {value})"


@pytest.mark.parametrize("field", POSITIVE_INT_FIELDS)
def test_positive_limits_accept_one(field: str) -> None:
    assert getattr(ExecutionPolicy(**{field: 1}), field) == 1


@pytest.mark.parametrize("field", [*POSITIVE_INT_FIELDS, "timeout_seconds"])
def test_limits_refuse_booleans(field: str) -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(**{field: True})
    assert _only_error(info.value).message == "must be a number, not a boolean"


def test_limits_refuse_text() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(fuel_budget="lots")
    error = _only_error(info.value)
    assert (error.field, error.value) == ("fuel_budget", "lots")
    assert "integer" in error.message


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "must be > 0"),
        (-0.5, "must be > 0"),
        (math.inf, "must be a finite number"),
        (math.nan, "must be a finite number"),
    ],
    ids=["zero", "negative", "inf", "nan"],
)
def test_timeout_must_be_positive_and_finite(value: float, message: str) -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(timeout_seconds=value)
    error = _only_error(info.value)
    assert (error.field, error.message) == ("timeout_seconds", message)


def test_timeout_accepts_fractions_and_integers() -> None:
    assert ExecutionPolicy(timeout_seconds=0.25).timeout_seconds == 0.25
    assert ExecutionPolicy(timeout_seconds=5).timeout_seconds == 5.0


def test_every_bad_field_is_reported_at_once() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(fuel_budget=0, memory_bytes=-1, guest_mount_path="app")
    assert [e.field for e in info.value.errors] == [
        "fuel_budget",
        "memory_bytes",
        "guest_mount_path",
    ]
    assert len(str(info.value).splitlines()) == 4


# --- how errors surface -------------------------------------------------------------------


def test_constructor_raises_policy_error_not_pydantic_error() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(fuel_budget=-1)
    assert not isinstance(info.value, pydantic.ValidationError)
    assert isinstance(info.value, ValueError)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_model_validate_raises_policy_error() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy.model_validate({"fuel_budget": -1, "memory_bytes": 0})
    assert [e.field for e in info.value.errors] == ["fuel_budget", "memory_bytes"]


def test_model_validate_of_a_non_mapping_raises_policy_error() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy.model_validate(3)
    assert _only_error(info.value).field == ""


def test_model_validate_json_raises_policy_error() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy.model_validate_json('{"stdout_max_bytes": 0}')
    assert _only_error(info.value) == FieldError("stdout_max_bytes", "must be > 0", 0)


def test_model_validate_strings_raises_policy_error() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy.model_validate_strings({"max_open_files": "-3"})
    assert _only_error(info.value).field == "max_open_files"


def test_unknown_field_is_named() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(fuel=5)
    assert _only_error(info.value) == FieldError("fuel", "unknown field", 5)


def test_json_round_trip() -> None:
    policy = ExecutionPolicy(
        fuel_budget=7,
        mount_data_dir=Path("/srv/data"),
        env={"A": "b"},
        inherit_env=("HOME",),
    )
    assert ExecutionPolicy.model_validate_json(policy.model_dump_json()) == policy


def test_model_validate_returns_a_policy() -> None:
    policy = ExecutionPolicy.model_validate({"fuel_budget": 10, "env": {"X": "1"}})
    assert policy.fuel_budget == 10
    assert policy.env["X"] == "1"


# --- frozen value -------------------------------------------------------------------------


def test_policy_is_frozen() -> None:
    policy = ExecutionPolicy()
    with pytest.raises(pydantic.ValidationError):
        policy.fuel_budget = 1


def test_equal_policies_hash_equal_and_can_key_a_dict() -> None:
    first = ExecutionPolicy(env={"A": "1", "B": "2"})
    second = ExecutionPolicy(env={"B": "2", "A": "1"})
    assert first == second
    assert hash(first) == hash(second)
    assert {first: "cached"}[second] == "cached"
    assert hash(first) != hash(ExecutionPolicy(env={"A": "2", "B": "2"}))


# --- env ----------------------------------------------------------------------------------


def test_env_is_merged_over_the_defaults() -> None:
    policy = ExecutionPolicy(env={"LC_ALL": "en_US.UTF-8", "FOO": "bar"})
    assert policy.env == {"PYTHONUTF8": "1", "LC_ALL": "en_US.UTF-8", "FOO": "bar"}


def test_empty_env_keeps_the_defaults() -> None:
    assert ExecutionPolicy(env={}).env == dict(DEFAULT_ENV)


@pytest.mark.parametrize(
    ("env", "field", "message"),
    [
        ({"": "x"}, "env['']", "name must not be empty"),
        ({"A=B": "x"}, "env['A=B']", "name must not contain '='"),
        ({"A\0B": "x"}, "env['A\\x00B']", "name must not contain NUL"),
        ({"FOO": "a\0b"}, "env.FOO", "value must not contain NUL"),
    ],
    ids=["empty-name", "equals-in-name", "nul-in-name", "nul-in-value"],
)
def test_bad_env_entries(env: dict[str, str], field: str, message: str) -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(env=env)
    error = _only_error(info.value)
    assert (error.field, error.message) == (field, message)


def test_env_values_must_be_text() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(env={"FOO": 1})
    assert _only_error(info.value).field == "env.FOO"


def test_env_must_be_a_mapping() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(env=["FOO=1"])
    assert _only_error(info.value).field == "env"


# --- guest paths --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("/work", "/work"),
        ("/app/", "/app"),
        ("//srv//app", "/srv/app"),
        ("/srv/./app", "/srv/app"),
        ("/usr/lib", "/usr/lib"),
        ("/usr/local/share", "/usr/local/share"),
        ("/with space", "/with space"),
    ],
    ids=["plain", "trailing-slash", "double-slashes", "dot", "usr-lib", "usr-local-share", "space"],
)
@pytest.mark.parametrize("field", ["guest_mount_path", "guest_data_path"])
def test_guest_paths_accepted_and_normalised(field: str, given: str, stored: str) -> None:
    # Keep the other guest path out of the way: "/data" would not clash, but be explicit.
    other = "guest_data_path" if field == "guest_mount_path" else "guest_mount_path"
    policy = ExecutionPolicy(**{field: given, other: "/elsewhere"})
    assert getattr(policy, field) == stored


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("app", "absolute"),
        ("", "absolute"),
        ("./app", "absolute"),
        ("C:\\app", "absolute"),
        ("/", "root"),
        ("//", "root"),
        ("/./", "root"),
        ("/app/../etc", "'..'"),
        ("/..", "'..'"),
        ("/app\0x", "NUL"),
        ("/usr", "/usr/local/lib"),
        ("/usr/local", "/usr/local/lib"),
        ("/usr/local/lib", "/usr/local/lib"),
        ("/usr/local/lib/", "/usr/local/lib"),
        ("/usr/local/lib/python3.15", "/usr/local/lib"),
    ],
    ids=[
        "relative",
        "empty",
        "dot-relative",
        "windows",
        "root",
        "double-root",
        "dot-root",
        "dotdot",
        "dotdot-at-root",
        "nul",
        "usr",
        "usr-local",
        "image-mount",
        "image-mount-slash",
        "under-image-mount",
    ],
)
@pytest.mark.parametrize("field", ["guest_mount_path", "guest_data_path"])
def test_guest_paths_refused(field: str, given: str, fragment: str) -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(**{field: given})
    error = _only_error(info.value)
    assert (error.field, error.value) == (field, given)
    assert fragment in error.message


@pytest.mark.parametrize(
    ("mount", "data"),
    [("/data", "/data"), ("/app/", "/app"), ("/app", "/app/data"), ("/srv/app", "/srv")],
    ids=["same", "same-after-normalising", "data-inside-workspace", "workspace-inside-data"],
)
def test_data_path_must_stay_apart_from_the_workspace(mount: str, data: str) -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(guest_mount_path=mount, guest_data_path=data)
    error = _only_error(info.value)
    assert error.field == "guest_data_path"
    assert "guest_mount_path" in error.message


def test_moving_the_workspace_onto_the_default_data_path_is_refused() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(guest_mount_path="/data")
    assert _only_error(info.value).field == "guest_data_path"


def test_sibling_paths_with_a_common_prefix_are_apart() -> None:
    policy = ExecutionPolicy(guest_mount_path="/app", guest_data_path="/apple")
    assert (policy.guest_mount_path, policy.guest_data_path) == ("/app", "/apple")


# --- host folders -------------------------------------------------------------------------


def test_host_dirs_become_paths() -> None:
    policy = ExecutionPolicy(mount_host_dir="ws", mount_data_dir="/srv/data")
    assert policy.mount_host_dir == Path("ws")
    assert policy.mount_data_dir == Path("/srv/data")


@pytest.mark.parametrize(
    ("value", "message"),
    [("", "must not be empty"), ("ws\0x", "must not contain NUL"), (Path("a\0b"), "NUL")],
    ids=["empty", "nul", "nul-in-path"],
)
@pytest.mark.parametrize("field", ["mount_host_dir", "mount_data_dir"])
def test_bad_host_dirs(field: str, value: object, message: str) -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(**{field: value})
    error = _only_error(info.value)
    assert error.field == field
    assert message in error.message


def test_workspace_cannot_be_none() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(mount_host_dir=None)
    assert _only_error(info.value).field == "mount_host_dir"


# --- inherited host variables -------------------------------------------------------------


def test_inherit_env_accepts_plain_names_and_drops_repeats() -> None:
    policy = ExecutionPolicy(inherit_env=["HOME", "LANG", "HOME"])
    assert policy.inherit_env == ("HOME", "LANG")


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "apikey",
        "GITHUB_TOKEN",
        "aws_secret_access_key",
        "DB_PASSWORD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SANDBOX_KERNEL_LLM_BASE_URL",
        "SANDBOX_KERNEL_LLM_MODEL",
        "sandbox_kernel_llm_api_key",
    ],
)
def test_inherit_env_refuses_secret_looking_names(name: str) -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(inherit_env=["HOME", name])
    error = _only_error(info.value)
    assert (error.field, error.value) == ("inherit_env[1]", name)
    assert "secret" in error.message


@pytest.mark.parametrize(
    ("name", "message"),
    [("", "name must not be empty"), ("A=B", "name must not contain '='")],
    ids=["empty", "equals"],
)
def test_inherit_env_refuses_malformed_names(name: str, message: str) -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(inherit_env=[name])
    assert _only_error(info.value) == FieldError("inherit_env[0]", message, name)


def test_inherit_env_must_be_a_sequence_not_one_string() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy(inherit_env="HOME")
    assert _only_error(info.value).field == "inherit_env"


# --- guest_env ----------------------------------------------------------------------------

HOST_ENV = {
    "HOME": "/home/me",
    "LANG": "fr_FR.UTF-8",
    "OPENAI_API_KEY": "sk-live-123",
    "PATH": "/usr/bin",
}


def test_guest_env_without_inheritance_is_the_policy_env() -> None:
    assert ExecutionPolicy().guest_env(HOST_ENV) == dict(DEFAULT_ENV)


def test_guest_env_copies_only_whitelisted_variables_that_are_set() -> None:
    policy = ExecutionPolicy(inherit_env=["HOME", "TZ"])
    assert policy.guest_env(HOST_ENV) == {**DEFAULT_ENV, "HOME": "/home/me"}


def test_guest_env_never_carries_an_unlisted_secret() -> None:
    env = ExecutionPolicy(inherit_env=["HOME", "LANG", "PATH"]).guest_env(HOST_ENV)
    assert "sk-live-123" not in env.values()
    assert "OPENAI_API_KEY" not in env


def test_explicit_env_wins_over_an_inherited_variable() -> None:
    policy = ExecutionPolicy(inherit_env=["LANG", "HOME"], env={"LANG": "C.UTF-8"})
    env = policy.guest_env(HOST_ENV)
    assert env["LANG"] == "C.UTF-8"
    assert env["HOME"] == "/home/me"


def test_guest_env_skips_a_host_value_with_nul() -> None:
    assert "HOME" not in ExecutionPolicy(inherit_env=["HOME"]).guest_env({"HOME": "a\0b"})


def test_guest_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SK_TEST_VISIBLE", "yes")
    monkeypatch.setenv("SK_TEST_HIDDEN", "no")
    env = ExecutionPolicy(inherit_env=["SK_TEST_VISIBLE"]).guest_env()
    assert env["SK_TEST_VISIBLE"] == "yes"
    assert "SK_TEST_HIDDEN" not in env


def test_guest_env_returns_a_fresh_dict() -> None:
    policy = ExecutionPolicy()
    policy.guest_env({})["INJECTED"] = "1"
    assert "INJECTED" not in policy.env


# --- with_overrides -----------------------------------------------------------------------


def test_with_overrides_returns_a_changed_copy() -> None:
    policy = ExecutionPolicy()
    changed = policy.with_overrides(fuel_budget=5, guest_mount_path="/work/")
    assert (changed.fuel_budget, changed.guest_mount_path) == (5, "/work")
    assert policy.fuel_budget == 2_000_000_000
    assert changed.memory_bytes == policy.memory_bytes


def test_with_overrides_merges_env_over_the_current_one() -> None:
    policy = ExecutionPolicy(env={"A": "1"})
    changed = policy.with_overrides(env={"B": "2", "LC_ALL": "C"})
    assert changed.env == {"PYTHONUTF8": "1", "LC_ALL": "C", "A": "1", "B": "2"}
    assert policy.env == {**DEFAULT_ENV, "A": "1"}


def test_with_overrides_validates() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy().with_overrides(timeout_seconds=-1)
    assert _only_error(info.value).field == "timeout_seconds"


def test_with_overrides_refuses_unknown_fields() -> None:
    with pytest.raises(PolicyValidationError) as info:
        ExecutionPolicy().with_overrides(fuel=1)
    assert _only_error(info.value) == FieldError("fuel", "unknown field", 1)


def test_with_overrides_without_changes_is_equal() -> None:
    policy = ExecutionPolicy(mount_data_dir="/srv", inherit_env=["HOME"])
    assert policy.with_overrides() == policy


# --- snapshot -----------------------------------------------------------------------------


def test_snapshot_is_json_with_paths_as_text() -> None:
    policy = ExecutionPolicy(mount_host_dir=Path("/srv/ws"), mount_data_dir=Path("/srv/data"))
    snapshot = policy.snapshot()
    assert json.loads(json.dumps(snapshot)) == snapshot
    assert snapshot["mount_host_dir"] == "/srv/ws"
    assert snapshot["mount_data_dir"] == "/srv/data"
    assert snapshot["fuel_budget"] == 2_000_000_000
    assert set(snapshot) == set(ExecutionPolicy.model_fields)


def test_snapshot_hides_env_values_with_secret_names() -> None:
    policy = ExecutionPolicy(env={"OPENAI_API_KEY": "sk-live-123", "MODE": "test"})
    snapshot = policy.snapshot()
    assert "sk-live-123" not in json.dumps(snapshot)
    assert snapshot["env"] == {**DEFAULT_ENV, "OPENAI_API_KEY": "[redacted]", "MODE": "test"}
