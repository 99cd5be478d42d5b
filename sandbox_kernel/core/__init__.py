"""The models, errors and logging every other layer of sandbox_kernel builds on.

Re-exports only; each name lives in one private-by-convention module (errors, policy,
results, logging). Must not import anything from the rest of sandbox_kernel, nor
wasmtime.
"""

from __future__ import annotations

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
