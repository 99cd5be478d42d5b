"""LLMSettings: the [llm] table of the kernel's TOML, the environment over it, the provider
and service they build."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_kernel import load_policy
from sandbox_kernel.llm import (
    AnthropicProvider,
    FunctionProvider,
    LLMConfigError,
    LLMSettings,
    OpenAICompatibleProvider,
    ScriptedProvider,
    provider_from_env,
)

POLICY_AND_LLM = """
[policy]
timeout_seconds = 12

[llm]
provider = "openai"
base_url = "http://127.0.0.1:8000/v1"
model = "file-model"
api_key_env = "MY_TEST_KEY"
timeout_seconds = 7
concurrency = 3

[llm.budget]
max_calls = 50
max_tokens = 1000

[llm.rlm]
max_depth = 2
max_iterations = 4
"""


def test_toml_table_beside_the_policy(tmp_path: Path) -> None:
    file = tmp_path / "policy.toml"
    file.write_text(POLICY_AND_LLM)
    assert load_policy(file).timeout_seconds == 12  # the policy reader leaves [llm] alone
    settings = LLMSettings.load(file, {"MY_TEST_KEY": "sk-from-env"})
    assert settings.kind == "openai"
    assert (settings.model, settings.timeout_seconds, settings.concurrency) == ("file-model", 7, 3)
    assert settings.budget.max_calls == 50 and settings.budget.max_tokens == 1000
    assert settings.rlm.max_depth == 2 and settings.rlm.max_iterations == 4
    assert settings.resolved_key({"MY_TEST_KEY": "sk-from-env"}) == "sk-from-env"
    service = settings.service({"MY_TEST_KEY": "sk-from-env"})
    assert service is not None and service.concurrency == 3
    assert isinstance(service.provider, OpenAICompatibleProvider)
    assert "sk-from-env" not in repr(service) + repr(settings)


def test_environment_wins_over_the_file(tmp_path: Path) -> None:
    file = tmp_path / "policy.toml"
    file.write_text(POLICY_AND_LLM)
    env = {
        "SANDBOX_KERNEL_LLM_MODEL": "env-model",
        "SANDBOX_KERNEL_LLM_API_KEY": "sk-env",
        "SANDBOX_KERNEL_LLM_MAX_CALLS": "9",
        "SANDBOX_KERNEL_LLM_MAX_DEPTH": "0",
        "SANDBOX_KERNEL_LLM_TIMEOUT": "2.5",
    }
    settings = LLMSettings.load(file, env)
    assert settings.model == "env-model" and settings.timeout_seconds == 2.5
    assert settings.budget.max_calls == 9 and settings.budget.max_tokens == 1000
    assert settings.rlm.max_depth == 0 and settings.rlm.max_iterations == 4
    assert settings.resolved_key(env) == "sk-env"


def test_a_key_written_in_the_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "policy.toml"
    file.write_text('[llm]\napi_key = "sk-oops"\n')
    with pytest.raises(LLMConfigError, match="api_key_env") as caught:
        LLMSettings.load(file, {})
    assert "sk-oops" not in str(caught.value)


def test_providers_inferred_and_named(tmp_path: Path) -> None:
    script = tmp_path / "replies.toml"
    script.write_text("[[rule]]\nreply = 'scripted answer'\n")
    assert LLMSettings.load(None, {}).provider_object({}) is None
    assert provider_from_env({}) is None
    base = {"SANDBOX_KERNEL_LLM_BASE_URL": "http://127.0.0.1:1/v1"}
    assert isinstance(provider_from_env(base), OpenAICompatibleProvider)
    scripted = provider_from_env({"SANDBOX_KERNEL_LLM_SCRIPT": str(script)})
    assert isinstance(scripted, ScriptedProvider)
    function = provider_from_env({"SANDBOX_KERNEL_LLM_PROVIDER": "tests.llm.models:shout"})
    assert isinstance(function, FunctionProvider) and function("hi") == "HI"
    anthropic = provider_from_env(
        {"SANDBOX_KERNEL_LLM_PROVIDER": "anthropic", "SANDBOX_KERNEL_LLM_API_KEY": "sk-a"}
    )
    assert isinstance(anthropic, AnthropicProvider)
    assert anthropic.url == "https://api.anthropic.com/v1/messages"


def test_a_relative_script_is_taken_from_the_files_folder(tmp_path: Path) -> None:
    (tmp_path / "replies.toml").write_text("[[rule]]\nreply = 'from beside the file'\n")
    file = tmp_path / "policy.toml"
    file.write_text('[llm]\nprovider = "scripted"\nscript = "replies.toml"\n')
    provider = LLMSettings.load(file, {}).provider_object({})
    assert provider is not None and provider.complete([]).text == "from beside the file"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SANDBOX_KERNEL_LLM_PROVIDER": "gpt"}, "provider"),
        ({"SANDBOX_KERNEL_LLM_MAX_CALLS": "-1"}, "max_calls"),
        ({"SANDBOX_KERNEL_LLM_TIMEOUT": "soon"}, "timeout_seconds"),
        ({"SANDBOX_KERNEL_LLM_PROVIDER": "scripted"}, "needs a script"),
        ({"SANDBOX_KERNEL_LLM_PROVIDER": "openai"}, "needs a base URL"),
        ({"SANDBOX_KERNEL_LLM_PROVIDER": "anthropic"}, "needs an API key"),
        ({"SANDBOX_KERNEL_LLM_BASE_URL": "ftp://x"}, "http"),
    ],
    ids=["unknown", "negative", "not-a-number", "no-script", "no-url", "no-key", "bad-url"],
)
def test_bad_settings_are_config_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(LLMConfigError, match=message):
        LLMSettings.load(None, env).provider_object(env)


def test_bad_toml_is_a_config_error(tmp_path: Path) -> None:
    file = tmp_path / "policy.toml"
    file.write_text("[llm\n")
    with pytest.raises(LLMConfigError, match="cannot read"):
        LLMSettings.load(file, {})
    file.write_text("llm = 3\n")
    with pytest.raises(LLMConfigError, match="must be a table"):
        LLMSettings.load(file, {})
