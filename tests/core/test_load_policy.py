"""Tests for load_policy: TOML layouts, env merging, folders, and every way a file fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox_kernel.core.errors import FieldError, PolicyValidationError
from sandbox_kernel.core.policy import DEFAULT_ENV, ExecutionPolicy, load_policy

EXAMPLE_POLICY = Path(__file__).resolve().parents[2] / "config" / "policy.example.toml"


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    return tmp_path / "conf" / "policy.toml"


def _write(file: Path, text: str) -> Path:
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text, encoding="utf-8")
    return file


# --- no file ------------------------------------------------------------------------------


def test_no_path_gives_the_defaults() -> None:
    assert load_policy() == ExecutionPolicy()
    assert load_policy(None) == ExecutionPolicy()


def test_missing_file_gives_the_defaults(tmp_path: Path) -> None:
    assert load_policy(tmp_path / "absent.toml") == ExecutionPolicy()


def test_file_in_a_missing_folder_gives_the_defaults(tmp_path: Path) -> None:
    assert load_policy(tmp_path / "no" / "such" / "policy.toml") == ExecutionPolicy()


def test_empty_file_gives_the_defaults(policy_file: Path) -> None:
    assert load_policy(_write(policy_file, "")) == ExecutionPolicy()


# --- valid files --------------------------------------------------------------------------


def test_top_level_fields(policy_file: Path) -> None:
    _write(
        policy_file,
        """
        fuel_budget = 1_000
        memory_bytes = 64_000_000
        timeout_seconds = 2.5
        guest_mount_path = "/work"
        inherit_env = ["HOME"]
        max_open_files = 8
        """,
    )
    policy = load_policy(policy_file)
    assert policy == ExecutionPolicy(
        fuel_budget=1_000,
        memory_bytes=64_000_000,
        timeout_seconds=2.5,
        guest_mount_path="/work",
        inherit_env=("HOME",),
        max_open_files=8,
    )


def test_accepts_a_string_path(policy_file: Path) -> None:
    _write(policy_file, "fuel_budget = 9\n")
    assert load_policy(str(policy_file)).fuel_budget == 9


def test_env_table_is_merged_over_the_default_env(policy_file: Path) -> None:
    _write(policy_file, '[env]\nLC_ALL = "en_US.UTF-8"\nMPLBACKEND = "Agg"\n')
    assert load_policy(policy_file).env == {
        "PYTHONUTF8": "1",
        "LC_ALL": "en_US.UTF-8",
        "MPLBACKEND": "Agg",
    }


def test_policy_table_form_ignores_other_tables(policy_file: Path) -> None:
    _write(
        policy_file,
        """
        [kernel]
        banner = "hello"

        [policy]
        fuel_budget = 77
        stdout_max_bytes = 100

        [policy.env]
        FOO = "bar"

        [llm]
        model = "scripted"
        """,
    )
    policy = load_policy(policy_file)
    assert (policy.fuel_budget, policy.stdout_max_bytes) == (77, 100)
    assert policy.env == {**DEFAULT_ENV, "FOO": "bar"}


def test_empty_policy_table_gives_the_defaults(policy_file: Path) -> None:
    assert load_policy(_write(policy_file, "[policy]\n[kernel]\nx = 1\n")) == ExecutionPolicy()


# --- host folders -------------------------------------------------------------------------


def test_relative_folders_are_taken_from_the_file_folder(policy_file: Path) -> None:
    _write(policy_file, 'mount_host_dir = "ws"\nmount_data_dir = "../shared/data"\n')
    policy = load_policy(policy_file)
    assert policy.mount_host_dir == policy_file.parent / "ws"
    assert policy.mount_data_dir == policy_file.parent / "../shared/data"
    assert policy.mount_host_dir.is_absolute()


def test_relative_folders_in_the_policy_table_too(policy_file: Path) -> None:
    _write(policy_file, '[policy]\nmount_host_dir = "ws"\n')
    assert load_policy(policy_file).mount_host_dir == policy_file.parent / "ws"


def test_absolute_folders_are_kept(policy_file: Path, tmp_path: Path) -> None:
    _write(policy_file, f'mount_host_dir = "{tmp_path / "elsewhere"}"\n')
    assert load_policy(policy_file).mount_host_dir == tmp_path / "elsewhere"


def test_home_folder_is_expanded(
    policy_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    _write(policy_file, 'mount_data_dir = "~/data"\n')
    assert load_policy(policy_file).mount_data_dir == tmp_path / "home" / "data"


def test_relative_file_path_still_gives_absolute_folders(
    policy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(policy_file, 'mount_host_dir = "ws"\n')
    monkeypatch.chdir(policy_file.parent.parent)
    policy = load_policy(Path("conf") / "policy.toml")
    assert policy.mount_host_dir == policy_file.parent / "ws"


def test_empty_folder_in_a_file_is_refused_not_resolved(policy_file: Path) -> None:
    _write(policy_file, 'mount_host_dir = ""\n')
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    assert [e.field for e in info.value.errors] == ["mount_host_dir"]


# --- bad files ----------------------------------------------------------------------------


def test_unknown_key_is_named_with_the_file(policy_file: Path) -> None:
    _write(policy_file, "fuel_budget = 5\nfuel_budjet = 6\n")
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    assert info.value.errors == [FieldError("fuel_budjet", "unknown field", 6)]
    assert info.value.source == policy_file
    assert str(info.value) == f"invalid policy in {policy_file}: fuel_budjet: unknown field (got 6)"


def test_unknown_key_that_is_not_an_identifier_is_named_as_written(policy_file: Path) -> None:
    _write(policy_file, "fuel-budget = 5\n")
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    assert info.value.errors == [FieldError("fuel-budget", "unknown field", 5)]


def test_unknown_table_without_policy_table_is_an_error(policy_file: Path) -> None:
    _write(policy_file, "[kernel]\nbanner = 'x'\n")
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    assert [e.field for e in info.value.errors] == ["kernel"]


def test_invalid_values_name_the_file_and_every_field(policy_file: Path) -> None:
    _write(policy_file, 'fuel_budget = -1\n[env]\n"A=B" = "x"\n')
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    assert [e.field for e in info.value.errors] == ["fuel_budget", "env['A=B']"]
    assert str(info.value).startswith(f"invalid policy in {policy_file} (2 errors):")


def test_env_value_of_the_wrong_type(policy_file: Path) -> None:
    _write(policy_file, "[env]\nDEBUG = 1\n")
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    assert [e.field for e in info.value.errors] == ["env.DEBUG"]


def test_toml_syntax_error_names_file_and_line(policy_file: Path) -> None:
    _write(policy_file, "fuel_budget = 5\nmemory_bytes = 64\ntimeout_seconds 30\n")
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    text = str(info.value)
    assert str(policy_file) in text
    assert "TOML syntax error" in text
    assert "line 3" in text
    assert info.value.source == policy_file


def test_non_utf8_file_is_an_error(policy_file: Path) -> None:
    policy_file.parent.mkdir(parents=True)
    policy_file.write_bytes(b'env = "\xff\xfe"\n')
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    assert "UTF-8" in str(info.value)


def test_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyValidationError) as info:
        load_policy(tmp_path)
    assert info.value.source == tmp_path
    assert str(tmp_path) in str(info.value)
    assert "cannot read" in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_is_an_error(policy_file: Path) -> None:
    _write(policy_file, "fuel_budget = 5\n").chmod(0)
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    assert "cannot read" in str(info.value)


def test_policy_key_that_is_not_a_table(policy_file: Path) -> None:
    _write(policy_file, "policy = 3\n")
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    assert info.value.errors == [FieldError("policy", "must be a table", 3)]


def test_policy_fields_outside_the_policy_table_are_refused(policy_file: Path) -> None:
    # With a [policy] table, a stray top-level field would otherwise be silently ignored.
    _write(policy_file, "fuel_budget = 5\n[env]\nA = 'b'\n[policy]\nmemory_bytes = 9\n")
    with pytest.raises(PolicyValidationError) as info:
        load_policy(policy_file)
    assert [e.field for e in info.value.errors] == ["fuel_budget", "env"]
    assert all("[policy]" in e.message for e in info.value.errors)


# --- the shipped example ------------------------------------------------------------------


def test_example_policy_loads_to_the_defaults() -> None:
    assert load_policy(EXAMPLE_POLICY) == ExecutionPolicy()


def test_example_policy_mentions_every_field() -> None:
    text = EXAMPLE_POLICY.read_text(encoding="utf-8")
    for name in ExecutionPolicy.model_fields:
        if name == "env":
            assert "\n[env]\n" in text
        else:
            assert f"\n{name} = " in text or f"\n# {name} = " in text, name
