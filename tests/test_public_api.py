"""The package's public surface is a contract: DESIGN.md's names, importable from the top."""

from __future__ import annotations

import sandbox_kernel

# The names ../shared/DESIGN.md promises, which tests and users outside the package rely on.
DESIGN_NAMES = {
    "ExecutionPolicy",
    "SandboxResult",
    "RuntimeType",
    "load_policy",
    "PolicyValidationError",
    "SandboxExecutionError",
    "SandboxLogger",
    "BaseSandbox",
    "PythonSandbox",
    "JavaScriptSandbox",
    "create_sandbox",
    "REPLConfig",
    "CodeExecution",
    "ReplSandbox",
    "create_repl",
}


def test_design_names_are_exported() -> None:
    assert set(sandbox_kernel.__all__) >= DESIGN_NAMES
    for name in sandbox_kernel.__all__:
        assert getattr(sandbox_kernel, name) is not None, name


def test_surface_is_pinned() -> None:
    extras = set(sandbox_kernel.__all__) - DESIGN_NAMES
    assert extras == {
        "ExecutionStatus",
        "GuestImageCorrupt",
        "GuestImageNotFound",
        "LimitKind",
        "SandboxAbandoned",
        "SandboxBusyError",
        "SandboxError",
        "SecurityEventKind",
    }
