"""The exceptions of the data analysis runner, as one hierarchy.

```
SandboxError(Exception)                                    (sandbox_kernel.core.errors)
└── RunnerError(SandboxError)
    ├── RunnerConfigError(RunnerError, ValueError)       a setting, the registry or the guard
    │   ├── DatasetRegistryError                         lists are invalid (TOML, values)
    │   └── GuardConfigError
    ├── DatasetNotFound(RunnerError, LookupError)        no dataset has that id
    └── CapsuleNotFound(RunnerError, LookupError)        no run capsule has that id
```

These are for the operator's and the caller's misuse. A request, whatever it holds, never
raises from `execute_python`, `execute_sql` or `run_request`: its failures come back as a
`RunnerResponse` with a typed `ErrorInfo` (see models.py).

Messages never name a host path: they may reach an agent (through a response) that must not
learn where the data lives.

Must not import anything from sandbox_kernel but core.
"""

from __future__ import annotations

from sandbox_kernel.core.errors import SandboxError

__all__ = [
    "CapsuleNotFound",
    "DatasetNotFound",
    "DatasetRegistryError",
    "GuardConfigError",
    "RunnerConfigError",
    "RunnerError",
]


class RunnerError(SandboxError):
    """Base of every exception the runner raises on purpose."""


class RunnerConfigError(RunnerError, ValueError):
    """The runner's configuration is invalid (an environment variable, a TOML file)."""


class DatasetRegistryError(RunnerConfigError):
    """The dataset registry (datasets.toml) cannot be read or holds an invalid entry."""


class GuardConfigError(RunnerConfigError):
    """The guard's allow and block lists are invalid."""


class DatasetNotFound(RunnerError, LookupError):
    """No registered dataset has the id asked for."""

    def __init__(self, dataset_id: str, known: list[str]) -> None:
        self.dataset_id = dataset_id
        self.known = known
        listed = ", ".join(known) if known else "none"
        super().__init__(f"unknown dataset_id {dataset_id!r}; registered: {listed}")


class CapsuleNotFound(RunnerError, LookupError):
    """No run capsule has the id asked for (or a prefix matches several)."""
