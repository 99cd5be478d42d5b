"""The per-user runtime folder: where a kernel process keeps its temporary folders, so that
those of a kernel that ended without its own shutdown (`kill -9`, a gateway's kill, an OOM kill)
are found and removed at the next kernel's start instead of piling up in the temp folder.

    <tempdir>/sandbox-kernel-<uid>/            0700, owned by the user, never a link
        kernel-<pid>-<start>/                  one per kernel process, made at first need
            owner                              "<pid> <start>": the process's record
            sandbox-kernel-repl-XXXX/          the session's scratch (repl/sandbox.py)
            sandbox-kernel-data-XXXX/          the /data staging folder (kernel/data_magics.py)

`<start>` is the process's start time in clock ticks since boot (/proc/PID/stat, field 22):
with the pid it names one process for the machine's uptime, so a reused pid is told apart.

When a process makes its folder it prunes its siblings, removing only what it can prove is
abandoned: a real folder (not a link), owned by this user, named `kernel-<pid>-<start>`, whose
`owner` record (a regular file, not a link) says the same, and whose process is gone (no such
pid, or that pid started at another time). A folder of a live process, another user's, a link,
a record that does not match, anything unreadable: left alone. Every step acts on descriptors
opened beneath the per-user folder without following links, and a folder is renamed to a name
of the pruner's own before it is removed, so two kernels starting at once never remove the
same folder twice, and a name swapped for a link after the check is not followed. The claimed
name, `.removing-<pid>-<start>-<random>`, names the pruner: a real folder of the user's with
such a name whose pruner is gone (it died mid-removal) is removed too.

The per-user folder itself is refused when it is a link, not a folder, or owned by someone
else (another user could plant it in a shared /tmp); it is made private (0700) when it is the
user's own. A refused folder does not stop a kernel: `private_temp_folder` then falls back to
a private folder of the temp folder's own (tempfile's, 0700), as before, with a warning.

Without /proc (not Linux) no start time can be read, so no folder is ever proved abandoned:
nothing is pruned.

Must not import: anything outside the standard library.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import re
import secrets
import stat
import tempfile
import threading
from pathlib import Path
from typing import Final

from sandbox_kernel.core.scratch import ScratchFolder, remove_tree, remove_tree_at

__all__ = [
    "RuntimeFolderRefused",
    "kernel_folder",
    "private_mkdtemp",
    "private_temp_folder",
    "process_start",
    "prune_abandoned",
    "remove_kernel_folders",
    "user_runtime_root",
]

RECORD: Final = "owner"
_NAME: Final = re.compile(r"kernel-([1-9][0-9]{0,9})-([0-9]{1,20})")
# A folder a pruner claimed (renamed) and was removing: the pruner's own pid and start time.
_CLAIMED: Final = re.compile(r"\.removing-([1-9][0-9]{0,9})-([0-9]{1,20})-[0-9a-f]{16}")
_RECORD_MAX_BYTES: Final = 64
_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

log = logging.getLogger("sandbox_kernel.runtime_folder")

_lock = threading.Lock()
_mine: dict[tuple[int, str], Path] = {}  # (pid, base) -> this process's folder


class RuntimeFolderRefused(OSError):
    """The per-user runtime folder is a link, not a folder, or not this user's own."""


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot; None when there is no such
    process or it cannot be read (no /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes().decode("ascii", "replace")
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; split after the last ")".
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 of the whole line
    except (IndexError, ValueError):
        return None


def _alive(pid: int, start: int) -> bool:
    """Whether the process that wrote the record `pid start` may still run."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a process of another user: not ours, but the pid is taken
    if start == 0:
        return True  # no start time was recorded: a live pid cannot be told apart
    now = process_start(pid)
    if now is None:
        # It ended between the two looks (then /proc/PID is gone), or there is no /proc.
        return not os.path.isdir("/proc/self") or os.path.exists(f"/proc/{pid}")
    return now == start


def _base(base: Path | None) -> Path:
    return Path(tempfile.gettempdir()) if base is None else base


def user_runtime_root(base: Path | None = None, *, create: bool = True) -> Path:
    """`<base>/sandbox-kernel-<uid>` (base: the temp folder), made 0700 if missing (unless not
    `create`: then only checked when it exists), checked otherwise; RuntimeFolderRefused when
    it is a link, not a folder or not this user's."""
    uid = os.geteuid()
    root = _base(base) / f"sandbox-kernel-{uid}"
    if not create and not os.path.lexists(root):
        return root
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o700)
    fd = _open_root(root, uid, repair=create)
    os.close(fd)
    return root


def _open_root(root: Path, uid: int, *, repair: bool = True) -> int:
    try:
        fd = os.open(root, _DIRECTORY_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise RuntimeFolderRefused(f"{root} is a link or not a folder: refused") from None
        raise
    info = os.fstat(fd)
    if info.st_uid != uid:
        os.close(fd)
        raise RuntimeFolderRefused(f"{root} belongs to uid {info.st_uid}, not {uid}: refused")
    if stat.S_IMODE(info.st_mode) & 0o077 and repair:
        os.fchmod(fd, 0o700)
    return fd


def prune_abandoned(root: Path, *, keep: str | None = None) -> list[str]:
    """Remove the folders of `root` (a per-user runtime folder) whose kernels are gone (module
    docstring); the names removed. `keep`: a name never touched (the caller's own)."""
    uid = os.geteuid()
    removed: list[str] = []
    root_fd = _open_root(root, uid)
    try:
        for name in os.listdir(root_fd):
            if name == keep:
                continue
            with contextlib.suppress(OSError):  # unreadable, or gone meanwhile: left alone
                if _NAME.fullmatch(name) and _abandoned(root_fd, name, uid):
                    _remove(root_fd, name)
                    removed.append(name)
                elif _CLAIMED.fullmatch(name) and _claim_abandoned(root_fd, name, uid):
                    _remove(root_fd, name)  # a pruner died while removing it
                    removed.append(name)
    finally:
        os.close(root_fd)
    return removed


def _abandoned(root_fd: int, name: str, uid: int) -> bool:
    match = _NAME.fullmatch(name)
    if match is None:
        return False
    pid, start = int(match[1]), int(match[2])
    info = os.lstat(name, dir_fd=root_fd)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        return False
    folder = os.open(name, _DIRECTORY_FLAGS, dir_fd=root_fd)
    try:
        opened = os.fstat(folder)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            return False
        record = os.open(RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        try:
            details = os.fstat(record)
            if not stat.S_ISREG(details.st_mode) or details.st_uid != uid:
                return False
            text = os.read(record, _RECORD_MAX_BYTES + 1)
        finally:
            os.close(record)
    finally:
        os.close(folder)
    if text.decode("ascii", "replace").strip() != f"{pid} {start}":
        return False
    return not _alive(pid, start)


def _claim_abandoned(root_fd: int, name: str, uid: int) -> bool:
    """Whether `name` is a folder a pruner claimed and was removing when it died."""
    match = _CLAIMED.fullmatch(name)
    if match is None:
        return False
    info = os.lstat(name, dir_fd=root_fd)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        return False
    return not _alive(int(match[1]), int(match[2]))


def _remove(root_fd: int, name: str) -> None:
    """Rename `name` to a name of ours (claimed: no other pruner acts on it), then remove it
    beneath `root_fd` without following links."""
    pid = os.getpid()
    claimed = f".removing-{pid}-{process_start(pid) or 0}-{secrets.token_hex(8)}"
    before = os.lstat(name, dir_fd=root_fd)
    os.rename(name, claimed, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    after = os.lstat(claimed, dir_fd=root_fd)
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISDIR(
        after.st_mode
    ):
        os.rename(claimed, name, src_dir_fd=root_fd, dst_dir_fd=root_fd)  # not what we checked
        raise OSError(errno.ESTALE, f"{name} changed while it was checked")
    if not remove_tree_at(root_fd, claimed):
        raise OSError(errno.ENOTEMPTY, f"{name} could not be removed whole")


def kernel_folder(base: Path | None = None) -> Path:
    """This process's folder in the per-user runtime folder: made (with its record) and the
    abandoned siblings pruned at the first call of each process; removed at exit."""
    pid = os.getpid()
    key = (pid, str(_base(base)))
    with _lock:
        found = _mine.get(key)
        if found is not None:
            return found
        root = user_runtime_root(base)
        start = process_start(pid)
        name = f"kernel-{pid}-{start if start is not None else 0}"
        try:
            pruned = prune_abandoned(root, keep=name)
        except Exception as exc:  # a kernel starts, whatever an earlier one left
            log.warning("runtime folder %s: could not prune: %s", root, exc)
        else:
            if pruned:
                log.info("runtime folder %s: removed %d abandoned folders", root, len(pruned))
        folder = root / name
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
        _write_record(folder, f"{pid} {start if start is not None else 0}\n")
        _mine[key] = folder
        atexit.register(_remove_own, folder, pid)
        return folder


def _write_record(folder: Path, text: str) -> None:
    fd = os.open(folder, _DIRECTORY_FLAGS)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        record = os.open(RECORD, flags, 0o600, dir_fd=fd)
        try:
            os.write(record, text.encode())
        finally:
            os.close(record)
    finally:
        os.close(fd)


def _remove_own(folder: Path, pid: int) -> None:
    if os.getpid() == pid:  # not in a forked child
        remove_tree(folder)


def remove_kernel_folders() -> None:
    """Remove this process's folders now: for a process about to be ended by a signal, which
    runs no exit handler (the remote launcher, when the gateway asks for SIGTERM or SIGKILL)."""
    pid = os.getpid()
    with _lock:
        for (owner, _), folder in _mine.items():
            if owner == pid:
                remove_tree(folder)


def private_temp_folder(prefix: str, base: Path | None = None) -> ScratchFolder:
    """A ScratchFolder in this process's runtime folder; in the temp folder itself (as
    tempfile makes it: private) when the per-user folder is refused."""
    try:
        where: Path | None = kernel_folder(base)
    except OSError as exc:
        log.warning("temporary folders go to the temp folder itself: %s", exc)
        where = None
    return ScratchFolder(prefix, where)


def private_mkdtemp(prefix: str, base: Path | None = None) -> Path:
    """As `private_temp_folder`, for a folder its caller removes (tempfile.mkdtemp)."""
    try:
        where: Path | None = kernel_folder(base)
    except OSError as exc:
        log.warning("temporary folders go to the temp folder itself: %s", exc)
        where = None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=where))
