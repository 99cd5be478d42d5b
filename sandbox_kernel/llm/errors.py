"""Why a model could not answer, as one hierarchy.

```
LLMError(RuntimeError)
├── LLMConfigError(LLMError, ValueError)   the provider settings are incomplete or wrong
├── LLMAuthError                           the server refused the credentials (401, 403)
├── LLMRequestError                        the server refused the request (400, 404, 422, ...)
├── LLMUnavailableError                    unreachable, or 429/5xx after every retry
│   └── LLMTimeoutError                    no answer within the timeout
├── LLMResponseError                       the reply is not what the protocol promises
├── LLMRefusalError                        the model declined to answer
├── LLMBudgetExceeded                      the session's calls, prompt or token budget is spent
└── RLMError                               an rlm_query loop ended without an answer
```

Inside the guest every one of them is a RuntimeError whose message names the class and the
reason ("llm_query failed: LLMAuthError: ..."); the session goes on. Messages never hold an
API key: providers scrub it from anything a server sends back.

Must not import: anything else of sandbox_kernel, wasmtime, anything Jupyter.
"""

from __future__ import annotations

__all__ = [
    "LLMAuthError",
    "LLMBudgetExceeded",
    "LLMConfigError",
    "LLMError",
    "LLMRefusalError",
    "LLMRequestError",
    "LLMResponseError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "RLMError",
]


class LLMError(RuntimeError):
    """The model could not answer."""


class LLMConfigError(LLMError, ValueError):
    """The provider settings are incomplete or wrong (raised when they are read)."""


class LLMAuthError(LLMError):
    """The server refused the credentials."""


class LLMRequestError(LLMError):
    """The server refused the request itself (a bad model name, a malformed body)."""


class LLMUnavailableError(LLMError):
    """The server could not be reached, or stayed overloaded through every retry."""


class LLMTimeoutError(LLMUnavailableError):
    """The server did not answer within the timeout."""


class LLMResponseError(LLMError):
    """The server's reply does not follow the protocol (not JSON, no text)."""


class LLMRefusalError(LLMError):
    """The model declined to answer (a refusal or a content filter)."""


class LLMBudgetExceeded(LLMError):
    """The session's budget of calls, prompt characters or tokens is spent."""


class RLMError(LLMError):
    """An rlm_query loop ended without an answer (depth or iteration limit, a cancel)."""
