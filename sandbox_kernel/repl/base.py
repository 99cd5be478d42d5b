"""The one interface every REPL backend implements.

`ReplBackend` is what the kernel, the runner and the RLM helpers hold: wasm (ReplSandbox),
daemon (DaemonClientSandbox), native and pyodide (NativeReplSandbox and its subclass) all
implement it, so no caller needs to know which one runs its cells. The part the backends
that answer the driver's door themselves share is bridged.py's BridgedSession.

Must not import: wasmtime, sandbox_kernel.host, anything Jupyter.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Self

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.repl.models import CodeExecution, REPLConfig, limited

__all__ = ["ReplBackend"]


class ReplBackend(ABC):
    """A persistent Python session: cells run one after another in one namespace.

    `with session:` initializes it (no context) and destroys it at the end. Every limit is
    the policy's (`config.policy`); `set_limits` changes a live session's for the executions
    that follow.
    """

    config: REPLConfig
    sandboxed: bool = True  # False: a backend that is NO sandbox (native, pyodide)

    @abstractmethod
    def initialize(self, context: object = None) -> None:
        """Start the session (once) and bind `context` inside it."""

    @abstractmethod
    def execute(self, code: str) -> CodeExecution:
        """Run one cell; a guest failure is a CodeExecution, never an exception."""

    @abstractmethod
    def cancel(self) -> bool:
        """Interrupt the running execution; False when nothing runs."""

    @abstractmethod
    def get_variable(self, name: str) -> Any:
        """The variable's value as plain Python (JSON-able), or None."""

    @abstractmethod
    def usage(self) -> dict[str, Any]:
        """What the session has used so far (executions, fuel, time, memory)."""

    @abstractmethod
    def destroy(self) -> None:
        """End the session and release what it holds; it cannot run again."""

    def set_limits(
        self, policy: ExecutionPolicy | None = None, *, timeout_seconds: float | None = None
    ) -> None:
        """Change a live session's limits for the executions that follow: a new policy, or
        only its wall clock. The one way to change them from outside."""
        self._configure(limited(self.config, policy, timeout_seconds))

    def _configure(self, config: REPLConfig) -> None:
        self.config = config

    def __enter__(self) -> Self:
        self.initialize()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()
