"""sandbox-kernel: run untrusted Python (and JavaScript) in a resource-limited WebAssembly sandbox.

The public surface is `__all__`; everything else is internal and may change. The persistent
REPL session (ReplSandbox) and the Jupyter kernel build on the same host layer.
"""

from __future__ import annotations

import logging

from sandbox_kernel.core import (
    ExecutionPolicy,
    GuestImageCorrupt,
    GuestImageNotFound,
    LimitKind,
    PolicyValidationError,
    RuntimeType,
    SandboxBusyError,
    SandboxError,
    SandboxExecutionError,
    SandboxLogger,
    SandboxResult,
    SecurityEventKind,
    load_policy,
)
from sandbox_kernel.runtimes import BaseSandbox, JavaScriptSandbox, PythonSandbox, create_sandbox

__version__ = "0.1.0"

# A library does not print: events reach stderr only when the application configures logging.
logging.getLogger("sandbox_kernel").addHandler(logging.NullHandler())

__all__ = [
    "BaseSandbox",
    "ExecutionPolicy",
    "GuestImageCorrupt",
    "GuestImageNotFound",
    "JavaScriptSandbox",
    "LimitKind",
    "PolicyValidationError",
    "PythonSandbox",
    "RuntimeType",
    "SandboxBusyError",
    "SandboxError",
    "SandboxExecutionError",
    "SandboxLogger",
    "SandboxResult",
    "SecurityEventKind",
    "create_sandbox",
    "load_policy",
]
