"""The models, errors and logging every other layer of sandbox_kernel builds on.

Re-exports only; each name lives in one private-by-convention module (errors, policy,
results, logging), imported on first use. Must not import anything from the rest of
sandbox_kernel (but the lazy import helper), nor wasmtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_kernel._lazy import lazy_exports

if TYPE_CHECKING:
    from sandbox_kernel.core.errors import (
        FieldError,
        GuestImageCorrupt,
        GuestImageNotFound,
        PolicyValidationError,
        SandboxAbandoned,
        SandboxBusyError,
        SandboxError,
        SandboxExecutionError,
    )
    from sandbox_kernel.core.logging import SandboxLogger, SecurityEventKind
    from sandbox_kernel.core.policy import ExecutionPolicy, load_policy
    from sandbox_kernel.core.results import LimitKind, RuntimeType, SandboxResult

__all__ = [
    "ExecutionPolicy",
    "FieldError",
    "GuestImageCorrupt",
    "GuestImageNotFound",
    "LimitKind",
    "PolicyValidationError",
    "RuntimeType",
    "SandboxAbandoned",
    "SandboxBusyError",
    "SandboxError",
    "SandboxExecutionError",
    "SandboxLogger",
    "SandboxResult",
    "SecurityEventKind",
    "load_policy",
]

# Each name is imported from its module on first use: a module that needs only the errors
# (the guest library, the kernel's first reply) does not build the policy's models.
__getattr__ = lazy_exports(
    __name__,
    __all__,
    tuple(f"{__name__}.{module}" for module in ("errors", "logging", "policy", "results")),
)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
