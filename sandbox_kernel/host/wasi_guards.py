"""The WASI calls the host shadows to guard its own resources, and the per-run guard state.

Wasmtime isolates a guest's memory, but its WASI files are the host's files and descriptors. A
guest opening files in a loop took 19,989 of 20,000 host descriptors; a 1 TB sparse file is
created instantly; a blocking `poll_oneoff` (every `time.sleep`) cannot be interrupted by an
epoch deadline. So these calls are shadowed:

    path_open, fd_close, fd_renumber   count open files against `max_open_files` (and record
                                       them, for a rollback: descriptors.py); refuse to open a
                                       FIFO, socket or device, whose open() or read() would
                                       block the host past every deadline and interrupt
                                       and, with the notebook's folder as an overlay,
                                       copy a file shared with the user's before the guest
                                       may change it (overlay.py)
    path_filestat_set_times,           the same copy first (by path), or a refusal (by an
    fd_filestat_set_times              open descriptor of a shared file)
    fd_write, fd_pwrite, ...           file sizes and the session's workspace quota
                                       (wasi_quota.py)
    (fd_seek is wasmtime's own: a seek grows nothing, and reads past a cap must work)
    poll_oneoff                        sleeps in slices that end at the run's deadline or cancel

Each shadow forwards to wasmtime's own implementation through a tiny "trampoline" instance that
imports the real call and re-exports it with the guest's memory (wasmtime's WASI reads the
memory of its calling instance). A second trampoline with its own one-page memory answers the
guard's private questions (where is this descriptor's cursor?) without touching guest memory.

A host function that raises becomes a trap, so every shadow catches everything and answers with
a WASI errno. The linker is shared by all runs of an engine; a shadow finds its run through a
thread-local, since wasmtime calls host functions on the thread that entered the guest.

The guard each shadow applies is run_guard.py's RunGuard.

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

import wasmtime

from sandbox_kernel.host import wasi_quota
from sandbox_kernel.host.descriptors import read_open
from sandbox_kernel.host.run_guard import (
    EACCES,
    EBADF,
    EFAULT,
    EINVAL,
    EIO,
    EMFILE,
    ENOMEM,
    FORWARDED,
    MASK32,
    MAX_PATH_BYTES,
    PRIVATE,
    PRIVATE_SIGNATURES,
    SIGNATURES,
    RunGuard,
    active_guard,
    fuel_left,
)

__all__ = ["private_trampoline_wat", "shadow", "trampoline_wat"]

MAX_SUBSCRIPTIONS = 4096
SUBSCRIPTION = "<QB7xIxxxxQQH6x"  # userdata, tag, clock id or fd, timeout, precision, flags
EVENT = "<QHB5xQH6x"  # userdata, error, type, nbytes, flags
CLOCK, FD_READ, FD_WRITE = 0, 1, 2
ABSTIME = 1
SLICE_SECONDS = 0.01
O_TRUNC = 8  # WASI oflags
# WASI rights that let a descriptor change its file (wasi-libc asks for them with O_WRONLY and
# O_RDWR only): fd_write, fd_allocate, fd_filestat_set_size.
WRITE_RIGHTS = (1 << 6) | (1 << 8) | (1 << 22)


def trampoline_wat() -> str:
    lines = ["(module"]
    for name in FORWARDED:
        lines.append(f'  (import "wasi_snapshot_preview1" "{name}" (func ${name} {_sig(name)}))')
    lines.append('  (import "env" "memory" (memory 0))')
    lines.append('  (export "memory" (memory 0))')
    lines.extend(_forwarder(name) for name in FORWARDED)
    return "\n".join([*lines, ")"])


def private_trampoline_wat() -> str:
    """The guard's own forwarders, over a one-page memory of their own: wasmtime writes the
    answers there, never into the guest's memory."""
    lines = ["(module"]
    for name in PRIVATE:
        lines.append(f'  (import "wasi_snapshot_preview1" "{name}" (func ${name} {_sig(name)}))')
    lines.append('  (memory (export "memory") 1)')
    lines.extend(_forwarder(name) for name in PRIVATE)
    return "\n".join([*lines, ")"])


def _params(name: str) -> tuple[str, ...]:
    return PRIVATE_SIGNATURES[name] if name in PRIVATE else SIGNATURES[name]


def _sig(name: str) -> str:
    return f"(param {' '.join(_params(name))}) (result i32)"


def _forwarder(name: str) -> str:
    gets = " ".join(f"(local.get {i})" for i in range(len(_params(name))))
    return f'  (func (export "{name}") {_sig(name)} (call ${name} {gets}))'


def shadow(name: str) -> Callable[..., int]:
    """The host function that replaces WASI's `name`: finds the run's guard and applies it."""
    rule = _RULES[name]

    def call(caller: Any, *args: int) -> int:
        guard = active_guard()
        if guard is None:
            return EBADF
        try:
            return rule(guard, caller, *args)
        except (wasmtime.Trap, wasmtime.WasmtimeError):
            raise  # wasmtime's own stop (fuel, deadline) while forwarding: let it unwind
        except Exception:
            return EIO

    return call


def _path_open(guard: RunGuard, caller: Any, *args: int) -> int:
    if len(guard.open_fds) >= guard.limits.max_open_files:
        detail = f"{len(guard.open_fds)} files already open"
        return guard.refuse("open_files", detail, EMFILE)
    fd, dirflags, path_ptr, path_len = args[0], args[1], args[2] & MASK32, args[3] & MASK32
    if path_len > MAX_PATH_BYTES:
        return EINVAL
    path = bytes(caller["memory"].read(caller, path_ptr, path_ptr + path_len))
    found = guard.path_stat(caller, fd, dirflags, path)  # one question for both checks
    if found is not None and found.special:
        detail = f"{path.decode(errors='replace')!r} is a FIFO, socket or device"
        return guard.refuse("fs_denied", detail, EACCES)
    oflags, rights = args[4], args[5]
    if guard.write_guard is not None and (oflags & O_TRUNC or rights & WRITE_RIGHTS):
        truncate = bool(oflags & O_TRUNC)
        refused = guard.write_guard.before_write(guard, caller, fd, path, found, truncate)
        if refused:
            return refused
    errno = guard.forward(caller, "path_open", *args)
    if errno == 0:
        opened = read_open(caller, args)
        if opened is not None:
            fd, record = opened
            guard.open_fds.add(fd)
            guard.files[fd] = record
            if record.path == guard.start_path and guard.fuel_left_at_start is None:
                guard.fuel_left_at_start = fuel_left(caller)  # the runner reads the script
    return errno


def _path_filestat_set_times(guard: RunGuard, caller: Any, *args: int) -> int:
    """New timestamps change a file's inode: a file shared with the user's is copied first."""
    fd, dirflags, path_ptr, path_len = args[0], args[1], args[2] & MASK32, args[3] & MASK32
    if guard.write_guard is not None:
        if path_len > MAX_PATH_BYTES:
            return EINVAL
        path = bytes(caller["memory"].read(caller, path_ptr, path_ptr + path_len))
        found = guard.path_stat(caller, fd, dirflags, path)
        refused = guard.write_guard.before_write(guard, caller, fd, path, found, False)
        if refused:
            return refused
    return guard.forward(caller, "path_filestat_set_times", *args)


def _fd_filestat_set_times(guard: RunGuard, caller: Any, fd: int, *rest: int) -> int:
    """A descriptor of a file shared with the user's cannot be copied under it: refused."""
    if guard.write_guard is not None:
        refused = guard.write_guard.before_fd_change(guard, caller, fd)
        if refused:
            return refused
    return guard.forward(caller, "fd_filestat_set_times", fd, *rest)


def _fd_close(guard: RunGuard, caller: Any, fd: int) -> int:
    errno = guard.forward(caller, "fd_close", fd)
    if errno == 0:
        guard.open_fds.discard(fd)
        guard.files.pop(fd, None)
    return errno


def _fd_renumber(guard: RunGuard, caller: Any, source: int, target: int) -> int:
    if source <= 2 or target <= 2:  # a file renumbered onto stdout would bypass the output cap
        return guard.refuse("fs_denied", "fd_renumber onto standard streams", EBADF)
    errno = guard.forward(caller, "fd_renumber", source, target)
    if errno == 0 and source in guard.open_fds:
        guard.open_fds.discard(source)
        guard.open_fds.add(target)
    if errno == 0:
        moved = guard.files.pop(source, None)
        guard.files.pop(target, None)
        if moved is not None:
            guard.files[target] = moved
    return errno


def _poll_oneoff(
    guard: RunGuard, caller: Any, in_ptr: int, out_ptr: int, n: int, n_out: int
) -> int:
    """Descriptor subscriptions are ready at once; clocks are waited for in slices that end at
    the run's deadline or cancel (the guest then traps at its next epoch check)."""
    in_ptr, out_ptr, n, n_out = (v & MASK32 for v in (in_ptr, out_ptr, n, n_out))
    if n == 0 or n > MAX_SUBSCRIPTIONS:
        return EINVAL if n == 0 else ENOMEM
    memory = caller["memory"]
    size = memory.data_len(caller)
    if in_ptr + 48 * n > size or out_ptr + 32 * n > size or n_out + 4 > size:
        return EFAULT
    raw = bytes(memory.read(caller, in_ptr, in_ptr + 48 * n))
    ready, clocks = [], []
    for userdata, tag, which, timeout, _precision, flags in struct.iter_unpack(SUBSCRIPTION, raw):
        if tag == CLOCK:
            if flags & ABSTIME:
                now = time.time_ns() if which == 0 else time.monotonic_ns() - guard.origin_ns
                timeout -= now
            clocks.append((max(0, timeout), userdata))
        elif tag in (FD_READ, FD_WRITE):
            ready.append((userdata, 0, tag, 1, 0))
        else:
            return EINVAL
    if not ready and clocks:
        wait_ns = min(t for t, _ in clocks)
        _sleep(guard, wait_ns / 1e9)
        ready = [(u, 0, CLOCK, 0, 0) for t, u in clocks if t <= wait_ns]
    memory.write(caller, b"".join(struct.pack(EVENT, *e) for e in ready), out_ptr)
    memory.write(caller, struct.pack("<I", len(ready)), n_out)
    return 0


def _sleep(guard: RunGuard, seconds: float) -> None:
    """Wait in slices; a wait the deadline or a cancel ends stops the guest at once with a trap
    (the epoch ticker may lag the wall clock by a few ticks, and a guest that returned from
    its sleep and exited would otherwise look like a success)."""
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        if guard.stopped():
            cancelled = guard.cancel is not None and guard.cancel.is_set()
            guard.stop_reason = "cancelled" if cancelled else "timeout"
            raise wasmtime.Trap(f"sandbox {guard.stop_reason} during a wait")
        time.sleep(min(left, SLICE_SECONDS))


_RULES: dict[str, Callable[..., int]] = {
    "path_open": _path_open,
    "fd_close": _fd_close,
    "fd_renumber": _fd_renumber,
    "poll_oneoff": _poll_oneoff,
    "path_filestat_set_times": _path_filestat_set_times,
    "fd_filestat_set_times": _fd_filestat_set_times,
    **wasi_quota.RULES,
}
