"""What a guest is given at start: its folders (preopens), argv, environment and output streams.

Only what is listed here reaches the guest: no host environment variable, no folder, no
standard input. Folders are opened by path at store creation; wasmtime keeps the guest inside
each one (a `..` or a symlink pointing out of it is refused by its capability-based WASI).

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import wasmtime

__all__ = ["Preopen", "make_wasi_config"]


@dataclass(frozen=True)
class Preopen:
    """A host folder shown to the guest at `guest` (an absolute POSIX path)."""

    host: Path
    guest: str
    writable: bool


def make_wasi_config(
    argv: Sequence[str],
    env: Mapping[str, str],
    preopens: Sequence[Preopen],
    stdout: Callable[[bytes], int],
    stderr: Callable[[bytes], int],
) -> wasmtime.WasiConfig:
    """`stdout` and `stderr` are called by wasmtime with each chunk and answer its length."""
    config = wasmtime.WasiConfig()
    config.argv = list(argv)
    config.env = sorted(env.items())
    config.stdout_custom = stdout
    config.stderr_custom = stderr
    for p in preopens:
        config.preopen_dir(str(p.host), p.guest, p.writable)
    return config
