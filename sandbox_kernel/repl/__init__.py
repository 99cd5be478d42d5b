"""The persistent REPL session: ReplSandbox (sandboxed, wasm) and create_repl()."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_kernel.repl.models import CodeExecution, DisplayMessage, ExecutionStatus, REPLConfig
from sandbox_kernel.repl.sandbox import ReplSandbox

if TYPE_CHECKING:
    from sandbox_kernel.repl.native import NativeReplSandbox

__all__ = [
    "CodeExecution",
    "DisplayMessage",
    "ExecutionStatus",
    "REPLConfig",
    "ReplSandbox",
    "create_repl",
]


def create_repl(config: REPLConfig | None = None) -> ReplSandbox | NativeReplSandbox:
    """A session for `config` ("auto" and "wasm" are the sandboxed WebAssembly backend;
    "native" is NativeReplSandbox, a plain CPython subprocess with NO sandbox)."""
    config = config if config is not None else REPLConfig()
    if config.backend == "native":
        from sandbox_kernel.repl.native import NativeReplSandbox  # only when asked for

        return NativeReplSandbox(config)
    return ReplSandbox(config)
