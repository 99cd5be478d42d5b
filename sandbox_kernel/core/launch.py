"""How the project starts Python for a host process of its own (the kernel, its remote
launcher, the daemon and its workers, the agent server's workers, pip for the guest's files).

A host process never has the folder it was started in on `sys.path`: Jupyter starts a kernel
in the notebook's folder, and `python -m` would put that folder first, so a `zmq.py` beside a
notebook (or written by a cell into a workspace that is that folder) would run on the host at
the kernel's next start. `-P` (Python 3.11+) keeps the working folder and the script's folder
off `sys.path` and changes nothing else (environment, user site-packages), so a kernel
installed with `pip install --user` still starts.

Must not import: anything of the project above core, wasmtime, anything Jupyter.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["SAFE_PATH_FLAGS", "has_safe_path", "host_python"]

SAFE_PATH_FLAGS = ("-P", "-I")
"""Interpreter flags that keep the working folder off sys.path (-I implies -P)."""


def host_python(*arguments: str, python: str | None = None) -> list[str]:
    """The argv that runs `python` (default: this interpreter) with `arguments`, the working
    folder never on its sys.path."""
    return [python or sys.executable, "-P", *arguments]


def has_safe_path(argv: Sequence[str]) -> bool:
    """Whether `argv` (a kernel spec's, a launcher's) starts Python with the working folder off
    sys.path: a -P or -I among the interpreter's own flags, before the script or -m."""
    for argument in argv[1:]:
        if argument in SAFE_PATH_FLAGS:
            return True
        if argument == "-m" or not argument.startswith("-"):
            return False
    return False
