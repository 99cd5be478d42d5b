"""The exceptions sandbox-kernel raises, as one hierarchy.

```
SandboxError(Exception)
├── PolicyValidationError(SandboxError, ValueError)       a policy (or its TOML file) is invalid
└── SandboxExecutionError(SandboxError, RuntimeError)     the host could not run a guest
    ├── GuestImageNotFound(..., FileNotFoundError)       a guest binary or artifact is missing
    ├── GuestImageCorrupt                                 an artifact's SHA256 is not the pin
    ├── SandboxBusyError                                  a sandbox asked to run while it runs
    └── SandboxAbandoned                                  a session abandoned runs nothing more
```

Guest failures (a traceback, an exhausted limit, a trap) are not exceptions: they come
back as data in a `SandboxResult`. These exceptions are for caller misuse and for a
host that cannot do its job.

Must not import anything from the rest of sandbox_kernel, nor wasmtime.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
from pydantic_core import ErrorDetails

__all__ = [
    "FieldError",
    "GuestImageCorrupt",
    "GuestImageNotFound",
    "PolicyValidationError",
    "SandboxAbandoned",
    "SandboxBusyError",
    "SandboxError",
    "SandboxExecutionError",
]

# Long values (a whole env table, a pasted script) would drown the message.
_MAX_VALUE_REPR = 80

# pydantic's wording for the checks policies use, in the house wording.
_PYDANTIC_MESSAGES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "finite_number": "must be a finite number",
    "extra_forbidden": "unknown field",
}


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem with one field of a policy.

    `field` is a dotted location ("fuel_budget", "env.FOO", "inherit_env[2]"); an empty
    string means the document as a whole (a TOML syntax error, a wrong top-level type).
    `value` is the offending input, or None when there is nothing useful to show.
    """

    field: str
    message: str
    value: object | None = None

    def __str__(self) -> str:
        text = f"{self.field}: {self.message}" if self.field else self.message
        if self.value is not None:
            text += f" (got {_short_repr(self.value)})"
        return text


class SandboxError(Exception):
    """Base of every exception sandbox-kernel raises on purpose."""


class PolicyValidationError(SandboxError, ValueError):
    """An `ExecutionPolicy` (or the TOML file it came from) is invalid.

    `errors` lists every problem found, not only the first; `source` is the policy file
    when there is one.
    """

    def __init__(self, errors: Iterable[FieldError], source: Path | None = None) -> None:
        self.errors: list[FieldError] = list(errors)
        self.source: Path | None = source
        super().__init__(self._render())

    @classmethod
    def from_pydantic(
        cls, exc: pydantic.ValidationError, source: Path | None = None
    ) -> PolicyValidationError:
        """Translate pydantic's report, one `FieldError` per pydantic error."""
        return cls([_field_error(detail) for detail in exc.errors()], source=source)

    def with_source(self, source: Path) -> PolicyValidationError:
        """The same errors, attributed to the policy file `source`."""
        return type(self)(self.errors, source=source)

    def _render(self) -> str:
        where = f" in {self.source}" if self.source is not None else ""
        if len(self.errors) == 1:
            return f"invalid policy{where}: {self.errors[0]}"
        lines = [f"invalid policy{where} ({len(self.errors)} errors):"]
        lines += [f"  {error}" for error in self.errors]
        return "\n".join(lines)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.errors, self.source))


class SandboxExecutionError(SandboxError, RuntimeError):
    """The host could not run a guest (not a failure of the guest's own code)."""


class GuestImageNotFound(SandboxExecutionError, FileNotFoundError):
    """A guest binary or artifact is missing.

    Also a `FileNotFoundError`, with `errno`, `strerror` and `filename` set as `open()`
    sets them, so callers that only know the builtin still catch it.
    """

    def __init__(self, path: Path | str, hint: str = "") -> None:
        self.path = Path(path)
        self.hint = hint
        message = f"guest image not found: {self.path}"
        if hint:
            message += f"; {hint}"
        # Called by name: the MRO puts RuntimeError.__init__ first, which would not set
        # errno and filename.
        FileNotFoundError.__init__(self, errno.ENOENT, message, str(self.path))

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.hint))


class GuestImageCorrupt(SandboxExecutionError):
    """A guest artifact's SHA256 does not match the digest it is pinned to."""

    def __init__(self, path: Path | str, expected: str, actual: str, hint: str = "") -> None:
        self.path = Path(path)
        self.expected = expected
        self.actual = actual
        self.hint = hint
        message = (
            f"guest image corrupt: {self.path} has SHA256 {actual}, expected the pinned {expected}"
        )
        if hint:
            message += f"; {hint}"
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.expected, self.actual, self.hint))


class SandboxBusyError(SandboxExecutionError):
    """A sandbox was asked to run while it is already running."""

    def __init__(self, message: str = "the sandbox is already running an execution") -> None:
        super().__init__(message)


class SandboxAbandoned(SandboxExecutionError):
    """A session whose caller went away (ReplSandbox.abandon) was asked to run guest code:
    nothing runs in it any more."""

    def __init__(self, message: str = "the session was abandoned: nothing more runs in it") -> None:
        super().__init__(message)


def _field_error(detail: ErrorDetails) -> FieldError:
    """One pydantic error dict as a `FieldError`."""
    location = _dotted(detail["loc"])
    ctx = detail.get("ctx") or {}
    template = _PYDANTIC_MESSAGES.get(detail["type"])
    if template is not None:
        message = template.format(**ctx)
    elif detail["type"] == "value_error":
        message = str(ctx.get("error", detail["msg"]))
    else:
        message = detail["msg"][:1].lower() + detail["msg"][1:]
    # The input of a model-level error is the whole document: not worth repeating.
    value = detail.get("input") if location else None
    return FieldError(field=location, message=message, value=value)


def _dotted(loc: Sequence[int | str]) -> str:
    """('env', 'FOO') -> 'env.FOO'; ('env', 'A=B') -> "env['A=B']"; ('x', 2) -> 'x[2]'."""
    text = ""
    for part in loc:
        if part == "[key]":
            continue  # pydantic's marker for a dict key; the key itself came just before
        if isinstance(part, str) and not text:
            text = part  # a top-level field or TOML key, as written
        elif isinstance(part, str) and part.isidentifier():
            text += f".{part}"
        else:
            text += f"[{part!r}]"
    return text


def _short_repr(value: object) -> str:
    text = repr(value)
    if len(text) > _MAX_VALUE_REPR:
        text = text[: _MAX_VALUE_REPR - 3] + "..."
    return text
