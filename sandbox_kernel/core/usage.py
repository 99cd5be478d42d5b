"""What a session's language-model calls used (LLMUsage) and may use (LLMBudget).

Plain models: the llm package meters and enforces them, repl/ reports them per execution,
the kernel shows them in `%sandbox` and the run log.

Must not import anything from the rest of sandbox_kernel, nor wasmtime.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, PositiveInt

__all__ = ["LLMBudget", "LLMUsage"]


class LLMUsage(BaseModel):
    """Counts of language-model work. Token counts come from the provider's reply; when a
    provider reports none (a scripted model), they are estimated at 4 characters a token
    and `tokens_estimated` says so."""

    model_config = ConfigDict(frozen=True)

    calls: int = 0  # model requests, including each step of an rlm_query loop
    failed_calls: int = 0
    rlm_calls: int = 0  # rlm_query runs started
    prompt_chars: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0  # wall time spent waiting for answers
    tokens_estimated: bool = False

    def __sub__(self, other: LLMUsage) -> LLMUsage:
        """The usage between two readings of the same running total."""
        return LLMUsage(
            calls=self.calls - other.calls,
            failed_calls=self.failed_calls - other.failed_calls,
            rlm_calls=self.rlm_calls - other.rlm_calls,
            prompt_chars=self.prompt_chars - other.prompt_chars,
            input_tokens=self.input_tokens - other.input_tokens,
            output_tokens=self.output_tokens - other.output_tokens,
            seconds=max(0.0, self.seconds - other.seconds),
            tokens_estimated=self.tokens_estimated,
        )

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class LLMBudget(BaseModel):
    """Per-session caps on model work, shared by the session's rlm_query children. None is
    no cap. A call that would pass one fails inside the guest with a clear error."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_calls: PositiveInt | None = None
    max_prompt_chars: PositiveInt | None = None
    max_tokens: PositiveInt | None = None  # input + output
