"""The models, errors and logging every other layer of sandbox_kernel builds on.

Re-exports only; each name lives in one private-by-convention module (errors, policy,
results, logging), imported on first use. Must not import anything from the rest of
sandbox_kernel (but the lazy import helper), nor wasmtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_kernel._lazy import lazy_getattr

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

# Imported on first use: a module that needs only the errors (the guest library, the kernel's
# first reply) does not build the policy's models.
_HOMES = {
    "ExecutionPolicy": "sandbox_kernel.core.policy",
    "FieldError": "sandbox_kernel.core.errors",
    "GuestImageCorrupt": "sandbox_kernel.core.errors",
    "GuestImageNotFound": "sandbox_kernel.core.errors",
    "LimitKind": "sandbox_kernel.core.results",
    "load_policy": "sandbox_kernel.core.policy",
    "PolicyValidationError": "sandbox_kernel.core.errors",
    "RuntimeType": "sandbox_kernel.core.results",
    "SandboxAbandoned": "sandbox_kernel.core.errors",
    "SandboxBusyError": "sandbox_kernel.core.errors",
    "SandboxError": "sandbox_kernel.core.errors",
    "SandboxExecutionError": "sandbox_kernel.core.errors",
    "SandboxLogger": "sandbox_kernel.core.logging",
    "SandboxResult": "sandbox_kernel.core.results",
    "SecurityEventKind": "sandbox_kernel.core.logging",
}


__getattr__ = lazy_getattr(__name__, _HOMES)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
