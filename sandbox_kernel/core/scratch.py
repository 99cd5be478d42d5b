"""Temporary folders the guest writes into, and removing a folder the guest shaped.

A guest shapes its folders as it likes: a chain of 1,500 nested folders in its /tmp is one
loop. Python 3.11's `shutil.rmtree` (and so `TemporaryDirectory.cleanup`) recurses once per
level and raised RecursionError there, which is no OSError: a session's end failed, and the
per-user runtime folder's pruner stopped every later kernel of the user from starting.
`remove_tree` removes any tree with two descriptors and no recursion: it moves the children
of each folder it opens up to the top folder (a rename within one folder tree, which follows
no link), so every entry is moved at most once, whatever the depth; nothing is ever entered
through a link, and nothing outside the tree is touched.

Must not import: anything of the project above core, wasmtime, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import stat
import tempfile
import weakref
from pathlib import Path
from types import TracebackType

__all__ = ["ScratchFolder", "remove_tree", "remove_tree_at"]

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree_at(dir_fd: int, name: str) -> bool:
    """Remove `name` beneath the folder `dir_fd` and everything in it, following no link;
    whether it is gone. A link, a file or a missing name is removed (or already gone); an
    error on one entry leaves that entry (and its folder) behind, never raises."""
    try:
        info = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        return not _exists(dir_fd, name)
    try:
        top = os.open(name, _DIRECTORY, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        opened = os.fstat(top)
        if (opened.st_dev, opened.st_ino) == (info.st_dev, info.st_ino):
            _empty(top)
    finally:
        os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=dir_fd)
    return not _exists(dir_fd, name)


def remove_tree(path: Path | str) -> bool:
    """`remove_tree_at` for a path: its parent folder is opened as it is, the last name is
    never followed."""
    target = Path(path)
    try:
        parent = os.open(target.parent, _DIRECTORY & ~os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        return remove_tree_at(parent, target.name)
    finally:
        os.close(parent)


def _empty(top: int) -> None:
    """Remove everything in the folder `top`: files and links at once, each folder's entries
    moved up into `top` before the (then empty) folder is removed. Ends when a pass changes
    nothing (what is left could not be removed)."""
    tag = secrets.token_hex(4)
    counter = itertools.count()
    while True:
        progress = False
        try:
            names = os.listdir(top)
        except OSError:
            return
        if not names:
            return
        for name in names:
            try:
                info = os.lstat(name, dir_fd=top)
                if not stat.S_ISDIR(info.st_mode):
                    os.unlink(name, dir_fd=top)
                    progress = True
                    continue
                inner = os.open(name, _DIRECTORY, dir_fd=top)
                try:
                    for child in os.listdir(inner):
                        moved = f".rm-{tag}-{next(counter)}"
                        os.rename(child, moved, src_dir_fd=inner, dst_dir_fd=top)
                        progress = True
                finally:
                    os.close(inner)
                os.rmdir(name, dir_fd=top)
                progress = True
            except OSError:
                continue  # gone meanwhile, or not ours to remove: the next pass sees
        if not progress:
            return


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


class ScratchFolder:
    """A private temporary folder (as tempfile.mkdtemp makes it) that the guest may fill as it
    likes: removed by `cleanup()`, on leaving a `with`, or when the object is collected or
    the process exits, with `remove_tree`. `TemporaryDirectory` without its recursion."""

    def __init__(self, prefix: str, dir: Path | str | None = None) -> None:
        self.name = tempfile.mkdtemp(prefix=prefix, dir=dir)
        self._finalizer = weakref.finalize(self, remove_tree, self.name)

    def cleanup(self) -> None:
        self._finalizer()

    def __enter__(self) -> str:
        return self.name

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cleanup()
