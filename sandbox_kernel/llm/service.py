"""LLMService: what a session's llm_query, llm_query_batched and rlm_query are answered by.

    service = LLMService(provider, budget=LLMBudget(max_calls=200))
    repl = create_repl(service.configure(REPLConfig(...)))

`configure` returns a copy of a session config wired to the service: llm_query asks the
provider through the usage meter (budgets enforced, usage counted), llm_query_batched runs
`concurrency` calls at once, rlm_query runs an RLMLoop in a child session, and each
execution's CodeExecution.llm says what it used. One service may serve many sessions; they
then share its budget.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sandbox_kernel.core.usage import LLMBudget
from sandbox_kernel.llm.base import ChatMessage, Completion, LLMProvider, user
from sandbox_kernel.llm.errors import LLMError
from sandbox_kernel.llm.meter import UsageMeter
from sandbox_kernel.llm.rlm import RLMLoop, RLMSettings, RLMStep
from sandbox_kernel.repl import create_repl
from sandbox_kernel.repl.models import REPLConfig

if TYPE_CHECKING:
    from sandbox_kernel.repl import ReplBackend

__all__ = ["LLMService"]

# A child session's output goes to the model, never to the user's notebook.
_CHILD_QUIET = {"on_stdout": None, "on_stderr": None, "on_display": None, "on_input": None}


class LLMService:
    def __init__(
        self,
        provider: LLMProvider,
        *,
        budget: LLMBudget | None = None,
        rlm: RLMSettings | None = None,
        concurrency: int = 8,
        sub_query_chars: int = 100_000,
        on_step: Callable[[RLMStep], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, not {concurrency}")
        self.provider = provider
        self.meter = UsageMeter(budget)
        self.rlm = rlm or RLMSettings()
        self.concurrency = concurrency
        self.sub_query_chars = sub_query_chars  # what the rlm prompt says llm_query can read
        self.on_step = on_step

    def __repr__(self) -> str:
        return f"LLMService(provider={self.provider.name!r}, budget={self.meter.budget!r})"

    # -- calls -------------------------------------------------------------------------------

    def ask(self, messages: Sequence[ChatMessage]) -> Completion:
        """One metered model call: LLMBudgetExceeded before a call over budget."""
        prompt_chars = sum(len(m["content"]) for m in messages)
        with self.meter.call(prompt_chars) as record:
            try:
                completion = self.provider.complete(messages)
            except LLMError:
                raise
            except Exception as exc:  # a provider's own bug still reads as the model failing
                name = self.provider.name
                raise LLMError(
                    f"the provider {name!r} failed: {type(exc).__name__}: {exc}"
                ) from exc
            if not isinstance(completion, Completion):
                kind = type(completion).__name__
                raise LLMError(f"provider {self.provider.name!r} returned {kind}")
            record(completion)
            return completion

    def query(self, prompt: str) -> str:
        """llm_query: one question, its answer."""
        return self.ask(user(prompt)).text

    # -- sessions ----------------------------------------------------------------------------

    def configure(self, config: REPLConfig, depth: int = 0) -> REPLConfig:
        """A copy of `config` whose sessions ask this service (at recursion `depth`)."""
        bound = config.model_copy(
            update={
                "on_llm_query": self.query,
                "llm_concurrency": self.concurrency,
                "llm_usage": self.meter.read,
            }
        )
        bound.on_rlm_query = functools.partial(self._rlm_query, parent=bound, depth=depth)
        return bound

    def _rlm_query(self, task: str, ctx: object, *, parent: REPLConfig, depth: int) -> str:
        return RLMLoop(self, parent, depth).run(task, ctx)

    def child_session(self, parent: REPLConfig, depth: int) -> ReplBackend:
        """A new session for an rlm_query loop: the parent's config, quiet, one level down."""
        return create_repl(self.configure(parent.model_copy(update=_CHILD_QUIET), depth))

    def report(self, step: RLMStep) -> None:
        """Hand a loop's step to `on_step` (the kernel's run log); its failure is not ours."""
        if self.on_step is not None:
            with contextlib.suppress(Exception):
                self.on_step(step)

    def close(self) -> None:
        close = getattr(self.provider, "close", None)
        if callable(close):
            close()
