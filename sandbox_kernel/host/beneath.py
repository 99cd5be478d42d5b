"""File work beneath a folder that someone else can change while the host works in it (the
notebook's folder, its overlay's layer, the workspace): every name is resolved one component
at a time from a directory descriptor, never following a link, and each step acts on the
descriptor it opened, never on a name looked up again.

    open_dir(parent, name)          a folder below `parent`, refused if the name is a link
    open_beneath(root, relative)    the same, component by component ("a/b/c")
    resolve_beneath(root, path)     a guest's path as the guest's WASI resolves it: links
                                    followed only while they stay beneath `root`, ".." never
                                    above it; (parent descriptor, last name)
    lstat_at(parent, name)          what is there now, None when it is gone
    scan(folder)                    (name, stat) of a folder's entries, none followed
    link_opened(parent, name, ...)  a hard link to exactly the file that was opened
    vanished(exc)                   an error that means "it changed under us": skip it

Another program may remove or replace any entry between two steps (a download's `.part`
file, a renamer swapping a folder for a link): such errors (ENOENT, ESTALE, ENOTDIR, ELOOP)
are expected and mean "not there": callers skip the entry, never fail the whole folder.

Must not import: anything of sandbox_kernel (the standard library only).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections import deque
from collections.abc import Iterator

__all__ = [
    "DIR_FLAGS",
    "closing",
    "link_opened",
    "lstat_at",
    "open_beneath",
    "open_dir",
    "resolve_beneath",
    "scan",
    "split",
    "vanished",
]

# A folder opened for listing and as an anchor; never through a link.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A file opened only to name it (no read, no side effects of opening a FIFO or a device).
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_GONE = frozenset({errno.ENOENT, errno.ESTALE, errno.ENOTDIR, errno.ELOOP})
MAX_LINKS = 40  # as Linux's own limit on links followed in one lookup


def vanished(exc: OSError) -> bool:
    """True when `exc` says the entry was removed or changed kind under us."""
    return exc.errno in _GONE


def split(relative: str) -> list[str]:
    """The components of a plain relative path; ValueError for anything else ("", ".", "..",
    an absolute path, a NUL)."""
    parts = relative.split("/")
    if not relative or "\0" in relative or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a plain relative path: {relative!r}")
    return parts


@contextlib.contextmanager
def closing(fd: int) -> Iterator[int]:
    """`fd`, closed when the block ends."""
    try:
        yield fd
    finally:
        os.close(fd)


def open_dir(parent: int, name: str) -> int:
    """The folder `name` in `parent`; OSError (ELOOP or ENOTDIR) when it is a link or not a
    folder."""
    return os.open(name, DIR_FLAGS, dir_fd=parent)


def open_beneath(root: int, relative: str, *, create: bool = False) -> int:
    """The folder at `relative` below `root` ("" is `root` itself, as a new descriptor), no
    component a link; `create`: missing folders are made (0755 as the umask allows)."""
    fd = os.dup(root)
    try:
        for name in split(relative) if relative else ():
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
            child = open_dir(fd, name)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def lstat_at(parent: int, name: str) -> os.stat_result | None:
    """What `name` in `parent` is now (a link itself, not what it points to); None when
    nothing is there."""
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError as exc:
        if vanished(exc):
            return None
        raise


def scan(folder: int) -> list[tuple[str, os.stat_result]]:
    """(name, stat) of each entry of `folder`, sorted by name, none followed; entries that
    vanish while it looks are left out."""
    found: list[tuple[str, os.stat_result]] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                found.append((entry.name, entry.stat(follow_symlinks=False)))
            except OSError as exc:
                if not vanished(exc):
                    raise
    found.sort(key=lambda item: item[0])
    return found


def link_opened(parent: int, name: str, expected: os.stat_result, folder: int, new: str) -> bool:
    """Link the regular file `name` in `parent` as `new` in `folder`, if it is still the file
    `expected` (same device and inode): the file is opened without following a link and the
    link made to what was opened (through /proc/self/fd), so a name swapped in between
    cannot put another file there. False when it changed or vanished; OSError when it could
    not be linked (another file system, not the user's)."""
    try:
        fd = os.open(name, _PATH_FLAGS, dir_fd=parent)
    except OSError as exc:
        if vanished(exc):
            return False
        raise
    with closing(fd):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not os.path.samestat(st, expected):
            return False
        try:
            os.link(f"/proc/self/fd/{fd}", new, dst_dir_fd=folder, follow_symlinks=True)
            return True
        except FileNotFoundError:
            if os.path.exists("/proc/self/fd"):
                return False  # the file was removed since it was opened
        # Without /proc: link by name, then keep the link only if it is the file opened.
        os.link(name, new, src_dir_fd=parent, dst_dir_fd=folder, follow_symlinks=False)
        made = lstat_at(folder, new)
        if made is not None and os.path.samestat(made, st):
            return True
        with contextlib.suppress(OSError):
            os.unlink(new, dir_fd=folder)
        return False


def resolve_beneath(root: int, path: str) -> tuple[int, str]:
    """Where the guest's `path` (relative to the folder `root`) leads, as its WASI resolves
    it: "." and ".." by components (never above `root`), links followed while they stay
    beneath `root` (an absolute target, or one that climbs out, is refused with EXDEV). The
    descriptor of the last component's folder (the caller closes it) and the last name."""
    stack = [os.dup(root)]
    todo = deque(path.split("/"))
    links = 0
    try:
        while todo:
            name = todo.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) == 1:
                    raise OSError(errno.EXDEV, "the path climbs out of its folder")
                os.close(stack.pop())
                continue
            st = lstat_at(stack[-1], name)
            if st is not None and stat.S_ISLNK(st.st_mode):
                links += 1
                target = os.readlink(name, dir_fd=stack[-1])
                if links > MAX_LINKS or target.startswith("/"):
                    raise OSError(errno.EXDEV, "a link leads out of its folder")
                todo.extendleft(reversed(target.split("/")))
                continue
            if not any(part not in ("", ".") for part in todo):
                found = stack.pop()
                return found, name
            stack.append(open_dir(stack[-1], name))
        raise OSError(errno.EISDIR, "the path names a folder")
    finally:
        for fd in stack:
            os.close(fd)
