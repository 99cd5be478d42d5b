"""One JSON POST to a model server, with a timeout and retries with backoff on 429 and 5xx.

Shared by the HTTP providers. httpx keeps connections alive between calls (a TLS handshake
per question would cost more than many answers) and is safe to share across threads.

    poster = JsonPoster(RetryPolicy(), secret="sk-...")
    reply = poster.post(url, body, headers)   # parsed JSON, or an LLMError

Errors are LLMError subclasses whose messages say what to do and never hold the secret
(servers sometimes echo what they were sent).

Must not import: wasmtime, anything Jupyter, sandbox_kernel.repl.
"""

from __future__ import annotations

import email.utils
import json
import random
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from sandbox_kernel.llm.errors import (
    LLMAuthError,
    LLMError,
    LLMRequestError,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
)

if TYPE_CHECKING:  # imported on the first request: a kernel without a model never pays for it
    import httpx

__all__ = ["JsonPoster", "RetryPolicy"]

# Worth another try: rate limits, server trouble, Anthropic's "overloaded".
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
_MAX_ERROR_TEXT = 300


class RetryPolicy(BaseModel):
    """How long to wait for an answer and how to retry a failed call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_seconds: float = Field(default=60.0, gt=0)
    max_retries: NonNegativeInt = 3
    backoff_seconds: float = Field(default=0.5, ge=0)  # the first wait; doubles each retry
    max_backoff_seconds: float = Field(default=8.0, ge=0)  # also caps a server's Retry-After

    def wait_before(self, retry: int, retry_after: str | None) -> float:
        """Seconds to wait before retry number `retry` (1-based): the server's Retry-After
        when it sends one, else exponential backoff with jitter; never over the cap."""
        asked = _retry_after_seconds(retry_after)
        if asked is not None:
            return min(asked, self.max_backoff_seconds)
        backoff = self.backoff_seconds * float(2 ** (retry - 1))
        return min(backoff * random.uniform(0.8, 1.2), self.max_backoff_seconds)


def _retry_after_seconds(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class JsonPoster:
    """POSTs JSON and returns the parsed reply. One per provider; thread-safe."""

    def __init__(
        self,
        retry: RetryPolicy,
        secret: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.retry = retry
        self._secret = secret
        self._sleep = sleep
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def _http(self) -> httpx.Client:
        import httpx

        with self._lock:
            if self._client is None:
                timeout = httpx.Timeout(self.retry.timeout_seconds)
                self._client = httpx.Client(timeout=timeout, follow_redirects=False)
                # A provider dropped without close() still releases its connections.
                weakref.finalize(self, self._client.close)
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def post(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
        """The server's JSON reply to `body`; retried on 429/5xx and dropped connections."""
        import httpx

        content = json.dumps(body, ensure_ascii=False).encode("utf-8")
        all_headers = {"Content-Type": "application/json", **headers}
        attempts = self.retry.max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                response = self._http().post(url, content=content, headers=all_headers)
            except httpx.TimeoutException:
                # A slow server stays slow: no retry, or a call could take attempts x timeout.
                raise LLMTimeoutError(
                    f"the model server at {url} did not answer within "
                    f"{self.retry.timeout_seconds:g} s"
                ) from None
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                if attempt < attempts:
                    self._sleep(self.retry.wait_before(attempt, None))
                    continue
                raise LLMUnavailableError(
                    f"the model server at {url} is unreachable ({self._scrub(str(exc))}) "
                    f"after {attempts} attempts"
                ) from None
            except httpx.HTTPError as exc:
                raise LLMUnavailableError(
                    f"the request to {url} failed: {self._scrub(str(exc))}"
                ) from None
            if response.status_code in RETRY_STATUSES and attempt < attempts:
                self._sleep(self.retry.wait_before(attempt, response.headers.get("retry-after")))
                continue
            return self._parse(url, response, attempt)
        raise AssertionError("unreachable")  # pragma: no cover - the loop always returns

    def _parse(self, url: str, response: httpx.Response, attempts: int) -> Any:
        status = response.status_code
        if status >= 400:
            raise self._status_error(url, status, response.text, attempts)
        try:
            return response.json()
        except ValueError:
            raise LLMResponseError(
                f"the model server's reply is not JSON (HTTP {status})"
            ) from None

    def _status_error(self, url: str, status: int, text: str, attempts: int) -> LLMError:
        detail = self._server_message(text)
        said = f": {detail}" if detail else ""
        if status in (401, 403):
            return LLMAuthError(
                f"the model server refused the credentials (HTTP {status}){said}; "
                "check SANDBOX_KERNEL_LLM_API_KEY"
            )
        if status in RETRY_STATUSES:
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            return LLMUnavailableError(
                f"the model server at {url} answered HTTP {status}{tries}{said}"
            )
        return LLMRequestError(f"the model server refused the request (HTTP {status}){said}")

    def _server_message(self, text: str) -> str:
        """The server's own error message (OpenAI and Anthropic both use error.message)."""
        message = text
        try:
            document = json.loads(text)
        except ValueError:
            pass
        else:
            error = document.get("error") if isinstance(document, dict) else None
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                message = error["message"]
            elif isinstance(error, str):
                message = error
        message = " ".join(self._scrub(message).split())
        if len(message) > _MAX_ERROR_TEXT:
            message = message[:_MAX_ERROR_TEXT] + "..."
        return message

    def _scrub(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "[redacted]")
        return text
