"""llm_query and llm_query_batched from a real guest session, answered by a real local server
through LLMService: answers, order, the concurrency bound, usage per execution, and every
failure reaching the guest as a clear exception while the session goes on."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sandbox_kernel import ReplSandbox
from sandbox_kernel.llm import (
    LLMBudget,
    LLMService,
    OpenAICompatibleProvider,
    RetryPolicy,
)
from tests.llm.servers import ModelServer, Reply
from tests.repl.conftest import new_repl, plain, repl_config, run_ok

KEY = "sk-session-secret-42"


def session(
    workspace: Path,
    model_server: ModelServer,
    *,
    budget: LLMBudget | None = None,
    concurrency: int = 8,
    retry: RetryPolicy | None = None,
) -> ReplSandbox:
    retry = retry or RetryPolicy(timeout_seconds=5, max_retries=2, backoff_seconds=0.01)
    provider = OpenAICompatibleProvider(model_server.openai_url, "m", api_key=KEY, retry=retry)
    service = LLMService(provider, budget=budget, concurrency=concurrency)
    return new_repl(service.configure(repl_config(workspace, {"timeout_seconds": 30})))


def test_llm_query_from_the_guest(workspace: Path, model_server: ModelServer) -> None:
    repl = session(workspace, model_server)
    try:
        run_ok(repl, "kept = 'state before'")
        result = run_ok(repl, "answer = llm_query('What is 2+2?')\nanswer")
        assert plain(result) == "'echo: What is 2+2?'"
        assert result.llm is not None
        assert (result.llm.calls, result.llm.prompt_chars, result.llm.input_tokens) == (1, 12, 3)
        assert result.llm.output_tokens == 7 and not result.llm.tokens_estimated
        quiet = run_ok(repl, "x = 1")
        assert quiet.llm is not None and quiet.llm.calls == 0  # per execution, not running
    finally:
        repl.destroy()


def test_batched_answers_come_back_in_order_within_the_bound(
    workspace: Path, model_server: ModelServer
) -> None:
    model_server.delay = 0.05
    repl = session(workspace, model_server, concurrency=4)
    try:
        code = "answers = llm_query_batched([f'q{i}' for i in range(16)])"
        result = run_ok(repl, code)
        assert plain(run_ok(repl, "answers == [f'echo: q{i}' for i in range(16)]")) == "True"
        assert model_server.peak_concurrency == 4
        assert result.llm is not None and result.llm.calls == 16
    finally:
        repl.destroy()


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda s: setattr(s, "always", Reply(status=401)), "LLMAuthError"),
        (lambda s: setattr(s, "always", Reply(status=500)), r"HTTP 500 after 3 attempts"),
        (lambda s: setattr(s, "always", Reply(body=b"<html>")), "not JSON"),
        (lambda s: setattr(s, "always", Reply(delay=2)), r"did not answer within 0.5 s"),
    ],
    ids=["401", "500-forever", "malformed", "slow"],
)
def test_failures_are_clear_exceptions_in_the_guest(
    workspace: Path, model_server: ModelServer, setup: object, message: str
) -> None:
    setup(model_server)  # type: ignore[operator]
    retry = RetryPolicy(timeout_seconds=0.5, max_retries=2, backoff_seconds=0.01)
    repl = session(workspace, model_server, retry=retry)
    try:
        run_ok(repl, "kept = 41")
        code = (
            "try:\n    llm_query('hi')\nexcept RuntimeError as exc:\n    caught = str(exc)\ncaught"
        )
        caught = ast.literal_eval(plain(run_ok(repl, code)))
        assert caught.startswith("llm_query failed: LLM")
        assert re.search(message, caught), caught
        assert KEY not in caught
        assert plain(run_ok(repl, "kept + 1")) == "42"
    finally:
        repl.destroy()


def test_429_then_success_inside_the_guest(workspace: Path, model_server: ModelServer) -> None:
    model_server.plan(Reply(status=429), Reply(status=429))
    repl = session(workspace, model_server)
    try:
        assert plain(run_ok(repl, "llm_query('hi')")) == "'echo: hi'"
        assert len(model_server.requests) == 3
    finally:
        repl.destroy()


def test_budget_exceeded_is_an_exception_in_the_guest(
    workspace: Path, model_server: ModelServer
) -> None:
    repl = session(workspace, model_server, budget=LLMBudget(max_calls=2))
    try:
        run_ok(repl, "a = llm_query('one')")
        failed = repl.execute("b = llm_query_batched(['two', 'three'])")
        assert failed.ename == "RuntimeError"
        assert "LLMBudgetExceeded" in (failed.evalue or "")
        assert "budget of 2 model calls" in (failed.evalue or "")
        assert plain(run_ok(repl, "a")) == "'echo: one'"
        assert len(model_server.requests) == 2  # the call over budget was never sent
    finally:
        repl.destroy()
