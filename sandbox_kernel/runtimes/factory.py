"""create_sandbox(): a one-shot sandbox for a runtime, by name or RuntimeType.

Must not import: sandbox_kernel.repl, anything Jupyter.
"""

from __future__ import annotations

from pathlib import Path

from sandbox_kernel.core.logging import SandboxLogger
from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.core.results import RuntimeType
from sandbox_kernel.runtimes.base import BaseSandbox
from sandbox_kernel.runtimes.javascript import JavaScriptSandbox
from sandbox_kernel.runtimes.python import PythonSandbox

__all__ = ["create_sandbox"]

_RUNTIMES: dict[RuntimeType, type[BaseSandbox]] = {
    RuntimeType.PYTHON: PythonSandbox,
    RuntimeType.JAVASCRIPT: JavaScriptSandbox,
}


def create_sandbox(
    runtime: RuntimeType | str = RuntimeType.PYTHON,
    *,
    policy: ExecutionPolicy | None = None,
    workspace: Path | str | None = None,
    logger: SandboxLogger | None = None,
    wasm_binary_path: Path | str | None = None,
    inject_setup: bool = True,
) -> BaseSandbox:
    """A sandbox for `runtime` ("python" or "javascript"); ValueError for any other name.
    `inject_setup` is the Python sandbox's default (each `execute` may override it)."""
    try:
        kind = RuntimeType(runtime)
    except ValueError:
        names = ", ".join(repr(r.value) for r in RuntimeType)
        raise ValueError(f"unknown runtime {runtime!r}; expected one of {names}") from None
    cls = _RUNTIMES[kind]
    if cls is PythonSandbox:
        return PythonSandbox(
            policy, workspace, logger, inject_setup=inject_setup, wasm_binary_path=wasm_binary_path
        )
    return JavaScriptSandbox(policy, workspace, logger, wasm_binary_path=wasm_binary_path)
