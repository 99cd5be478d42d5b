"""Open files across a rollback: what the guest opened, and opening it again.

A rollback restores the guest's memory into a fresh instance, whose WASI table holds only the
preopened folders. The memory still refers to files opened in earlier cells by descriptor
number (a file object kept in a variable, matplotlib's font files), which would all answer
EBADF: every later figure with text was silently dropped. So the guard records each
successful `path_open` (the folder descriptor, the path and the flags) until its `fd_close`,
a capture stores that table and each file's cursor beside the memory image, and a restore
opens each file again (never creating or truncating it), moves it to its old number with
`fd_renumber` and seeks it back. A file removed since cannot come back: its number stays
closed and answers EBADF, as a deleted file would.

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from sandbox_kernel.host.run_guard import MASK32, MAX_PATH_BYTES, OpenFile, RunGuard

__all__ = ["SavedFile", "read_open", "reopen", "saved_files"]

O_CREAT, O_EXCL, O_TRUNC = 1, 4, 8  # WASI oflags that must not be replayed


@dataclass(frozen=True)
class SavedFile:
    fd: int
    opened: OpenFile
    cursor: int | None  # None: no cursor (a folder)


def read_open(caller: Any, args: tuple[int, ...]) -> tuple[int, OpenFile] | None:
    """(new descriptor, what opened it) from a path_open that succeeded; None if unreadable."""
    dirfd, dirflags, path_ptr, path_len, oflags, base, inheriting, fdflags, out = args
    path_ptr, path_len, out = path_ptr & MASK32, path_len & MASK32, out & MASK32
    if path_len > MAX_PATH_BYTES:
        return None
    memory = caller["memory"]
    path = bytes(memory.read(caller, path_ptr, path_ptr + path_len))
    fd = struct.unpack("<I", bytes(memory.read(caller, out, out + 4)))[0]
    return fd, OpenFile(dirfd, dirflags, path, oflags, base, inheriting, fdflags)


def saved_files(guard: RunGuard, store: Any) -> tuple[SavedFile, ...]:
    """The guest's open files and their cursors, for a memory image (the guest is idle)."""
    return tuple(
        SavedFile(fd, opened, guard.cursor(store, fd)) for fd, opened in sorted(guard.files.items())
    )


def reopen(guard: RunGuard, store: Any, files: tuple[SavedFile, ...]) -> list[int]:
    """Open `files` again in a fresh instance, at their old numbers and cursors; the numbers
    that could not be (the file is gone)."""
    lost = []
    for saved in files:
        fd = _open_again(guard, store, saved.opened)
        if fd is None:
            lost.append(saved.fd)
            continue
        if fd != saved.fd and guard.private(store, "fd_renumber", fd, saved.fd):
            guard.private(store, "fd_close", fd)
            lost.append(saved.fd)
            continue
        if saved.cursor is not None:
            guard.private(store, "fd_seek", saved.fd, saved.cursor, 0, 0)
        guard.files[saved.fd] = saved.opened
        guard.open_fds.add(saved.fd)
    return lost


def _open_again(guard: RunGuard, store: Any, opened: OpenFile) -> int | None:
    """The file opened again (never created or truncated); its new number, or None."""
    oflags = opened.oflags & ~(O_CREAT | O_EXCL | O_TRUNC)
    if guard.special_file(store, opened.dirfd, opened.dirflags, opened.path):
        return None  # replaced on the host by something whose open would block
    errno = guard.private_at_path(
        store,
        "path_open",
        opened.dirfd,
        opened.dirflags,
        opened.path,
        oflags,
        opened.rights_base,
        opened.rights_inheriting,
        opened.fdflags,
        0,
    )
    if errno:
        return None
    return int(struct.unpack("<I", bytes(guard.private_memory.read(store, 0, 4)))[0])
