"""The native backend: cells in a plain CPython subprocess. UNSAFE: no sandbox.

    session.py  NativeReplSandbox, the ReplBackend (Pyodide's session, repl/pyodide.py, is
                one too, with Node.js as the child)
    process.py  the child process: its pipes, its turn, its end
    child.py    the child's side, run as a script (never imported by the host but for its
                protocol's names)

Must not import: wasmtime (host/ does that), anything Jupyter.
"""

from __future__ import annotations

from sandbox_kernel.repl.native.session import NativeReplSandbox

__all__ = ["NativeReplSandbox"]
