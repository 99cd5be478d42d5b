"""LLMSettings: which model answers llm_query, read from the kernel's TOML and the environment.

    [llm]                                # in the kernel's policy file (policy fields then go
    provider = "openai"                  # in a [policy] table)
    base_url = "http://127.0.0.1:8000/v1"
    model = "qwen2.5-7b-instruct"
    api_key_env = "OPENAI_API_KEY"       # the NAME of a variable holding the key
    timeout_seconds = 60
    max_retries = 3
    concurrency = 8                      # llm_query_batched's parallel calls
    [llm.budget]
    max_calls = 500
    max_prompt_chars = 20_000_000
    max_tokens = 2_000_000
    [llm.rlm]
    max_depth = 1
    max_iterations = 12

The environment wins over the file: SANDBOX_KERNEL_LLM_PROVIDER (openai | anthropic |
scripted | module:function), _BASE_URL, _MODEL, _API_KEY, _SCRIPT (a scripted provider's
rules file), _TIMEOUT, _MAX_CALLS, _MAX_PROMPT_CHARS, _MAX_TOKENS, _MAX_DEPTH,
_MAX_ITERATIONS. Without a provider, one is inferred: a script -> scripted, a base URL ->
openai. A key is never written in the file itself (api_key there is refused) and never
reaches a guest (the policy refuses to pass SANDBOX_KERNEL_LLM_* or *KEY* variables).

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, SecretStr, ValidationError

from sandbox_kernel.core.usage import LLMBudget
from sandbox_kernel.llm.anthropic import DEFAULT_BASE_URL as ANTHROPIC_BASE_URL
from sandbox_kernel.llm.anthropic import AnthropicProvider
from sandbox_kernel.llm.base import LLMProvider
from sandbox_kernel.llm.errors import LLMConfigError
from sandbox_kernel.llm.http import RetryPolicy
from sandbox_kernel.llm.openai_compat import OpenAICompatibleProvider
from sandbox_kernel.llm.rlm import RLMSettings, RLMStep
from sandbox_kernel.llm.scripted import ScriptedProvider, load_function
from sandbox_kernel.llm.service import LLMService

__all__ = ["ENV_PREFIX", "LLMSettings", "provider_from_env"]

ENV_PREFIX = "SANDBOX_KERNEL_LLM_"
ProviderKind = Literal["openai", "anthropic", "scripted", "function"]
_ENV_FIELDS = {  # variable suffix -> (section, field)
    "BASE_URL": (None, "base_url"),
    "MODEL": (None, "model"),
    "API_KEY": (None, "api_key"),
    "SCRIPT": (None, "script"),
    "TIMEOUT": (None, "timeout_seconds"),
    "MAX_CALLS": ("budget", "max_calls"),
    "MAX_PROMPT_CHARS": ("budget", "max_prompt_chars"),
    "MAX_TOKENS": ("budget", "max_tokens"),
    "MAX_DEPTH": ("rlm", "max_depth"),
    "MAX_ITERATIONS": ("rlm", "max_iterations"),
}


class LLMSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: ProviderKind | None = None
    base_url: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    script: Path | None = None
    function: str | None = None  # "package.module:function"
    timeout_seconds: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    backoff_seconds: float = Field(default=0.5, ge=0)
    max_answer_tokens: PositiveInt | None = None  # per answer (Anthropic default: 4096)
    concurrency: PositiveInt = 8
    budget: LLMBudget = Field(default_factory=LLMBudget)
    rlm: RLMSettings = Field(default_factory=RLMSettings)

    @property
    def kind(self) -> ProviderKind | None:
        if self.provider is not None:
            return self.provider
        if self.function:
            return "function"
        if self.script:
            return "scripted"
        if self.base_url:
            return "openai"
        return None

    @classmethod
    def load(
        cls, toml_file: Path | None = None, environ: Mapping[str, str] | None = None
    ) -> LLMSettings:
        """The [llm] table of `toml_file` (if any), then the environment over it."""
        env = os.environ if environ is None else environ
        table = _toml_table(toml_file) if toml_file is not None else {}
        table = _merge_env(table, env)
        try:
            return cls.model_validate(table)
        except ValidationError as exc:
            where = f" in {toml_file}" if toml_file else ""
            error = exc.errors()[0]
            field = ".".join(str(p) for p in error["loc"])
            raise LLMConfigError(f"LLM settings{where}: {field}: {error['msg']}") from None

    def resolved_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env:
            env = os.environ if environ is None else environ
            return env.get(self.api_key_env) or None
        return None

    def provider_object(self, environ: Mapping[str, str] | None = None) -> LLMProvider | None:
        """The configured provider, or None when no model is configured."""
        kind = self.kind
        retry = RetryPolicy(
            timeout_seconds=self.timeout_seconds,
            max_retries=self.max_retries,
            backoff_seconds=self.backoff_seconds,
        )
        if kind is None:
            return None
        if kind == "scripted":
            if self.script is None:
                raise LLMConfigError(
                    "the scripted provider needs a script (SANDBOX_KERNEL_LLM_SCRIPT)"
                )
            return ScriptedProvider.from_file(self.script)
        if kind == "function":
            if not self.function:
                raise LLMConfigError("the function provider needs 'module:function'")
            return load_function(self.function)
        key = self.resolved_key(environ)
        if kind == "anthropic":
            return AnthropicProvider(
                self.model or "claude-sonnet-4-5",
                key,
                base_url=self.base_url or ANTHROPIC_BASE_URL,
                retry=retry,
                max_tokens=self.max_answer_tokens or 4096,
            )
        if not self.base_url:
            raise LLMConfigError(
                "the openai provider needs a base URL (SANDBOX_KERNEL_LLM_BASE_URL)"
            )
        return OpenAICompatibleProvider(
            self.base_url,
            self.model or "default",
            key,
            retry=retry,
            max_tokens=self.max_answer_tokens,
        )

    def service(
        self,
        environ: Mapping[str, str] | None = None,
        on_step: Callable[[RLMStep], None] | None = None,
    ) -> LLMService | None:
        """An LLMService for the configured provider, or None when there is none."""
        provider = self.provider_object(environ)
        if provider is None:
            return None
        return LLMService(
            provider,
            budget=self.budget,
            rlm=self.rlm,
            concurrency=self.concurrency,
            on_step=on_step,
        )


def _toml_table(file: Path) -> dict[str, Any]:
    try:
        document = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LLMConfigError(f"cannot read LLM settings from {file}: {exc}") from None
    table = document.get("llm", {})
    if not isinstance(table, dict):
        raise LLMConfigError(f"{file}: [llm] must be a table")
    if "api_key" in table:
        raise LLMConfigError(
            f"{file}: write api_key_env (the name of a variable holding the key), not the key"
        )
    table = dict(table)
    script = table.get("script")
    if isinstance(script, str) and not Path(script).expanduser().is_absolute():
        table["script"] = str(file.parent / script)  # relative to the file, as policy paths are
    return table


def _merge_env(table: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    merged = {
        key: dict(value) if isinstance(value, dict) else value for key, value in table.items()
    }
    provider = env.get(f"{ENV_PREFIX}PROVIDER")
    if provider:
        if ":" in provider:
            merged["provider"], merged["function"] = "function", provider
        else:
            merged["provider"] = provider
    for suffix, (section, field) in _ENV_FIELDS.items():
        value = env.get(f"{ENV_PREFIX}{suffix}")
        if not value:
            continue
        if section is None:
            merged[field] = value
        else:
            merged.setdefault(section, {})[field] = value
    return merged


def provider_from_env(environ: Mapping[str, str]) -> LLMProvider | None:
    """The provider SANDBOX_KERNEL_LLM_* describe; None when they describe none."""
    return LLMSettings.load(None, environ).provider_object(environ)
