"""The kernel's notebook defaults: fuel follows the time a cell may take."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_kernel.core.errors import PolicyValidationError
from sandbox_kernel.kernel.settings import FUEL_PER_SECOND, KernelSettings


def _settings(tmp_path: Path, policy: str | None) -> KernelSettings:
    env = {"SANDBOX_KERNEL_WORKSPACE": str(tmp_path / "workspace")}
    if policy is not None:
        (tmp_path / "policy.toml").write_text(policy)
        env["SANDBOX_KERNEL_POLICY"] = str(tmp_path / "policy.toml")
    return KernelSettings.from_environment(env, cwd=tmp_path)


def test_default_fuel_covers_the_default_time(tmp_path: Path) -> None:
    policy = _settings(tmp_path, None).policy
    assert policy.timeout_seconds == 600.0
    assert policy.fuel_budget == 600 * FUEL_PER_SECOND  # a 27 s TSNE cell is not cut at 10 s


def test_a_file_that_sets_the_time_gets_fuel_for_it(tmp_path: Path) -> None:
    policy = _settings(tmp_path, "[policy]\ntimeout_seconds = 30\n").policy
    assert policy.fuel_budget == 30 * FUEL_PER_SECOND


def test_a_file_that_sets_fuel_keeps_it(tmp_path: Path) -> None:
    policy = _settings(tmp_path, "[policy]\ntimeout_seconds = 30\nfuel_budget = 5000000\n").policy
    assert policy.fuel_budget == 5_000_000


def _switches(tmp_path: Path, **env: str) -> KernelSettings:
    base = {"SANDBOX_KERNEL_WORKSPACE": str(tmp_path / "workspace"), **env}
    return KernelSettings.from_environment(base, cwd=tmp_path)


def test_pip_is_on_in_the_kernel_and_off_when_guarded_or_asked(tmp_path: Path) -> None:
    assert _switches(tmp_path).repl_config().packages is True
    assert _switches(tmp_path, SANDBOX_KERNEL_PIP="off").packages is False
    assert _switches(tmp_path, SANDBOX_KERNEL_PIP="0").packages is False
    # The guarded spec never has it, whatever the variable says.
    guarded = _switches(tmp_path, SANDBOX_KERNEL_GUARDED="1", SANDBOX_KERNEL_PIP="on")
    assert guarded.repl_config().packages is False


def test_the_notebook_folder_is_an_overlay_unless_asked_otherwise(tmp_path: Path) -> None:
    default = _switches(tmp_path).repl_config()
    assert default.notebook_dir == tmp_path.resolve() and default.notebook_overlay
    asked = _switches(tmp_path, SANDBOX_KERNEL_NOTEBOOK_FOLDER="read-only").repl_config()
    assert asked.notebook_dir == tmp_path.resolve() and not asked.notebook_overlay
    assert _switches(tmp_path, SANDBOX_KERNEL_NOTEBOOK_FOLDER="off").notebook_dir is None
    # The folder that is the workspace is the guest's already: no overlay of it.
    same = _switches(tmp_path, SANDBOX_KERNEL_WORKSPACE=str(tmp_path))
    assert same.notebook_dir is None
    # A typo is an error that names the setting, not a guess.
    with pytest.raises(PolicyValidationError, match="SANDBOX_KERNEL_NOTEBOOK_FOLDER"):
        _switches(tmp_path, SANDBOX_KERNEL_NOTEBOOK_FOLDER="read-write")


# -- where a policy file may come from (never beside the notebook, never the guest's) ----------


def test_a_policy_file_beside_the_notebook_is_not_read(tmp_path: Path) -> None:
    """A cloned folder's config/policy.toml (or the repository's own example) configures
    nothing: only SANDBOX_KERNEL_POLICY or the user's configuration folder do."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "policy.toml").write_text(
        'fuel_budget = 2000\ntrust_outputs = true\nmount_data_dir = "/"\n'
    )
    env = {
        "SANDBOX_KERNEL_WORKSPACE": str(tmp_path / "workspace"),
        "XDG_CONFIG_HOME": str(tmp_path / "nothing-here"),
    }
    settings = KernelSettings.from_environment(env, cwd=tmp_path)
    assert settings.policy_source is None
    assert settings.policy.trust_outputs is False
    assert settings.policy.mount_data_dir is None
    assert settings.policy.fuel_budget == 600 * FUEL_PER_SECOND


def test_the_users_configuration_folder_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "xdg" / "sandbox-kernel"
    folder.mkdir(parents=True)
    (folder / "policy.toml").write_text("timeout_seconds = 42\n")
    env = {
        "SANDBOX_KERNEL_WORKSPACE": str(tmp_path / "workspace"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
    }
    settings = KernelSettings.from_environment(env, cwd=tmp_path)
    assert settings.policy_source == folder / "policy.toml"
    assert settings.policy.timeout_seconds == 42


@pytest.mark.parametrize(
    "where",
    ["named-inside", "config-folder-inside", "linked-from-outside"],
)
def test_a_policy_file_the_guest_can_write_is_refused(tmp_path: Path, where: str) -> None:
    """A workspace that holds the policy file (the workspace set to the notebook's folder, or
    to a home folder) would let a cell configure the next session: the kernel refuses."""
    workspace = tmp_path / "workspace"
    env = {"SANDBOX_KERNEL_WORKSPACE": str(workspace)}
    inside = workspace / "sandbox-kernel" / "policy.toml"
    inside.parent.mkdir(parents=True)
    inside.write_text("trust_outputs = true\n")
    if where == "named-inside":
        env["SANDBOX_KERNEL_POLICY"] = str(inside)
    elif where == "config-folder-inside":
        env["XDG_CONFIG_HOME"] = str(workspace)
    else:
        (tmp_path / "outside.toml").symlink_to(inside)
        env["SANDBOX_KERNEL_POLICY"] = str(tmp_path / "outside.toml")
    with pytest.raises(PolicyValidationError, match="inside the workspace"):
        KernelSettings.from_environment(env, cwd=tmp_path)
