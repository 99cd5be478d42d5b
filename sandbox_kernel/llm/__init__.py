"""LLM providers the host answers `llm_query` with. The guest reaches models only through
the host's door; API keys stay in the host."""

from __future__ import annotations

from sandbox_kernel.llm.openai_compat import LLMError, OpenAICompatibleProvider, provider_from_env

__all__ = ["LLMError", "OpenAICompatibleProvider", "provider_from_env"]
