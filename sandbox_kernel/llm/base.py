"""The provider interface: a conversation in, one Completion out.

    class MyProvider:
        name = "my-model"
        def complete(self, messages: Sequence[ChatMessage]) -> Completion: ...

Any object with that shape is a provider (`LLMProvider` is a Protocol). Providers are called
from several threads at once (llm_query_batched) and must be safe for that. They raise
`LLMError` subclasses (llm/errors.py) and nothing else.

Must not import: wasmtime, anything Jupyter, sandbox_kernel.repl.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

from pydantic import BaseModel, ConfigDict, NonNegativeInt

__all__ = [
    "ChatMessage",
    "Completion",
    "LLMProvider",
    "estimate_tokens",
    "reported_tokens",
    "user",
]

Role = Literal["system", "user", "assistant"]


class ChatMessage(TypedDict):
    role: Role
    content: str


def user(text: str) -> list[ChatMessage]:
    """A one-question conversation (what llm_query sends)."""
    return [{"role": "user", "content": text}]


class Completion(BaseModel):
    """A model's answer and what it cost. Token counts are None when the provider does not
    report them."""

    model_config = ConfigDict(frozen=True)

    text: str
    input_tokens: NonNegativeInt | None = None
    output_tokens: NonNegativeInt | None = None
    model: str | None = None


@runtime_checkable
class LLMProvider(Protocol):
    name: str

    def complete(self, messages: Sequence[ChatMessage]) -> Completion:
        """The model's reply to the conversation so far."""
        ...


def estimate_tokens(chars: int) -> int:
    """A rough token count for providers that report none: 4 characters a token."""
    return math.ceil(chars / 4)


def reported_tokens(value: Any) -> int | None:
    """A token count from a server's usage block, or None when it is not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
