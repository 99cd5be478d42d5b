"""What a guest is given at start: its folders (preopens), argv, environment and output streams.

Only what is listed here reaches the guest: no host environment variable, no folder, no
standard input. Folders are opened by path at store creation; wasmtime keeps the guest inside
each one (a `..` or a symlink pointing out of it is refused by its capability-based WASI).

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import wasmtime

__all__ = ["Preopen", "make_wasi_config", "outputs_held", "wait_for_outputs"]


@dataclass(frozen=True)
class Preopen:
    """A host folder shown to the guest at `guest` (an absolute POSIX path)."""

    host: Path
    guest: str
    writable: bool


class _Output:
    """An output callback as wasmtime holds it. wasmtime writes to it, and lets go of it once
    its store is closed, on threads of its own runtime (tokio's), not Python's. A thread that
    enters Python once the interpreter is finalizing is ended by pthread_exit, which Rust
    reports as a panic in a function that cannot unwind (and may abort on): so interpreter
    exit waits until wasmtime has let go of every output (wait_for_outputs, guest_run)."""

    __slots__ = ("__weakref__", "write")

    def __init__(self, write: Callable[[bytes], int]) -> None:
        self.write = write
        _held.add()
        weakref.finalize(self, _held.release).atexit = False  # wasmtime's letting go, only

    def __call__(self, data: bytes) -> int:
        return self.write(data)


class _Held:
    """How many output callbacks wasmtime holds."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = threading.Condition()

    def add(self) -> None:
        with self.changed:
            self.count += 1

    def release(self) -> None:
        with self.changed:
            self.count -= 1
            self.changed.notify_all()


_held = _Held()


def outputs_held() -> int:
    """How many output callbacks wasmtime still holds (two per store until it lets go)."""
    return _held.count


def wait_for_outputs(timeout: float) -> bool:
    """Wait until wasmtime holds no output callback (every store closed and let go of), at
    most `timeout` seconds; False if some are still held."""
    with _held.changed:
        return _held.changed.wait_for(lambda: _held.count == 0, timeout)


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
    config.stdout_custom = _Output(stdout)
    config.stderr_custom = _Output(stderr)
    for p in preopens:
        config.preopen_dir(str(p.host), p.guest, p.writable)
    return config
