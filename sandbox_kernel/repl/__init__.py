"""The persistent REPL session: ReplSandbox (sandboxed, wasm) and create_repl().

Every name is imported on first use: ReplSandbox brings wasmtime, and the models pydantic;
the kernel answers its first request before it loads either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_kernel._lazy import lazy_getattr

if TYPE_CHECKING:
    from sandbox_kernel.repl.base import ReplBackend
    from sandbox_kernel.repl.models import (
        CodeExecution,
        DisplayMessage,
        ExecutionStatus,
        REPLConfig,
    )
    from sandbox_kernel.repl.sandbox import ReplSandbox

__all__ = [
    "CodeExecution",
    "DisplayMessage",
    "ExecutionStatus",
    "REPLConfig",
    "ReplBackend",
    "ReplSandbox",
    "create_repl",
]

_HOMES = {
    "CodeExecution": "sandbox_kernel.repl.models",
    "DisplayMessage": "sandbox_kernel.repl.models",
    "ExecutionStatus": "sandbox_kernel.repl.models",
    "REPLConfig": "sandbox_kernel.repl.models",
    "ReplBackend": "sandbox_kernel.repl.base",
    "ReplSandbox": "sandbox_kernel.repl.sandbox",
}


__getattr__ = lazy_getattr(__name__, _HOMES)


def create_repl(config: REPLConfig | None = None) -> ReplBackend:
    """A session for `config.backend`:

    - "wasm": ReplSandbox, the sandboxed WebAssembly session in this process;
    - "daemon": DaemonClientSandbox, the same sandbox held by the REPL daemon;
    - "auto": the daemon when one answers at `config.daemon_socket`, else "wasm" (never an
      unsafe backend);
    - "native": NativeReplSandbox, a plain CPython subprocess, NO sandbox;
    - "pyodide": PyodideReplSandbox, Pyodide under Node.js, NO sandbox.
    """
    from sandbox_kernel.repl.models import REPLConfig

    config = config if config is not None else REPLConfig()
    backend = config.backend
    if backend == "auto":
        from sandbox_kernel.repl.daemon import daemon_answers

        backend = "daemon" if daemon_answers(config.daemon_socket) else "wasm"
    if backend == "daemon":
        from sandbox_kernel.repl.daemon.client import DaemonClientSandbox

        return DaemonClientSandbox(config)
    if backend == "native":
        from sandbox_kernel.repl.native import NativeReplSandbox  # only when asked for

        return NativeReplSandbox(config)
    if backend == "pyodide":
        from sandbox_kernel.repl.pyodide import PyodideReplSandbox

        return PyodideReplSandbox(config)
    from sandbox_kernel.repl.sandbox import ReplSandbox

    return ReplSandbox(config)
