"""An OpenAI-compatible Chat Completions client (OpenAI, vLLM, Ollama, llama.cpp server).

    provider = OpenAICompatibleProvider(base_url, model, api_key)
    provider("Summarise: ...")   # -> the first choice's message content

Standard library only (urllib). The API key goes in the Authorization header and nowhere
else: not in errors, not in logs, never into a guest. Failures are `LLMError` with a message a
person can act on (the bridge shows it inside the guest as a RuntimeError).

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

__all__ = ["LLMError", "OpenAICompatibleProvider", "provider_from_env"]

ENV_PREFIX = "SANDBOX_KERNEL_LLM_"


class LLMError(RuntimeError):
    """The model could not answer (unreachable, refused, malformed reply)."""


class OpenAICompatibleProvider:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_seconds: float = 60.0,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._api_key = api_key
        self.timeout_seconds = timeout_seconds

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAICompatibleProvider(url={self.url!r}, model={self.model!r})"

    def __call__(self, prompt: str) -> str:
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}]}
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                reply: Any = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            exc.close()  # the error holds the response: release its socket
            raise LLMError(f"the model server answered HTTP {exc.code} ({exc.reason})") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise LLMError(f"the model server at {self.url} is unreachable: {exc}") from None
        except ValueError:
            raise LLMError("the model server's reply is not JSON") from None
        return _content(reply)


def _content(reply: Any) -> str:
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LLMError("the model server's reply has no choices[0].message.content") from None
    if not isinstance(content, str):
        raise LLMError("the model server's reply content is not text")
    return content


def provider_from_env(environ: Mapping[str, str]) -> OpenAICompatibleProvider | None:
    """SANDBOX_KERNEL_LLM_BASE_URL (+ _MODEL, _API_KEY) -> a provider; None when unset."""
    base_url = environ.get(f"{ENV_PREFIX}BASE_URL")
    if not base_url:
        return None
    model = environ.get(f"{ENV_PREFIX}MODEL") or "default"
    return OpenAICompatibleProvider(base_url, model, environ.get(f"{ENV_PREFIX}API_KEY"))
