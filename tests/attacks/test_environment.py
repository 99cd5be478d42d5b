"""Attacks on the environment boundary: host secrets must never reach a guest.

No host variable reaches the guest unless the policy whitelists it, and a whitelist that names a
secret is refused when the policy is made.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox_kernel import ExecutionPolicy, PolicyValidationError, PythonSandbox
from tests.attacks.conftest import HostGuard

_SECRETS = {
    "SANDBOX_KERNEL_LLM_API_KEY": "sk-secret",
    "MY_SERVICE_SECRET": "hunter2-secret",
    "GITHUB_TOKEN": "ghp-secret",
}

_DUMP_ENV = """
import json, os
print(json.dumps(dict(os.environ)))
"""


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in _SECRETS.items():
        monkeypatch.setenv(name, value)
    return _SECRETS


def test_host_secrets_are_not_in_the_guest_environment(
    py: PythonSandbox, host: HostGuard, secrets: dict[str, str]
) -> None:
    result = py.execute(_DUMP_ENV)
    assert result.success is True, result.stderr
    guest_env = json.loads(result.stdout)
    assert not set(secrets) & set(guest_env)
    for value in secrets.values():
        assert value not in result.stdout
    host.assert_healthy(py)


def test_the_guest_environment_is_only_what_the_policy_grants(
    workspace: Path, secrets: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_TEST_ALLOWED", "fine")
    policy = ExecutionPolicy(
        timeout_seconds=10, env={"GRANTED": "yes"}, inherit_env=("SANDBOX_TEST_ALLOWED",)
    )
    result = PythonSandbox(policy, workspace).execute(_DUMP_ENV)
    guest_env = json.loads(result.stdout)
    image_env = {"HOME", "TMPDIR", "PYTHONTZPATH", "PYTHONPATH"}
    assert set(guest_env) - image_env == {"PYTHONUTF8", "LC_ALL", "GRANTED", "SANDBOX_TEST_ALLOWED"}
    assert guest_env["SANDBOX_TEST_ALLOWED"] == "fine"


@pytest.mark.parametrize(
    "code",
    [
        "print(open('/proc/self/environ').read())",
        "print(open('/proc/1/environ').read())",
        "print(open('/proc/self/cmdline').read())",
        "import os; print(os.listdir('/proc'))",
    ],
    ids=["self-environ", "init-environ", "cmdline", "list-proc"],
)
def test_proc_is_not_reachable(
    py: PythonSandbox, host: HostGuard, secrets: dict[str, str], code: str
) -> None:
    result = py.execute(code)
    assert result.success is False
    assert "FileNotFoundError: [Errno" in result.stderr, result.stderr
    for value in secrets.values():
        assert value not in result.stdout
    host.assert_healthy(py)


@pytest.mark.parametrize(
    "name",
    [
        "SANDBOX_KERNEL_LLM_API_KEY",
        "SANDBOX_KERNEL_LLM_BASE_URL",
        "OPENAI_API_KEY",
        "MY_SERVICE_SECRET",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "aws_credentials",
    ],
    ids=["llm-key", "llm-prefix", "openai", "secret", "token", "password", "lower-case"],
)
def test_inherit_env_refuses_a_secret_looking_name(name: str) -> None:
    with pytest.raises(PolicyValidationError, match="secret") as caught:
        ExecutionPolicy(inherit_env=("HOME_LANG", name))
    assert any(error.field.startswith("inherit_env") for error in caught.value.errors)


def test_a_secret_set_through_policy_env_is_hidden_from_logs(
    py: PythonSandbox, workspace: Path
) -> None:
    # A caller may hand a guest a key on purpose (env=); the audit log must still not show it.
    policy = ExecutionPolicy(timeout_seconds=10, env={"SERVICE_API_KEY": "sk-given"})
    sandbox = PythonSandbox(policy, workspace, py.logger)
    result = sandbox.execute("import os; print(os.environ['SERVICE_API_KEY'])")
    assert result.stdout == "sk-given\n"
    assert "sk-given" not in json.dumps(py.logger.events)
