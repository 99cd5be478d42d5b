"""The guard of one run: what it may still do (`GuardLimits`, `RunGuard`), how it reaches
wasmtime's own WASI calls (the trampolines bound in `bind`), and which guard the shadows on
this thread see (`guarding`, `active_guard`).

The shadows themselves are in wasi_guards.py (open files, special files, sleeps) and
wasi_quota.py (file sizes, the workspace quota); descriptors.py reopens files after a
rollback. All of them take a RunGuard from here, so none of them imports another's.

Must not import: the other guard modules (they import this one), sandbox_kernel.runtimes,
repl, anything Jupyter.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import wasmtime

__all__ = [
    "FORWARDED",
    "MAX_PATH_BYTES",
    "PATH_AT",
    "PRIVATE",
    "PRIVATE_SIGNATURES",
    "SIGNATURES",
    "GuardLimits",
    "OpenFile",
    "RunGuard",
    "WriteGuard",
    "active_guard",
    "fuel_left",
    "guarding",
]

# WASI preview1 errno values.
EACCES, EBADF, EFAULT, EINVAL, EIO, EMFILE, ENOMEM = 2, 8, 21, 28, 29, 33, 48
MASK32 = 0xFFFFFFFF
PATH_AT = 256  # where the guard writes a path in its private memory (after a filestat)
MAX_PATH_BYTES = 4096

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
    "path_filestat_set_times": ("i32", "i32", "i32", "i32", "i64", "i64", "i32"),
    "fd_filestat_set_times": ("i32", "i64", "i64", "i32"),
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
DIRECTORY, REGULAR_FILE, SYMBOLIC_LINK = 3, 4, 7  # WASI filetypes (a FIFO is 0, "unknown")
OPENABLE = frozenset({DIRECTORY, REGULAR_FILE, SYMBOLIC_LINK})
FILESTAT_SIZE_OFFSET = 32  # filestat: dev, ino, filetype(+pad), nlink, size, atim, mtim, ctim


class FileStat(NamedTuple):
    """The parts of a WASI filestat the guards read."""

    inode: int  # wasmtime's: SipHash-1-3 of the host's device and inode (overlay.py)
    kind: int  # a WASI filetype
    links: int
    size: int

    @classmethod
    def read(cls, raw: bytes) -> FileStat:
        inode, kind, links, size = struct.unpack_from("<8xQB7xQQ", raw)
        return cls(inode, kind, links, size)

    @property
    def special(self) -> bool:
        """A FIFO, socket or device: opening or reading one can block the host's thread for
        good, where neither the epoch deadline nor an interrupt reaches."""
        return self.kind not in OPENABLE


@dataclass(frozen=True)
class OpenFile:
    """The arguments of one successful path_open."""

    dirfd: int
    dirflags: int
    path: bytes
    oflags: int
    rights_base: int
    rights_inheriting: int
    fdflags: int


class WriteGuard(Protocol):
    """What must happen before the guest changes an existing file (overlay.py's Overlay: the
    notebook's folder, whose files are shared with the user's). Each answers 0 to go on, or
    a WASI errno (the refusal noted on the guard)."""

    def before_write(
        self,
        guard: RunGuard,
        caller: Any,
        fd: int,
        path: bytes,
        found: FileStat | None,
        truncate: bool,
    ) -> int: ...

    def before_fd_change(self, guard: RunGuard, caller: Any, fd: int) -> int: ...


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
    # A session's memory and allocator export, looked up once for its door (python_abi)
    exports: tuple[wasmtime.Memory, wasmtime.Func] | None = None
    stop_reason: str | None = None  # "timeout" or "cancelled" once a wait stopped the guest
    start_path: bytes | None = None  # a one-shot run's script: its opening starts the user's code
    fuel_left_at_start: int | None = None  # fuel left when the user's script began (one-shot)
    fuel_left_at_end: int | None = None  # ... and when it ended
    # What the writable folders hold beyond the session's start, measured on the disk (None:
    # not measured, as for a one-shot run); asked at most once per turn (wasi_quota.py).
    measure: Callable[[], int | None] | None = None
    measured_this_turn: bool = False
    # The session's writable preopened folders by descriptor number (where a path under one
    # lies on the host), and what guards changes to files the guest shares with the user.
    preopen_roots: dict[int, Path] = field(default_factory=dict)
    write_guard: WriteGuard | None = None
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

    def path_stat(self, store: Any, fd: int, dirflags: int, path: bytes) -> FileStat | None:
        """What `path` (under `fd`, links followed as `dirflags` says) is, asked through the
        private trampoline; None when WASI refused (nothing there)."""
        if self.private_at_path(store, "path_filestat_get", fd, dirflags, path, 0):
            return None
        return FileStat.read(bytes(self._private_memory.read(store, 0, 64)))

    def fd_stat(self, store: Any, fd: int) -> FileStat | None:
        """What the file behind `fd` is; None when WASI refused (no such descriptor)."""
        if self.private(store, "fd_filestat_get", fd, 0):
            return None
        return FileStat.read(bytes(self._private_memory.read(store, 0, 64)))

    def special_file(self, store: Any, fd: int, dirflags: int, path: bytes) -> bool:
        """Whether `path` is a FIFO, socket or device (see FileStat.special)."""
        found = self.path_stat(store, fd, dirflags, path)
        return found is not None and found.special

    def unique_file_size(self, caller: Any, fd: int, path_ptr: int, path_len: int) -> int:
        """The size of the regular file at `path` (under `fd`, links not followed) if it has
        one name only: what removing it frees. 0 for anything else or when WASI refused."""
        path_ptr, path_len = path_ptr & MASK32, path_len & MASK32
        if path_len > MAX_PATH_BYTES:
            return 0
        path = bytes(caller["memory"].read(caller, path_ptr, path_ptr + path_len))
        found = self.path_stat(caller, fd, 0, path)
        if found is None or found.kind != REGULAR_FILE or found.links != 1:
            return 0
        return found.size


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
