"""An OpenAI-compatible Chat Completions provider (OpenAI, vLLM, Ollama, llama.cpp server).

    provider = OpenAICompatibleProvider("http://127.0.0.1:8000/v1", "my-model", api_key)
    provider.complete([{"role": "user", "content": "Summarise: ..."}]).text
    provider("Summarise: ...")   # the same, for one question

POST {base_url}/chat/completions with `Authorization: Bearer KEY` (omitted without a key, as
local servers want). The key lives in this object and the Authorization header only: not in
its repr, not in errors, never in a guest.

Must not import: wasmtime, anything Jupyter, sandbox_kernel.repl.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sandbox_kernel.llm.base import ChatMessage, Completion, reported_tokens, user
from sandbox_kernel.llm.errors import LLMConfigError, LLMRefusalError, LLMResponseError
from sandbox_kernel.llm.http import JsonPoster, RetryPolicy

__all__ = ["OpenAICompatibleProvider", "check_base_url"]


def check_base_url(base_url: str) -> str:
    if not base_url.startswith(("http://", "https://")):
        raise LLMConfigError(f"base_url must be an http(s) URL, not {base_url!r}")
    return base_url.rstrip("/")


class OpenAICompatibleProvider:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> None:
        self.url = check_base_url(base_url) + "/chat/completions"
        self.model = model
        self.name = f"openai:{model}"
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._api_key = api_key
        self._poster = JsonPoster(retry or RetryPolicy(), secret=api_key)

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAICompatibleProvider(url={self.url!r}, model={self.model!r})"

    def __call__(self, prompt: str) -> str:
        return self.complete(user(prompt)).text

    def close(self) -> None:
        self._poster.close()

    def complete(self, messages: Sequence[ChatMessage]) -> Completion:
        body: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        return _completion(self._poster.post(self.url, body, headers))


def _completion(reply: Any) -> Completion:
    try:
        choice = reply["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise LLMResponseError("the model server's reply has no choices[0].message") from None
    refusal = message.get("refusal") if isinstance(message, dict) else None
    if refusal:
        raise LLMRefusalError(f"the model declined: {str(refusal)[:300]}")
    if choice.get("finish_reason") == "content_filter":
        raise LLMRefusalError("the model server's content filter withheld the answer")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise LLMResponseError("the model server's reply content is not text")
    usage: dict[str, Any] = reply["usage"] if isinstance(reply.get("usage"), dict) else {}
    return Completion(
        text=content,
        input_tokens=reported_tokens(usage.get("prompt_tokens")),
        output_tokens=reported_tokens(usage.get("completion_tokens")),
        model=reply.get("model") if isinstance(reply.get("model"), str) else None,
    )
