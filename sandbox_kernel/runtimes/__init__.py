"""One-shot sandboxes: a fresh guest per execution, typed policy in, typed result out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_kernel._lazy import lazy_getattr

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


__getattr__ = lazy_getattr(__name__, _HOMES)
