"""The WASI calls the host shadows to guard its own resources, and the per-run guard state.

Wasmtime isolates a guest's memory, but its WASI files are the host's files and descriptors. A
guest opening files in a loop took 19,989 of 20,000 host descriptors; a 1 TB sparse file is
created instantly; a blocking `poll_oneoff` (every `time.sleep`) cannot be interrupted by an
epoch deadline. So these calls are shadowed:

    path_open, fd_close, fd_renumber   count open files against `max_open_files` (and record
                                       them, for a rollback: descriptors.py); refuse to open a
                                       FIFO, socket or device, whose open() or read() would
                                       block the host past every deadline and interrupt
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

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import wasmtime

from sandbox_kernel.host import wasi_quota
from sandbox_kernel.host.descriptors import MAX_PATH_BYTES, PATH_AT, OpenFile, read_open

__all__ = [
    "FORWARDED",
    "SIGNATURES",
    "GuardLimits",
    "RunGuard",
    "active_guard",
    "fuel_left",
    "guarding",
]

# WASI preview1 errno values.
EACCES, EBADF, EFAULT, EINVAL, EIO, EMFILE, ENOMEM = 2, 8, 21, 28, 29, 33, 48
MASK32 = 0xFFFFFFFF
MAX_SUBSCRIPTIONS = 4096
SUBSCRIPTION = "<QB7xIxxxxQQH6x"  # userdata, tag, clock id or fd, timeout, precision, flags
EVENT = "<QHB5xQH6x"  # userdata, error, type, nbytes, flags
CLOCK, FD_READ, FD_WRITE = 0, 1, 2
ABSTIME = 1
SLICE_SECONDS = 0.01

SIGNATURES: dict[str, tuple[str, ...]] = {
    "path_open": ("i32", "i32", "i32", "i32", "i32", "i64", "i64", "i32", "i32"),
    "fd_close": ("i32",),
    "fd_renumber": ("i32", "i32"),
    "fd_write": ("i32", "i32", "i32", "i32"),
    "fd_pwrite": ("i32", "i32", "i32", "i64", "i32"),
    "fd_filestat_set_size": ("i32", "i64"),
    "path_create_directory": ("i32", "i32", "i32"),
    "path_remove_directory": ("i32", "i32", "i32"),
    "path_unlink_file": ("i32", "i32", "i32"),
    "path_symlink": ("i32", "i32", "i32", "i32", "i32"),
    "path_link": ("i32", "i32", "i32", "i32", "i32", "i32", "i32"),
    "poll_oneoff": ("i32", "i32", "i32", "i32"),
}
FORWARDED = tuple(name for name in SIGNATURES if name != "poll_oneoff")
# The guard's own questions, each with its parameters (answers land in its private memory).
PRIVATE_SIGNATURES: dict[str, tuple[str, ...]] = {
    "fd_tell": ("i32", "i32"),
    "fd_filestat_get": ("i32", "i32"),
    "path_filestat_get": ("i32", "i32", "i32", "i32", "i32"),
    # opening the guest's files again after a rollback (descriptors.py)
    "path_open": ("i32", "i32", "i32", "i32", "i32", "i64", "i64", "i32", "i32"),
    "fd_renumber": ("i32", "i32"),
    "fd_seek": ("i32", "i64", "i32", "i32"),
    "fd_close": ("i32",),
}
PRIVATE = tuple(PRIVATE_SIGNATURES)
FILESTAT_TYPE_OFFSET, FILESTAT_NLINK_OFFSET = 16, 24
DIRECTORY, REGULAR_FILE, SYMBOLIC_LINK = 3, 4, 7  # WASI filetypes (a FIFO is 0, "unknown")
OPENABLE = frozenset({DIRECTORY, REGULAR_FILE, SYMBOLIC_LINK})
FILESTAT_SIZE_OFFSET = 32  # filestat: dev, ino, filetype(+pad), nlink, size, atim, mtim, ctim


@dataclass(frozen=True)
class GuardLimits:
    max_open_files: int
    max_file_bytes: int
    workspace_max_bytes: int


@dataclass
class RunGuard:
    """What one run may still do, and what it tried that it may not."""

    limits: GuardLimits
    deadline: float | None  # time.monotonic() at which the run's wall clock ends
    cancel: threading.Event | None = None
    origin_ns: int = field(default_factory=time.monotonic_ns)  # the guest's monotonic zero
    open_fds: set[int] = field(default_factory=set)
    files: dict[int, OpenFile] = field(default_factory=dict)  # what opened each (descriptors.py)
    bytes_written: int = 0  # what the guest added to writable folders, less what it removed
    refusals: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)
    door: Callable[[bytes], bytes] | None = None  # answers the guest's door requests
    stop_reason: str | None = None  # "timeout" or "cancelled" once a wait stopped the guest
    start_path: bytes | None = None  # a one-shot run's script: its opening starts the user's code
    fuel_left_at_start: int | None = None  # fuel left when the user's script began (one-shot)
    fuel_left_at_end: int | None = None  # ... and when it ended
    # What the writable folders hold beyond the session's start, measured on the disk (None:
    # not measured, as for a one-shot run); asked at most once per turn (wasi_quota.py).
    measure: Callable[[], int | None] | None = None
    measured_this_turn: bool = False
    _forwards: dict[str, Any] = field(default_factory=dict)
    _private: dict[str, Any] = field(default_factory=dict)
    _private_memory: Any = None

    def begin(self, deadline: float | None) -> None:
        """Start a new turn of a persistent guest: its deadline and refusals are new; open
        files and the workspace quota (bytes_written) hold for the whole session."""
        self.deadline = deadline
        self.refusals = []
        self.stop_reason = None
        self.measured_this_turn = False
        if self.cancel is not None:
            self.cancel.clear()

    def refuse(self, kind: str, detail: str, errno: int) -> int:
        if len(self.refusals) < 100:  # a guest retrying in a loop does not grow the host
            self.refusals.append((kind, detail))
        return errno

    def measure_again(self) -> bool:
        """Set bytes_written from the disk (once per turn); whether it was."""
        if self.measure is None or self.measured_this_turn:
            return False
        self.measured_this_turn = True
        measured = self.measure()
        if measured is None:
            return False
        self.bytes_written = measured
        return True

    def stopped(self) -> bool:
        if self.cancel is not None and self.cancel.is_set():
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    def bind(
        self,
        store: wasmtime.Store,
        plain: wasmtime.Linker,
        modules: tuple[wasmtime.Module, wasmtime.Module],
        memory: wasmtime.Memory,
    ) -> None:
        """Instantiate both trampolines for this run's store, after the guest itself."""
        forward_module, private_module = modules
        imports: list[Any] = [plain.get(store, "wasi_snapshot_preview1", n) for n in FORWARDED]
        exports = wasmtime.Instance(store, forward_module, [*imports, memory]).exports(store)
        self._forwards = {name: exports[name] for name in FORWARDED}
        private_imports: list[Any] = [
            plain.get(store, "wasi_snapshot_preview1", n) for n in PRIVATE
        ]
        private = wasmtime.Instance(store, private_module, private_imports).exports(store)
        self._private = {name: private[name] for name in PRIVATE}
        self._private_memory = private["memory"]

    @property
    def private_memory(self) -> Any:
        return self._private_memory

    def private_at_path(
        self, store: Any, name: str, fd: int, flags: int, path: bytes, *rest: int
    ) -> int:
        """A private WASI call of the (fd, flags, path, path_len, ...) shape: the path is
        copied into the private memory first."""
        if self._private_memory is None or len(path) > MAX_PATH_BYTES:
            return EBADF
        self._private_memory.write(store, path, PATH_AT)
        return self.private(store, name, fd, flags, PATH_AT, len(path), *rest)

    def private(self, store: Any, name: str, *args: int) -> int:
        """Call WASI's `name` for the guard itself, its pointers in the private memory."""
        func = self._private.get(name)
        if func is None:
            return EBADF
        return int(func(store, *args))

    def forward(self, caller: Any, name: str, *args: int) -> int:
        func = self._forwards.get(name)
        if func is None:
            return EBADF  # the guard is not bound yet: nothing of wasmtime's is reachable
        return int(func(caller, *args))

    def _ask(self, caller: Any, name: str, fd: int, offset: int) -> int | None:
        """A u64 answer to a private question about `fd`, or None when WASI refused it."""
        if self._private.get(name) is None or self.private(caller, name, fd, 0):
            return None
        raw = self._private_memory.read(caller, offset, offset + 8)
        return int(struct.unpack("<Q", bytes(raw))[0])

    def cursor(self, caller: Any, fd: int) -> int | None:
        """Where `fd`'s cursor is."""
        return self._ask(caller, "fd_tell", fd, 0)

    def file_size(self, caller: Any, fd: int) -> int | None:
        """How long the file behind `fd` is now."""
        return self._ask(caller, "fd_filestat_get", fd, FILESTAT_SIZE_OFFSET)

    def special_file(self, store: Any, fd: int, dirflags: int, path: bytes) -> bool:
        """Whether `path` (under `fd`, links followed as `dirflags` says) is a FIFO, socket or
        device: opening or reading one can block the host's thread for good, where neither the
        epoch deadline nor an interrupt reaches. A path that does not exist is not."""
        if self.private_at_path(store, "path_filestat_get", fd, dirflags, path, 0):
            return False
        return (
            self._private_memory.read(store, FILESTAT_TYPE_OFFSET, FILESTAT_TYPE_OFFSET + 1)[0]
            not in OPENABLE
        )

    def unique_file_size(self, caller: Any, fd: int, path_ptr: int, path_len: int) -> int:
        """The size of the regular file at `path` (under `fd`, links not followed) if it has
        one name only: what removing it frees. 0 for anything else or when WASI refused."""
        path_ptr, path_len = path_ptr & MASK32, path_len & MASK32
        if path_len > MAX_PATH_BYTES:
            return 0
        path = bytes(caller["memory"].read(caller, path_ptr, path_ptr + path_len))
        if self.private_at_path(caller, "path_filestat_get", fd, 0, path, 0):
            return 0
        raw = bytes(self._private_memory.read(caller, 0, 64))
        kind, links = (
            raw[FILESTAT_TYPE_OFFSET],
            struct.unpack_from("<Q", raw, FILESTAT_NLINK_OFFSET)[0],
        )
        size = struct.unpack_from("<Q", raw, FILESTAT_SIZE_OFFSET)[0]
        return int(size) if kind == REGULAR_FILE and links == 1 else 0


def fuel_left(context: Any) -> int | None:
    """The fuel a store has left, read from a Caller too (it is a store context); None when
    fuel is not metered."""
    try:
        return int(wasmtime.Store.get_fuel(context))
    except (wasmtime.WasmtimeError, ValueError, TypeError):
        return None


_LOCAL = threading.local()


def active_guard() -> RunGuard | None:
    stack: list[RunGuard] = getattr(_LOCAL, "stack", [])
    return stack[-1] if stack else None


@contextmanager
def guarding(guard: RunGuard) -> Iterator[RunGuard]:
    """Make `guard` the one the shadows see on this thread while the body enters the guest."""
    stack: list[RunGuard] = getattr(_LOCAL, "stack", None) or []
    _LOCAL.stack = stack
    stack.append(guard)
    try:
        yield guard
    finally:
        stack.pop()


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
    if guard.special_file(caller, fd, dirflags, path):
        detail = f"{path.decode(errors='replace')!r} is a FIFO, socket or device"
        return guard.refuse("fs_denied", detail, EACCES)
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
    **wasi_quota.RULES,
}
