"""The HTTP providers against real local servers: the bytes they send, the answers they
parse, and every way a server can fail them."""

from __future__ import annotations

import time

import pytest

from sandbox_kernel.llm import (
    AnthropicProvider,
    LLMAuthError,
    LLMConfigError,
    LLMRefusalError,
    LLMRequestError,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
    OpenAICompatibleProvider,
    RetryPolicy,
)
from sandbox_kernel.llm.anthropic import ANTHROPIC_API_VERSION
from tests.llm.servers import ModelServer, Reply

FAST = RetryPolicy(timeout_seconds=5, max_retries=2, backoff_seconds=0.01)
KEY = "sk-test-0123456789abcdef"


def openai(server: ModelServer, retry: RetryPolicy = FAST) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(server.openai_url, "tiny-model", api_key=KEY, retry=retry)


def test_openai_request_and_answer(model_server: ModelServer) -> None:
    provider = openai(model_server)
    completion = provider.complete(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    )
    assert completion.text == "echo: hello there"
    assert (completion.input_tokens, completion.output_tokens) == (4, 7)
    seen = model_server.requests[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["content-type"] == "application/json"
    assert seen.body == {
        "model": "tiny-model",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello there"},
        ],
    }
    assert KEY not in repr(provider)
    assert provider("again") == "echo: again"


def test_openai_without_a_key_sends_no_authorization(model_server: ModelServer) -> None:
    OpenAICompatibleProvider(model_server.openai_url, "local", retry=FAST)("hi")
    assert "authorization" not in model_server.requests[0].headers


def test_connections_are_kept_alive(model_server: ModelServer) -> None:
    provider = openai(model_server)
    for _ in range(5):
        provider("hi")
    assert len(model_server.requests) == 5
    assert all(r.headers.get("connection") != "close" for r in model_server.requests)


def test_anthropic_request_and_answer(model_server: ModelServer) -> None:
    provider = AnthropicProvider("claude-test", KEY, base_url=model_server.base, retry=FAST)
    completion = provider.complete(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    )
    assert completion.text == "echo: hello there"
    assert (completion.input_tokens, completion.output_tokens) == (2, 7)
    seen = model_server.requests[0]
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == ANTHROPIC_API_VERSION
    assert "authorization" not in seen.headers
    assert seen.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hello there"}],
    }
    assert KEY not in repr(provider)


def test_anthropic_needs_a_key() -> None:
    with pytest.raises(LLMConfigError, match="API key"):
        AnthropicProvider("claude-test", None)


def test_bad_base_url_is_a_config_error() -> None:
    with pytest.raises(LLMConfigError, match="http"):
        OpenAICompatibleProvider("file:///etc/passwd", "m")


def test_401_is_an_auth_error_and_never_retried(model_server: ModelServer) -> None:
    model_server.always = Reply(status=401)
    with pytest.raises(LLMAuthError, match=r"HTTP 401.*SANDBOX_KERNEL_LLM_API_KEY"):
        openai(model_server)("hi")
    assert len(model_server.requests) == 1


def test_429_then_success_is_retried(model_server: ModelServer) -> None:
    model_server.plan(Reply(status=429), Reply(status=503))
    assert openai(model_server)("hi") == "echo: hi"
    assert len(model_server.requests) == 3


def test_retry_after_is_honoured_within_the_cap(model_server: ModelServer) -> None:
    model_server.plan(Reply(status=429, headers={"Retry-After": "0.3"}))
    started = time.monotonic()
    assert openai(model_server)("hi") == "echo: hi"
    assert time.monotonic() - started >= 0.3
    policy = RetryPolicy(max_backoff_seconds=2)
    assert policy.wait_before(1, "3600") == 2  # a server cannot park the guest for an hour


def test_500_forever_gives_up_after_the_retries(model_server: ModelServer) -> None:
    model_server.always = Reply(status=500)
    with pytest.raises(LLMUnavailableError, match=r"HTTP 500 after 3 attempts"):
        openai(model_server)("hi")
    assert len(model_server.requests) == 3


def test_a_slow_server_times_out_without_retries(model_server: ModelServer) -> None:
    model_server.always = Reply(delay=1.5)
    retry = RetryPolicy(timeout_seconds=0.3, max_retries=3, backoff_seconds=0.01)
    with pytest.raises(LLMTimeoutError, match=r"did not answer within 0.3 s"):
        openai(model_server, retry)("hi")
    assert len(model_server.requests) == 1


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (b"not json at all", LLMResponseError, "not JSON"),
        (b'{"choices": []}', LLMResponseError, "no choices"),
        (b'{"choices": [{"message": {"content": 5}}]}', LLMResponseError, "not text"),
        (
            b'{"choices": [{"message": {"content": null, "refusal": "I cannot help"}}]}',
            LLMRefusalError,
            "I cannot help",
        ),
        (
            b'{"choices": [{"message": {"content": ""}, "finish_reason": "content_filter"}]}',
            LLMRefusalError,
            "content filter",
        ),
    ],
    ids=["not-json", "no-choices", "not-text", "refusal", "content-filter"],
)
def test_openai_malformed_and_refused_replies(
    model_server: ModelServer, body: bytes, error: type[Exception], message: str
) -> None:
    model_server.always = Reply(body=body)
    with pytest.raises(error, match=message):
        openai(model_server)("hi")


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (b'{"content": "nope"}', LLMResponseError, "no content list"),
        (b'{"content": [{"type": "tool_use"}]}', LLMResponseError, "no text block"),
        (b'{"content": [], "stop_reason": "refusal"}', LLMRefusalError, "declined"),
    ],
    ids=["no-content", "no-text", "refusal"],
)
def test_anthropic_malformed_and_refused_replies(
    model_server: ModelServer, body: bytes, error: type[Exception], message: str
) -> None:
    model_server.always = Reply(body=body)
    provider = AnthropicProvider("claude-test", KEY, base_url=model_server.base, retry=FAST)
    with pytest.raises(error, match=message):
        provider("hi")


def test_anthropic_overloaded_529_is_retried(model_server: ModelServer) -> None:
    model_server.plan(Reply(status=529))
    provider = AnthropicProvider("claude-test", KEY, base_url=model_server.base, retry=FAST)
    assert provider("hi") == "echo: hi"
    assert len(model_server.requests) == 2


def test_a_bad_request_carries_the_servers_message(model_server: ModelServer) -> None:
    model_server.always = Reply(status=404, body=b'{"error": {"message": "no model tiny-model"}}')
    with pytest.raises(LLMRequestError, match=r"HTTP 404\): no model tiny-model"):
        openai(model_server)("hi")


def test_a_server_echoing_the_key_never_puts_it_in_an_error(model_server: ModelServer) -> None:
    echoed = f'{{"error": {{"message": "invalid key {KEY}"}}}}'.encode()
    model_server.always = Reply(status=401, body=echoed)
    with pytest.raises(LLMAuthError) as caught:
        openai(model_server)("hi")
    assert KEY not in str(caught.value)
    assert "[redacted]" in str(caught.value)


def test_unreachable_server() -> None:
    retry = RetryPolicy(timeout_seconds=2, max_retries=1, backoff_seconds=0.01)
    provider = OpenAICompatibleProvider("http://127.0.0.1:9", "m", retry=retry)
    with pytest.raises(LLMUnavailableError, match=r"unreachable.*after 2 attempts"):
        provider("hi")
