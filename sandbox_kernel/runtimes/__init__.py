"""One-shot sandboxes: a fresh guest per execution, typed policy in, typed result out."""

from __future__ import annotations

from sandbox_kernel.runtimes.base import BaseSandbox
from sandbox_kernel.runtimes.factory import create_sandbox
from sandbox_kernel.runtimes.javascript import JavaScriptSandbox
from sandbox_kernel.runtimes.python import PythonSandbox

__all__ = ["BaseSandbox", "JavaScriptSandbox", "PythonSandbox", "create_sandbox"]
