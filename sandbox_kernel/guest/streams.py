"""The sandbox's own stdout and stderr, which its machinery writes to whatever a cell did.

Runs INSIDE the sandbox (module sandbox_kernel_streams, loaded before the driver). Taken when
it is loaded: a cell may rebind print, or set sys.stdout and sys.stderr to None or close them,
and the driver must still run and report the next cell. `mend_streams` puts usable streams
back after such a cell; `warn` speaks to the user on the sandbox's own stderr.

Must import only the standard library; never imports sandbox_kernel.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import sys
from typing import Any

__all__ = [
    "describe",
    "flush_streams",
    "mend_streams",
    "own_stream",
    "safe_str",
    "usable",
    "warn",
]

_PRINT = builtins.print
_STREAMS = {"stdout": sys.stdout, "stderr": sys.stderr}
_FDS = {"stdout": 1, "stderr": 2}


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr, *_STREAMS.values()):
        # A stream the cell closed or replaced has nothing left to flush.
        with contextlib.suppress(Exception):
            stream.flush()


def usable(stream: Any) -> bool:
    try:
        return callable(getattr(stream, "write", None)) and not getattr(stream, "closed", False)
    except Exception:  # a property that raises: not a stream to write to
        return False


def own_stream(name: str) -> Any:
    """The sandbox's own stdout or stderr; opened again on its descriptor if a cell closed it
    (the standard streams never close their descriptor)."""
    stream = _STREAMS[name]
    if not usable(stream):
        raw = io.FileIO(_FDS[name], "w", closefd=False)
        stream = io.TextIOWrapper(
            raw,
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
        )
        _STREAMS[name] = stream
    return stream


def mend_streams() -> list[str]:
    """sys.stdout and sys.stderr put back when a cell left them unusable (None, closed, no
    write): IPython writes to both as it runs a cell. A stream of the cell's own (a StringIO
    that captures) is kept, as in ipykernel."""
    mended = []
    for name in _STREAMS:
        if not usable(getattr(sys, name, None)):
            setattr(sys, name, own_stream(name))
            mended.append(f"sys.{name}")
    return mended


def warn(text: str) -> None:
    """A line for the user on the sandbox's own stderr, whatever a cell did to print, to
    sys.stderr or to sys.__stderr__."""
    with contextlib.suppress(Exception):
        _PRINT(text, file=own_stream("stderr"), flush=True)


def safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:  # an exception whose __str__ fails (even by SystemExit) is reported
        return f"<unprintable {type(exc).__name__}>"


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {safe_str(exc)}"
