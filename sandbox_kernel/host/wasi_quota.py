"""The guard's rules for what a guest may write: file sizes and the workspace quota.

    fd_write, fd_pwrite,               bound any file's size by `max_file_bytes`, and what the
    fd_filestat_set_size               guest adds to its writable folders (/app, /tmp) over a
    path_create_directory,             whole session by `workspace_max_bytes`: file growth (a
    path_symlink, path_link,           sparse file's gap counts: it is growth the host may pay
    path_unlink_file,                  for), ENTRY_COST_BYTES per folder or link; removals and
    path_remove_directory              truncates give back what they free

Each rule is a shadow of wasi_guards.py (which registers RULES): it answers with a WASI errno,
and forwards to wasmtime's own call through the guard.

The count follows the disk: files may be removed on the host too (a file browser, `rm`), which
no WASI call tells the guard of. So a charge that would pass the quota first measures the
writable folders again (`RunGuard.measure`, at most once per turn) and counts what they hold
now beyond what they held when the session began.

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter; run_guard only for types.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox_kernel.host.run_guard import RunGuard

__all__ = ["ENTRY_COST_BYTES", "RULES", "charge"]

EDQUOT, EFBIG = 19, 22  # WASI preview1 errno values
MASK32 = 0xFFFFFFFF
# What a folder or a link costs the workspace quota: a block of the host's disk each.
ENTRY_COST_BYTES = 4096


def _too_big(guard: RunGuard, size: int, fd: int) -> int:
    detail = f"fd {fd} would reach {size:,} bytes (cap {guard.limits.max_file_bytes:,})"
    return guard.refuse("file_size", detail, EFBIG)


def _iov_total(caller: Any, iovs: int, count: int) -> int:
    iovs, count = iovs & MASK32, count & MASK32
    raw = bytes(caller["memory"].read(caller, iovs, iovs + 8 * min(count, 1024)))
    return sum(length for _, length in struct.iter_unpack("<II", raw))


def _grow(guard: RunGuard, caller: Any, fd: int, end: int) -> int | None:
    """An errno when making `fd`'s file reach `end` bytes breaks a cap; else charge the growth.

    Growth, not bytes written, is what costs the host disk and what a sparse file hides: a
    truncate to 1 TB or a write far past the end grows the file by the whole gap.
    """
    if end > guard.limits.max_file_bytes:
        return _too_big(guard, end, fd)
    size = guard.file_size(caller, fd)
    growth = max(0, end - size) if size is not None else 0
    return charge(guard, growth)


def charge(guard: RunGuard, growth: int) -> int | None:
    """EDQUOT when `growth` more bytes would pass the session's workspace quota; else count."""
    quota = guard.limits.workspace_max_bytes
    if guard.bytes_written + growth > quota:
        guard.measure_again()  # files removed on the host give their room back
    if guard.bytes_written + growth > quota:
        total = guard.bytes_written + growth
        detail = f"the workspace would grow by {total:,} bytes (quota {quota:,})"
        return guard.refuse("file_size", detail, EDQUOT)
    guard.bytes_written += growth
    return None


def _credit(guard: RunGuard, freed: int) -> None:
    """What a removal gave back (never below zero: removing files the guest did not add makes
    no room past the quota)."""
    guard.bytes_written = max(0, guard.bytes_written - freed)


def _path_entry(name: str) -> Callable[..., int]:
    """path_create_directory, path_symlink, path_link: a new entry costs ENTRY_COST_BYTES."""

    def rule(guard: RunGuard, caller: Any, *args: int) -> int:
        refused = charge(guard, ENTRY_COST_BYTES)
        if refused is not None:
            return refused
        errno = guard.forward(caller, name, *args)
        if errno:
            _credit(guard, ENTRY_COST_BYTES)
        return errno

    return rule


def _path_remove_directory(guard: RunGuard, caller: Any, fd: int, ptr: int, length: int) -> int:
    errno = guard.forward(caller, "path_remove_directory", fd, ptr, length)
    if errno == 0:
        _credit(guard, ENTRY_COST_BYTES)
    return errno


def _path_unlink_file(guard: RunGuard, caller: Any, fd: int, ptr: int, length: int) -> int:
    freed = guard.unique_file_size(caller, fd, ptr, length)
    errno = guard.forward(caller, "path_unlink_file", fd, ptr, length)
    if errno == 0:
        _credit(guard, freed or ENTRY_COST_BYTES)  # a link, or a file of other names
    return errno


def _fd_write(guard: RunGuard, caller: Any, fd: int, iovs: int, count: int, out: int) -> int:
    if fd > 2:  # stdout and stderr are capped by their own streams
        at = guard.cursor(caller, fd)
        if at is not None:  # not a file with a cursor (a directory, say): WASI will refuse
            refused = _grow(guard, caller, fd, at + _iov_total(caller, iovs, count))
            if refused is not None:
                return refused
    return guard.forward(caller, "fd_write", fd, iovs, count, out)


def _fd_pwrite(
    guard: RunGuard, caller: Any, fd: int, iovs: int, count: int, offset: int, out: int
) -> int:
    refused = _grow(guard, caller, fd, offset + _iov_total(caller, iovs, count))
    if refused is not None:
        return refused
    return guard.forward(caller, "fd_pwrite", fd, iovs, count, offset, out)


def _fd_filestat_set_size(guard: RunGuard, caller: Any, fd: int, size: int) -> int:
    before = guard.file_size(caller, fd)
    refused = _grow(guard, caller, fd, size)
    if refused is not None:
        return refused
    errno = guard.forward(caller, "fd_filestat_set_size", fd, size)
    if errno == 0 and before is not None and size < before:
        _credit(guard, before - size)  # a truncate gives back what it cut
    return errno


RULES: dict[str, Callable[..., int]] = {
    "fd_write": _fd_write,
    "fd_pwrite": _fd_pwrite,
    "fd_filestat_set_size": _fd_filestat_set_size,
    "path_create_directory": _path_entry("path_create_directory"),
    "path_symlink": _path_entry("path_symlink"),
    "path_link": _path_entry("path_link"),
    "path_remove_directory": _path_remove_directory,
    "path_unlink_file": _path_unlink_file,
}
