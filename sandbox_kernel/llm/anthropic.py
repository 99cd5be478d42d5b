"""Anthropic's Messages API as a provider.

    provider = AnthropicProvider("claude-sonnet-4-5", api_key)
    provider.complete([{"role": "user", "content": "..."}]).text

POST {base_url}/v1/messages with `x-api-key` and `anthropic-version`. System messages go in
the top-level `system` field, as the API wants; the answer is the text of the reply's text
blocks. A `refusal` stop reason is an LLMRefusalError; 429 and 529 (overloaded) are retried.

Must not import: wasmtime, anything Jupyter, sandbox_kernel.repl.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sandbox_kernel.llm.base import ChatMessage, Completion, reported_tokens, user
from sandbox_kernel.llm.errors import LLMConfigError, LLMRefusalError, LLMResponseError
from sandbox_kernel.llm.http import JsonPoster, RetryPolicy
from sandbox_kernel.llm.openai_compat import check_base_url

__all__ = ["ANTHROPIC_API_VERSION", "AnthropicProvider"]

ANTHROPIC_API_VERSION = "2023-06-01"
DEFAULT_BASE_URL = "https://api.anthropic.com"


class AnthropicProvider:
    def __init__(
        self,
        model: str,
        api_key: str | None,
        *,
        base_url: str = DEFAULT_BASE_URL,
        retry: RetryPolicy | None = None,
        max_tokens: int = 4096,
        temperature: float | None = None,
    ) -> None:
        if not api_key:
            raise LLMConfigError("the Anthropic provider needs an API key")
        self.url = check_base_url(base_url) + "/v1/messages"
        self.model = model
        self.name = f"anthropic:{model}"
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._api_key = api_key
        self._poster = JsonPoster(retry or RetryPolicy(), secret=api_key)

    def __repr__(self) -> str:  # never shows the key
        return f"AnthropicProvider(url={self.url!r}, model={self.model!r})"

    def __call__(self, prompt: str) -> str:
        return self.complete(user(prompt)).text

    def close(self) -> None:
        self._poster.close()

    def complete(self, messages: Sequence[ChatMessage]) -> Completion:
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        turns = [
            {"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"
        ]
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": turns,
        }
        if system:
            body["system"] = system
        if self.temperature is not None:
            body["temperature"] = self.temperature
        headers = {"x-api-key": self._api_key, "anthropic-version": ANTHROPIC_API_VERSION}
        return _completion(self._poster.post(self.url, body, headers))


def _completion(reply: Any) -> Completion:
    if not isinstance(reply, dict) or not isinstance(reply.get("content"), list):
        raise LLMResponseError("the Anthropic reply has no content list")
    if reply.get("stop_reason") == "refusal":
        raise LLMRefusalError("the model declined to answer (stop_reason: refusal)")
    texts = [
        block["text"]
        for block in reply["content"]
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]
    if not texts:
        raise LLMResponseError("the Anthropic reply has no text block")
    usage: dict[str, Any] = reply["usage"] if isinstance(reply.get("usage"), dict) else {}
    return Completion(
        text="".join(texts),
        input_tokens=reported_tokens(usage.get("input_tokens")),
        output_tokens=reported_tokens(usage.get("output_tokens")),
        model=reply.get("model") if isinstance(reply.get("model"), str) else None,
    )
