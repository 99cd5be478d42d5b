"""Language models for llm_query and rlm_query, answered on the host.

The guest reaches a model only through the host's door; API keys stay in the host.

    service = LLMSettings.load(toml_file).service()      # or LLMService(provider, ...)
    repl = create_repl(service.configure(REPLConfig()))

Providers: OpenAICompatibleProvider, AnthropicProvider, ScriptedProvider, FunctionProvider
(any callable; `load_function("module:function")`), or any object with the LLMProvider shape.
"""

from __future__ import annotations

from sandbox_kernel.core.usage import LLMBudget, LLMUsage
from sandbox_kernel.llm.anthropic import AnthropicProvider
from sandbox_kernel.llm.base import ChatMessage, Completion, LLMProvider
from sandbox_kernel.llm.config import LLMSettings, provider_from_env
from sandbox_kernel.llm.errors import (
    LLMAuthError,
    LLMBudgetExceeded,
    LLMConfigError,
    LLMError,
    LLMRefusalError,
    LLMRequestError,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
    RLMError,
)
from sandbox_kernel.llm.http import RetryPolicy
from sandbox_kernel.llm.openai_compat import OpenAICompatibleProvider
from sandbox_kernel.llm.rlm import RLMSettings, RLMStep
from sandbox_kernel.llm.scripted import FunctionProvider, ScriptedProvider, load_function
from sandbox_kernel.llm.service import LLMService

__all__ = [
    "AnthropicProvider",
    "ChatMessage",
    "Completion",
    "FunctionProvider",
    "LLMAuthError",
    "LLMBudget",
    "LLMBudgetExceeded",
    "LLMConfigError",
    "LLMError",
    "LLMProvider",
    "LLMRefusalError",
    "LLMRequestError",
    "LLMResponseError",
    "LLMService",
    "LLMSettings",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "LLMUsage",
    "OpenAICompatibleProvider",
    "RLMError",
    "RLMSettings",
    "RLMStep",
    "RetryPolicy",
    "ScriptedProvider",
    "load_function",
    "provider_from_env",
]
