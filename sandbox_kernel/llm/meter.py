"""UsageMeter: a session's running LLMUsage, and the gate that keeps it within its budget.

    with meter.call(prompt_chars) as record:   # LLMBudgetExceeded before a call over budget
        completion = provider.complete(messages)
        record(completion)

One meter per session, shared by the session's rlm_query children, so the budget holds for
the whole recursion. Thread-safe: llm_query_batched calls from several threads.

Must not import: wasmtime, anything Jupyter, sandbox_kernel.repl.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from sandbox_kernel.core.usage import LLMBudget, LLMUsage
from sandbox_kernel.llm.base import Completion, estimate_tokens
from sandbox_kernel.llm.errors import LLMBudgetExceeded

__all__ = ["UsageMeter"]


class UsageMeter:
    def __init__(self, budget: LLMBudget | None = None) -> None:
        self.budget = budget or LLMBudget()
        self._lock = threading.Lock()
        self._usage = LLMUsage()

    def read(self) -> LLMUsage:
        """The running total (a frozen copy)."""
        with self._lock:
            return self._usage

    def count_rlm(self) -> None:
        self._add(rlm_calls=1)

    @contextlib.contextmanager
    def call(self, prompt_chars: int) -> Iterator[Callable[[Completion], None]]:
        """Admit one model call of `prompt_chars` characters, or raise LLMBudgetExceeded;
        time it, and count it failed unless the body records a completion."""
        self._admit(prompt_chars)
        started = time.perf_counter()
        recorded: list[Completion] = []
        try:
            yield recorded.append
        finally:
            seconds = time.perf_counter() - started
            if recorded:
                completion = recorded[0]
                reported_in, reported_out = completion.input_tokens, completion.output_tokens
                estimated = reported_in is None or reported_out is None
                self._add(
                    input_tokens=(
                        estimate_tokens(prompt_chars) if reported_in is None else reported_in
                    ),
                    output_tokens=(
                        estimate_tokens(len(completion.text))
                        if reported_out is None
                        else reported_out
                    ),
                    seconds=seconds,
                    estimated=estimated,
                )
            else:
                self._add(failed_calls=1, seconds=seconds)

    def _admit(self, prompt_chars: int) -> None:
        budget = self.budget
        with self._lock:
            usage = self._usage
            if budget.max_calls is not None and usage.calls >= budget.max_calls:
                raise LLMBudgetExceeded(
                    f"the session's budget of {budget.max_calls:,} model calls is spent"
                )
            if (
                budget.max_prompt_chars is not None
                and usage.prompt_chars + prompt_chars > budget.max_prompt_chars
            ):
                raise LLMBudgetExceeded(
                    f"this prompt ({prompt_chars:,} characters) would pass the session's "
                    f"budget of {budget.max_prompt_chars:,} prompt characters "
                    f"({usage.prompt_chars:,} used)"
                )
            if budget.max_tokens is not None and usage.tokens >= budget.max_tokens:
                raise LLMBudgetExceeded(
                    f"the session's budget of {budget.max_tokens:,} tokens is spent "
                    f"({usage.tokens:,} used)"
                )
            self._usage = usage.model_copy(
                update={"calls": usage.calls + 1, "prompt_chars": usage.prompt_chars + prompt_chars}
            )

    def _add(
        self,
        *,
        rlm_calls: int = 0,
        failed_calls: int = 0,
        input_tokens: int = 0,
        output_tokens: int = 0,
        seconds: float = 0.0,
        estimated: bool = False,
    ) -> None:
        with self._lock:
            usage = self._usage
            self._usage = usage.model_copy(
                update={
                    "rlm_calls": usage.rlm_calls + rlm_calls,
                    "failed_calls": usage.failed_calls + failed_calls,
                    "input_tokens": usage.input_tokens + input_tokens,
                    "output_tokens": usage.output_tokens + output_tokens,
                    "seconds": usage.seconds + seconds,
                    "tokens_estimated": usage.tokens_estimated or estimated,
                }
            )
