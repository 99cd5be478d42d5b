"""The private cache folder (compiled modules, warm images, unpacked files) and writing into it
whole or not at all.

Kept apart from engine.py so that the modules that only need the folder (the guest library, the
artifacts, the warm images) do not import wasmtime: the kernel answers its first request before
it loads wasmtime.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_dir", "write_atomically"]

CACHE_ENV = "SANDBOX_KERNEL_CACHE"


def cache_dir() -> Path:
    """The private folder for compiled modules and unpacked image files.

    `SANDBOX_KERNEL_CACHE` wins; then `$XDG_CACHE_HOME/sandbox-kernel`; then
    `~/.cache/sandbox-kernel`.
    """
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        root = Path(explicit)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg) if xdg else Path.home() / ".cache") / "sandbox-kernel"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


def write_atomically(target: Path, data: bytes | bytearray | mmap.mmap | memoryview) -> None:
    """Write a cache file whole or not at all (a temporary file renamed over the name), in
    a private folder made if needed."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
