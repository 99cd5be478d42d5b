"""The OpenAI-compatible provider against a real local HTTP server, alone and in a session."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_kernel import REPLConfig, create_repl
from sandbox_kernel.llm import LLMError, OpenAICompatibleProvider, provider_from_env
from tests.llm.conftest import ChatServer


def test_request_and_answer(chat_server: ChatServer) -> None:
    provider = OpenAICompatibleProvider(chat_server.url, "tiny-model", api_key="sk-test")
    assert provider("hello") == "echo: hello"
    sent = chat_server.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["Authorization"] == "Bearer sk-test"
    assert sent["body"] == {
        "model": "tiny-model",
        "messages": [{"role": "user", "content": "hello"}],
    }
    assert "sk-test" not in repr(provider)


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (401, None, "HTTP 401"),
        (500, None, "HTTP 500"),
        (200, b"not json", "not JSON"),
        (200, b'{"choices": []}', "no choices"),
    ],
    ids=["unauthorized", "server-error", "malformed", "no-choices"],
)
def test_failures_are_clear(
    chat_server: ChatServer, status: int, body: bytes | None, message: str
) -> None:
    chat_server.status, chat_server.body = status, body
    with pytest.raises(LLMError, match=message) as caught:
        OpenAICompatibleProvider(chat_server.url, "m", api_key="sk-secret")("hi")
    assert "sk-secret" not in str(caught.value)


def test_unreachable_server() -> None:
    with pytest.raises(LLMError, match="unreachable"):
        OpenAICompatibleProvider("http://127.0.0.1:9", "m", timeout_seconds=2)("hi")


def test_from_environment(chat_server: ChatServer) -> None:
    assert provider_from_env({}) is None
    env = {
        "SANDBOX_KERNEL_LLM_BASE_URL": chat_server.url,
        "SANDBOX_KERNEL_LLM_MODEL": "m1",
        "SANDBOX_KERNEL_LLM_API_KEY": "k",
    }
    provider = provider_from_env(env)
    assert provider is not None and provider.model == "m1"
    with pytest.raises(ValueError, match="http"):
        OpenAICompatibleProvider("ftp://x", "m")


def test_llm_query_from_the_guest(chat_server: ChatServer, tmp_path: Path) -> None:
    provider = OpenAICompatibleProvider(chat_server.url, "m", api_key="sk-hidden")
    with create_repl(REPLConfig(workspace=tmp_path, on_llm_query=provider)) as repl:
        assert repl.execute("llm_query('ping')").result == {"text/plain": "'echo: ping'"}
        chat_server.status = 401
        failed = repl.execute("try:\n    llm_query('x')\nexcept RuntimeError as e:\n    print(e)")
        assert "HTTP 401" in failed.stdout
        assert "sk-hidden" not in failed.stdout
