"""The usage meter: what a session's model calls used, and the budgets that stop them."""

from __future__ import annotations

import concurrent.futures

import pytest

from sandbox_kernel.llm import (
    Completion,
    FunctionProvider,
    LLMBudget,
    LLMBudgetExceeded,
    LLMError,
    LLMService,
    LLMUsage,
)


def service(budget: LLMBudget | None = None, tokens: bool = False) -> LLMService:
    def answer(messages: list[dict[str, str]]) -> Completion | str:
        text = "four"
        return Completion(text=text, input_tokens=10, output_tokens=2) if tokens else text

    return LLMService(FunctionProvider(answer), budget=budget)


def test_usage_counts_reported_tokens() -> None:
    llm = service(tokens=True)
    llm.query("two plus two")
    llm.query("again")
    used = llm.meter.read()
    assert (used.calls, used.failed_calls, used.prompt_chars) == (2, 0, 17)
    assert (used.input_tokens, used.output_tokens, used.tokens_estimated) == (20, 4, False)
    assert used.seconds >= 0


def test_usage_estimates_tokens_when_none_are_reported() -> None:
    llm = service()
    llm.query("x" * 400)
    used = llm.meter.read()
    assert (used.input_tokens, used.output_tokens, used.tokens_estimated) == (100, 1, True)


def test_failed_calls_are_counted() -> None:
    def broken(messages: object) -> str:
        raise LLMError("down")

    llm = LLMService(FunctionProvider(broken))
    with pytest.raises(LLMError):
        llm.query("hi")
    assert llm.meter.read().failed_calls == 1


def test_difference_between_readings() -> None:
    before = LLMUsage(calls=1, input_tokens=5, seconds=1.0)
    after = LLMUsage(calls=4, input_tokens=9, seconds=1.5, rlm_calls=1)
    assert after - before == LLMUsage(calls=3, input_tokens=4, seconds=0.5, rlm_calls=1)


def test_call_budget() -> None:
    llm = service(LLMBudget(max_calls=2))
    llm.query("a")
    llm.query("b")
    with pytest.raises(LLMBudgetExceeded, match="budget of 2 model calls"):
        llm.query("c")
    assert llm.meter.read().calls == 2


def test_prompt_character_budget_refuses_before_sending() -> None:
    llm = service(LLMBudget(max_prompt_chars=10))
    llm.query("12345")
    with pytest.raises(LLMBudgetExceeded, match=r"\(6 characters\).*10 prompt characters"):
        llm.query("123456")
    llm.query("12345")  # still fits exactly
    assert llm.meter.read().prompt_chars == 10


def test_token_budget() -> None:
    llm = service(LLMBudget(max_tokens=20), tokens=True)
    llm.query("a")  # 12 tokens
    llm.query("b")  # 24: over, but the answer is already paid for
    with pytest.raises(LLMBudgetExceeded, match="budget of 20 tokens is spent"):
        llm.query("c")


def test_the_budget_holds_across_threads() -> None:
    llm = service(LLMBudget(max_calls=25))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(llm.query, "q") for _ in range(100)]
    outcomes = [f.exception() for f in futures]
    assert sum(o is None for o in outcomes) == 25
    assert all(isinstance(o, LLMBudgetExceeded) for o in outcomes if o is not None)
    assert llm.meter.read().calls == 25
