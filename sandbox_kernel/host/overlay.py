"""The notebook's folder as a copy-on-write overlay: the guest reads every file there and may
write, rename and delete, while the user's own files are never changed.

The guest's working folder (/notebook) is a layer folder beside the user's files:

    <notebook folder>/.sandbox-kernel/layer/      what the guest sees and changes
    <notebook folder>/.sandbox-kernel/state.json  what the host linked (the guest cannot see it)

At each session start, and between cells when a folder of it changed, the layer is brought up
to date with the folder (overlay_sync.py: hard links to the folder's files, no copy, no
space): a read reads the user's file as it is now. A link shares its file with the user's, so
before the guest may change one (an open for writing or truncation, or new timestamps), the
guard's shadow calls `Overlay.before_write`, which replaces the link with a private copy first
(copy-up); the write then lands in the copy. Renames and deletes change the layer's names
only. A file the guest wrote, renamed or deleted stays that way at the next start (state.json
remembers what was linked); a file the user changed by replacing it is linked again, one the
user deleted goes from the layer too. Folders are made in the layer, empty ones included (a
notebook writes into its `output/`); one the guest removed stays removed, one the user removed
goes when the guest left nothing in it. What is never shown, and the scan's bounds, are
overlay_sync.py's. A folder that is the home folder, or holds it, is refused whole
(OverlayRefused).

Every host-side step works beneath directory descriptors opened once (beneath.py): the folder,
its `.sandbox-kernel` and the layer are held open for the overlay's life, and no step follows
a link that the guest, another kernel's guest or a stranger who can write the folder planted.

How the guard knows a shared file: wasmtime's WASI reports as a file's inode the SipHash-1-3
(keys 0, 0) of its host device and inode numbers (`wasi_inode`), so the set of the linked
files' WASI inodes identifies them exactly, whatever name or folder the guest reaches them by.
A shared file the guard cannot find on the host by the guest's path (a folder renamed after
it was opened) is refused, never written.

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sandbox_kernel.core.errors import SandboxError
from sandbox_kernel.core.notebook_folder import STATE_FOLDER, layer_of
from sandbox_kernel.host import wasi_quota
from sandbox_kernel.host.beneath import closing, resolve_beneath
from sandbox_kernel.host.overlay_sync import (
    MAX_ENTRIES,
    RUNTIME_NAMES,
    SECRET_NAMES,
    LayerState,
    LayerSync,
    read_record,
    write_record,
)
from sandbox_kernel.host.run_guard import EACCES, REGULAR_FILE, FileStat, RunGuard
from sandbox_kernel.host.wasi_inode import wasi_inode

__all__ = [
    "MAX_ENTRIES",
    "RUNTIME_NAMES",
    "SECRET_NAMES",
    "STATE_FOLDER",
    "Overlay",
    "OverlayRefused",
    "prepare_overlay",
    "wasi_inode",
]

EINTR, EFBIG = 27, 22  # WASI preview1 errno values
_CHUNK = 1 << 20
RACY_NS: Final = 50_000_000  # more than a file system clock's tick (a jiffy, up to 10 ms)


class OverlayRefused(SandboxError):
    """The notebook's folder cannot be shown as an overlay (the reason says why)."""

    def __init__(self, message: str, *, never_shown: bool = False) -> None:
        super().__init__(message)
        self.never_shown = never_shown  # True: not even read-only (the home folder)


@dataclass
class Overlay:
    """A prepared layer: where it is, which of its files are the user's (by WASI inode), and
    what was left out. It holds the folder's, the state folder's and the layer's descriptors
    until it is closed (or collected)."""

    layer: Path
    shared: frozenset[int]  # WASI inodes of the user's files linked into the layer
    notes: list[str] = field(default_factory=list)
    real: Path | None = None  # the user's folder
    exclude: tuple[Path, ...] = ()
    state: LayerState = field(default_factory=LayerState)  # what the layer holds
    fds: tuple[int, int, int] | None = None  # (folder, state folder, layer)
    synced_ns: int = 0  # time.time_ns() when the last bringing-up-to-date began
    read_only: bool = False  # shown read-only: no write is let through, no copy made
    _closer: Callable[[], object] | None = field(default=None, repr=False)  # closes them once

    def refresh(self) -> bool:
        """Bring the layer up to date with the folder again where a folder of it changed
        since (a file added, removed or replaced: its folder's mtime moved): the user's new
        files appear between two cells, as on ipykernel. Only the folders that changed are
        looked into again; cheap when nothing changed (one stat a folder). True when it
        looked again. Only between turns."""
        if self.fds is None:
            return False
        changed = self._changed()
        if not changed:
            return False
        self._sync(changed)
        return True

    def close(self) -> None:
        """Release the descriptors (the overlay is not refreshed after)."""
        self.fds = None
        if self._closer is not None:
            self._closer()

    def _changed(self) -> list[str]:
        """The watched folders whose mtime or identity moved (looked up by path: only a
        hint to look again; the look itself follows no link)."""
        assert self.real is not None
        changed, base = [], str(self.real)
        for relative, (seen, identity) in self.state.watched.items():
            try:
                st = os.stat(f"{base}/{relative}" if relative else base, follow_symlinks=False)
            except OSError:
                changed.append(_parent_of(relative))
                continue
            # A folder changed in the same clock tick as the last look has the mtime it had
            # then ("racy", as git says): looked at once more.
            racy = seen >= self.synced_ns - RACY_NS
            if racy or st.st_mtime_ns != seen or (st.st_dev, st.st_ino) != identity:
                changed.append(relative)
        return changed

    def _sync(self, changed: list[str] | None = None) -> None:
        """Bring the layer up to date (overlay_sync.py): all of it, or the folders in
        `changed`; and learn its shared files anew."""
        assert self.fds is not None
        real, state, layer = self.fds
        excluded: set[tuple[int, int]] = set()
        for path in self.exclude:
            with contextlib.suppress(OSError):
                st = os.stat(path)
                excluded.add((st.st_dev, st.st_ino))
        self.synced_ns = time.time_ns()
        if changed is None:
            self.state = LayerState(record=read_record(state))
        found = LayerSync(real, layer, self.state, frozenset(excluded)).run(changed)
        write_record(state, self.state.record)
        self.shared = frozenset(inode for _, inode in self.state.shared.values())
        self.notes = found.notes

    def before_write(
        self,
        guard: RunGuard,
        caller: Any,
        fd: int,
        path: bytes,
        found: FileStat | None,
        truncate: bool,
    ) -> int:
        """Before the guest changes the file at `path` (under `fd`; `found` is what it is, None
        for nothing there): 0 to go on (a copy-up done if it was the user's), else a WASI
        errno with the refusal noted."""
        if found is None or not self._shared(found):
            return 0  # a new file, the guest's own, or one whose user link is gone
        shown = path.decode(errors="replace")
        if self.read_only:
            return guard.refuse(
                "fs_denied", f"{shown!r}: the notebook's folder is read-only", EACCES
            )
        try:
            parent, name = self._find(guard, fd, path)
        except (OSError, ValueError):
            detail = f"{shown!r} is a file of the notebook's folder reached by a moved path"
            return guard.refuse("fs_denied", detail, EACCES)
        with closing(parent):
            return _copy_up(guard, parent, name, found.inode, truncate, shown)

    def before_fd_change(self, guard: RunGuard, caller: Any, fd: int) -> int:
        """Before the guest changes a file through a descriptor it holds (its timestamps):
        a file shared with the user's cannot be copied under an open descriptor, so that is
        refused."""
        found = guard.fd_stat(caller, fd)
        if found is not None and self._shared(found):
            detail = f"fd {fd} is a file of the notebook's folder: set its times by its path"
            return guard.refuse("fs_denied", detail, EACCES)
        return 0

    def _shared(self, found: FileStat) -> bool:
        """A regular file that is one of the user's and still has the user's link too."""
        return found.kind == REGULAR_FILE and found.inode in self.shared and found.links >= 2

    def _find(self, guard: RunGuard, fd: int, path: bytes) -> tuple[int, str]:
        """The host folder (a descriptor, the caller closes it) and name of the file the
        guest names, resolved beneath the writable preopen it lies in as the guest's WASI
        resolves it; OSError or ValueError when it cannot be found that way."""
        parts: list[bytes] = [path]
        seen = 0
        while fd not in guard.preopen_roots:
            opened = guard.files.get(fd)
            if opened is None or seen > 64:
                raise ValueError("not under a preopened folder")
            parts.append(opened.path)
            fd, seen = opened.dirfd, seen + 1
        root = guard.preopen_roots[fd]
        relative = "/".join(p.decode("utf-8", "surrogateescape") for p in reversed(parts))
        if self.fds is not None and root == self.layer:
            return resolve_beneath(self.fds[2], relative)
        with closing(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)) as top:
            return resolve_beneath(top, relative)


def _copy_up(
    guard: RunGuard, parent: int, name: str, inode: int, truncate: bool, shown: str
) -> int:
    """Replace the link `name` in `parent` with a private copy of its file (empty when the
    open will truncate it anyway), bounded by the file cap, the quota and the turn's
    deadline. The file copied is the one opened, checked to be the guest's (`inode`)."""
    refused = EACCES
    try:
        source = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent
        )
    except OSError:
        return guard.refuse("fs_denied", f"{shown!r} could not be copied", refused)
    with closing(source):
        st = os.fstat(source)
        if not stat.S_ISREG(st.st_mode) or wasi_inode(st) != inode:
            detail = f"{shown!r} is a file of the notebook's folder reached by a moved path"
            return guard.refuse("fs_denied", detail, EACCES)
        size = 0 if truncate else st.st_size
        if size > guard.limits.max_file_bytes:
            detail = f"{shown!r}: a copy of {size:,} bytes is over the file cap"
            return guard.refuse("file_size", detail, EFBIG)
        charged = wasi_quota.charge(guard, size)
        if charged is not None:
            return charged
        temporary = f".{name}.{secrets.token_hex(6)}.copy"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            with closing(os.open(temporary, flags, st.st_mode & 0o7777, dir_fd=parent)) as out:
                while not truncate and (chunk := os.read(source, _CHUNK)):
                    if guard.stopped():
                        raise InterruptedError
                    os.write(out, chunk)
            os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
        except InterruptedError:
            _remove(parent, temporary)
            return EINTR
        except OSError:
            _remove(parent, temporary)
            return guard.refuse("fs_denied", f"{shown!r} could not be copied", EACCES)
    return 0


def _parent_of(relative: str) -> str:
    return relative.rpartition("/")[0]


def _remove(parent: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=parent)


# -- preparing the layer ---------------------------------------------------------------------


def prepare_overlay(
    real: Path, exclude: tuple[Path, ...] = (), *, read_only: bool = False
) -> Overlay:
    """The layer for the folder `real`, brought up to date with it (see the module's text);
    folders in `exclude` (the session's workspace, when it lies inside) are not shown;
    `read_only`: the guest is shown the layer read-only (the same files, never a write).
    OverlayRefused when the folder may not be shown this way."""
    real = real.expanduser().resolve()
    home = Path.home().resolve()
    if real == Path("/") or home.is_relative_to(real):
        raise OverlayRefused(
            f"{real} is your home folder or holds it, which is never shown whole: put the "
            "notebook in a folder of its own",
            never_shown=True,
        )
    try:
        top = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise OverlayRefused(f"cannot open {real}: {exc.strerror}") from None
    fds = [top]
    try:
        fds.append(_private_folder(top, STATE_FOLDER, real / STATE_FOLDER))
        fds.append(_private_folder(fds[1], "layer", layer_of(real)))
    except BaseException:
        _close_all(tuple(fds))
        raise
    overlay = Overlay(layer_of(real), frozenset(), real=real, exclude=exclude)
    overlay.read_only = read_only
    overlay.fds = (fds[0], fds[1], fds[2])
    overlay._closer = weakref.finalize(overlay, _close_all, tuple(fds))
    try:
        overlay._sync()
    except BaseException:
        overlay.close()
        raise
    return overlay


def _close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _private_folder(parent: int, name: str, shown: Path) -> int:
    """The folder `name` in `parent`, made 0700 if new, opened without following a link;
    refused if it is a link or another user's."""
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent)
        fd = os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
        )
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OverlayRefused(
                f"{shown} is not a folder of yours (a link, or another user's)"
            ) from None
        raise OverlayRefused(f"cannot make {shown}: {exc.strerror}") from None
    st = os.fstat(fd)
    if st.st_uid != os.getuid():
        os.close(fd)
        raise OverlayRefused(f"{shown} is not a folder of yours (a link, or another user's)")
    return fd
