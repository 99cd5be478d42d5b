"""sandbox-kernel: run untrusted Python (and JavaScript) in a resource-limited WebAssembly sandbox.

The public surface is `__all__`; everything else is internal and may change. One-shot
sandboxes (PythonSandbox, JavaScriptSandbox) and the persistent REPL session (ReplSandbox)
share the same host layer; the Jupyter kernel builds on ReplSandbox.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sandbox_kernel._lazy import lazy_getattr

if TYPE_CHECKING:
    from sandbox_kernel.core import (
        ExecutionPolicy,
        GuestImageCorrupt,
        GuestImageNotFound,
        LimitKind,
        PolicyValidationError,
        RuntimeType,
        SandboxAbandoned,
        SandboxBusyError,
        SandboxError,
        SandboxExecutionError,
        SandboxLogger,
        SandboxResult,
        SecurityEventKind,
        load_policy,
    )
    from sandbox_kernel.repl import (
        CodeExecution,
        ExecutionStatus,
        REPLConfig,
        ReplSandbox,
        create_repl,
    )
    from sandbox_kernel.runtimes import (
        BaseSandbox,
        JavaScriptSandbox,
        PythonSandbox,
        create_sandbox,
    )

__version__ = "0.1.0"

# A library does not print: events reach stderr only when the application configures logging.
logging.getLogger("sandbox_kernel").addHandler(logging.NullHandler())

__all__ = [
    "BaseSandbox",
    "CodeExecution",
    "ExecutionPolicy",
    "ExecutionStatus",
    "GuestImageCorrupt",
    "GuestImageNotFound",
    "JavaScriptSandbox",
    "LimitKind",
    "PolicyValidationError",
    "PythonSandbox",
    "REPLConfig",
    "ReplSandbox",
    "RuntimeType",
    "SandboxAbandoned",
    "SandboxBusyError",
    "SandboxError",
    "SandboxExecutionError",
    "SandboxLogger",
    "SandboxResult",
    "SecurityEventKind",
    "create_repl",
    "create_sandbox",
    "load_policy",
]

# The public names are imported on first use: the kernel, which needs only some of them,
# started 40 ms sooner without importing the one-shot runtimes and the native backend.
_HOMES = {
    **dict.fromkeys(
        (
            "ExecutionPolicy",
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
        ),
        "sandbox_kernel.core",
    ),
    **dict.fromkeys(
        ("CodeExecution", "ExecutionStatus", "REPLConfig", "ReplSandbox", "create_repl"),
        "sandbox_kernel.repl",
    ),
    **dict.fromkeys(
        ("BaseSandbox", "JavaScriptSandbox", "PythonSandbox", "create_sandbox"),
        "sandbox_kernel.runtimes",
    ),
}


__getattr__ = lazy_getattr(__name__, _HOMES)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
