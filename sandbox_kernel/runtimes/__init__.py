"""One-shot sandboxes: a fresh guest per execution, typed policy in, typed result out."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox_kernel.runtimes.base import BaseSandbox
    from sandbox_kernel.runtimes.factory import create_sandbox
    from sandbox_kernel.runtimes.javascript import JavaScriptSandbox
    from sandbox_kernel.runtimes.python import PythonSandbox

__all__ = ["BaseSandbox", "JavaScriptSandbox", "PythonSandbox", "create_sandbox"]

# Imported on first use: the REPL needs only runtimes.base (the policy's limits), and
# importing this package for it should not load the JavaScript runtime.
_HOMES = {
    "BaseSandbox": "sandbox_kernel.runtimes.base",
    "JavaScriptSandbox": "sandbox_kernel.runtimes.javascript",
    "PythonSandbox": "sandbox_kernel.runtimes.python",
    "create_sandbox": "sandbox_kernel.runtimes.factory",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
