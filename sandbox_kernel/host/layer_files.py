"""What the session wrote into the overlay's layer, compared with the user's folder, and
keeping chosen files: the host side of `%files` (overlay.py says what the layer is).

    changes(real, layer, record)     what differs: new, changed and deleted entries
    keep(real, layer, name, force)   copy one file of the layer into the user's folder
    diff(real, layer, name)          a unified diff of a text file the guest changed

Both folders can change while this runs (the guest between cells, another kernel's guest, a
stranger who can write the folder swapping a folder for a link), so every name is resolved
beneath the two descriptors one component at a time, never following a link (beneath.py),
and each step acts on the descriptor it opened. A kept file is written to a temporary name in
the destination folder and then linked to its name (no-replace: an existing name is never
overwritten unless `force`, and then by an atomic rename), without an executable bit.

Refused, whatever `force`: a name that is not a plain relative path, a hidden name (any
component starting with ".", a secret or Jupyter runtime name as the overlay never shows), a
name that is not UTF-8, a link or anything but a regular file. Refused unless `force` (and
saying why): names that other programs run as code or configuration (CODE_NAMES).

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import fnmatch
import os
import secrets
import stat
from collections import deque
from dataclasses import dataclass
from typing import Final, Literal

from sandbox_kernel.host.beneath import (
    closing,
    lstat_at,
    open_beneath,
    open_dir,
    scan,
    split,
    vanished,
)
from sandbox_kernel.host.overlay_sync import MAX_DEPTH, MAX_ENTRIES, RUNTIME_NAMES, SECRET_NAMES

__all__ = [
    "CODE_NAMES",
    "DIFF_MAX_BYTES",
    "DIFF_MAX_LINES",
    "Entry",
    "KeepRefused",
    "Kept",
    "changes",
    "diff",
    "keep",
    "refusal",
]

# Names other programs run as code or read as configuration when they start in, or look
# into, the folder (glob patterns, case-insensitive): pytest, pip and setuptools, Python's
# site module and any `import` from the folder, Jupyter and IPython, make, direnv, tox, nox,
# npm, docker. Kept only with --force.
CODE_NAMES: Final = (
    "*.py",  # any module beside the notebook shadows an import of a program started there
    "*.pyc",
    "*.pth",
    "*.so",
    "conftest.py",
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "sitecustomize.py",
    "usercustomize.py",
    "jupyter_*config.*",
    "ipython_config.py",
    "ipython_kernel_config.py",
    "pytest.ini",
    "tox.ini",
    "noxfile.py",
    "requirements*.txt",
    "pip.conf",
    "makefile",
    "gnumakefile",
    "*.mk",
    "justfile",
    "package.json",
    "dockerfile",
    "docker-compose.y*ml",
    "compose.y*ml",
)
DIFF_MAX_BYTES: Final = 1 << 20  # a side read for a diff
DIFF_MAX_LINES: Final = 400  # diff lines shown
COPY_MAX_BYTES: Final = 1 << 34  # a kept file (a sparse file can claim terabytes)
Kind = Literal["new", "changed", "deleted"]
Identity = tuple[int, int]


@dataclass(frozen=True)
class Entry:
    """One difference between the layer and the user's folder."""

    path: str  # relative to the notebook's folder, "/"-separated
    kind: Kind
    type: Literal["file", "folder", "link", "other"]
    size: int  # bytes in the layer (0 when deleted)
    mtime_ns: int  # the layer's (the user's when deleted)
    ours: tuple[int, int, int, int] | None = None  # the layer's (device, inode, size, mtime)
    theirs: Identity | None = None  # the user's (device, inode), when the user has one


@dataclass(frozen=True)
class Kept:
    """A file `keep` copied: the layer's file as it was, the copy made, the bytes."""

    ours: tuple[int, int, int, int]
    theirs: Identity
    size: int


class KeepRefused(ValueError):
    """A file that `keep` did not copy; the message says why."""


def _identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino)


def _type(st: os.stat_result) -> Literal["file", "folder", "link", "other"]:
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "folder"
    return "link" if stat.S_ISLNK(st.st_mode) else "other"


def _open_or_none(parent: int | None, name: str) -> int | None:
    if parent is None:
        return None
    try:
        return open_dir(parent, name)
    except OSError:
        return None


def changes(
    real: int, layer: int, record: dict[str, Identity], limit: int = MAX_ENTRIES
) -> list[Entry]:
    """What the layer holds that the user's folder does not (new), holds differently
    (changed) or no longer holds (deleted: a file or folder linked from the user's folder,
    per `record`, that the guest removed), sorted by path; at most `limit` entries of the
    layer are looked at, breadth first, MAX_DEPTH deep."""
    children: dict[str, dict[str, Identity]] = {}
    for key, identity in record.items():
        parent, _, name = key.rstrip("/").rpartition("/")
        children.setdefault(parent, {})[name + ("/" if key.endswith("/") else "")] = identity
    found: list[Entry] = []
    budget = [limit]
    queue: deque[tuple[str, int, int | None]] = deque([("", os.dup(layer), os.dup(real))])
    try:
        while queue:
            relative, here, there = queue.popleft()
            try:
                _compare(relative, here, there, children.get(relative, {}), found, queue, budget)
            finally:
                os.close(here)
                if there is not None:
                    os.close(there)
    finally:
        for _, here, there in queue:
            os.close(here)
            if there is not None:
                os.close(there)
    found.sort(key=lambda e: e.path)
    return found


def _compare(
    relative: str,
    here: int,
    there: int | None,
    linked: dict[str, Identity],
    found: list[Entry],
    queue: deque[tuple[str, int, int | None]],
    budget: list[int],
) -> None:
    """One folder of the layer (`here`) against the user's (`there`, None when the user has
    none): its differences into `found`, its subfolders onto `queue`."""
    try:
        entries = scan(here)
    except OSError as exc:
        if not vanished(exc):
            raise
        return
    for name, st in entries:
        budget[0] -= 1
        if budget[0] < 0:
            return
        child = f"{relative}/{name}" if relative else name
        theirs = lstat_at(there, name) if there is not None else None
        if stat.S_ISDIR(st.st_mode):
            if theirs is None or not stat.S_ISDIR(theirs.st_mode):
                kind: Kind = "new" if theirs is None else "changed"
                found.append(Entry(child, kind, "folder", 0, st.st_mtime_ns))
            if child.count("/") < MAX_DEPTH:
                sub = _open_or_none(here, name)
                if sub is not None:
                    ok = theirs is not None and stat.S_ISDIR(theirs.st_mode)
                    queue.append((child, sub, _open_or_none(there, name) if ok else None))
            continue
        same = theirs is not None and _identity(theirs) == _identity(st)
        if same or linked.get(name) == _identity(st):
            continue  # the user's file, linked (or the one linked before the user replaced it)
        kind = "new" if theirs is None else "changed"
        ours = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        mine = _identity(theirs) if theirs is not None else None
        found.append(Entry(child, kind, _type(st), st.st_size, st.st_mtime_ns, ours, mine))
    _deleted(relative, there, linked, {name for name, _ in entries}, found)


def _deleted(
    relative: str,
    there: int | None,
    linked: dict[str, Identity],
    names: set[str],
    found: list[Entry],
) -> None:
    """The user's files and folders linked into this folder of the layer that the guest
    removed."""
    for key, identity in linked.items():
        name = key.rstrip("/")
        if name in names or there is None:
            continue
        theirs = lstat_at(there, name)
        if theirs is None or _identity(theirs) != identity:
            continue  # the user removed or replaced it: not the guest's doing
        child = f"{relative}/{name}" if relative else name
        found.append(Entry(child, "deleted", _type(theirs), 0, theirs.st_mtime_ns))


def refusal(name: str, force: bool = False) -> str | None:
    """Why `name` may not be kept (None: it may): not a plain relative path, hidden, not
    UTF-8, or (unless `force`) a name other programs run as code or configuration."""
    try:
        parts = split(name)
    except ValueError:
        return "not a plain relative path in the notebook's folder"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "not a UTF-8 name"
    for part in parts:
        if (
            part.startswith(".")
            or SECRET_NAMES.fullmatch(part) is not None
            or RUNTIME_NAMES.fullmatch(part) is not None
        ):
            return "a hidden, secret or Jupyter runtime name, never kept"
    last = parts[-1].lower()
    if not force and any(fnmatch.fnmatchcase(last, pattern) for pattern in CODE_NAMES):
        return (
            "other programs run or read this name as code or configuration when they start "
            "in the folder (use --force if you mean it)"
        )
    return None


def _source(layer: int, parts: list[str]) -> int:
    """The layer's regular file at `parts`, opened for reading without following a link."""
    with closing(open_beneath(layer, "/".join(parts[:-1]))) as folder:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, dir_fd=folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise KeepRefused("not a regular file in the session's folder")
    return fd


def _destination(real: int, parts: list[str]) -> int:
    """The user's folder that will hold the file, its missing folders made (0755 as the
    umask allows), no component a link."""
    return open_beneath(real, "/".join(parts[:-1]), create=True)


def keep(real: int, layer: int, name: str, force: bool = False) -> Kept:
    """Copy the layer's file `name` into the user's folder at the same name; what was
    copied. KeepRefused (saying why) when it may not or cannot be."""
    why = refusal(name, force)
    if why is not None:
        raise KeepRefused(why)
    parts = split(name)
    try:
        source = _source(layer, parts)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise KeepRefused("a link in the session's folder, never followed") from None
        if vanished(exc) or exc.errno == errno.ENOENT:
            raise KeepRefused("the session has no such file") from None
        raise
    with closing(source):
        st = os.fstat(source)
        try:
            folder = _destination(real, parts)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise KeepRefused("a link or a file where your folder has to be") from None
            raise
        with closing(folder):
            theirs = lstat_at(folder, parts[-1])
            if theirs is not None:
                if _identity(theirs) == _identity(st):
                    raise KeepRefused("already yours: the file in your folder is this one")
                if not stat.S_ISREG(theirs.st_mode):
                    raise KeepRefused("your folder has a link or a folder by that name")
                if not force:
                    raise KeepRefused("your folder has a file by that name (--force replaces it)")
            size = _place(source, st, folder, parts[-1], force)
            made = lstat_at(folder, parts[-1])
            copy = _identity(made) if made is not None else (0, 0)
            return Kept((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), copy, size)


def _place(source: int, st: os.stat_result, folder: int, name: str, force: bool) -> int:
    """Copy `source` to a temporary name in `folder`, then give it `name`: a hard link
    (fails if the name exists) or, with `force`, a rename over a regular file."""
    if st.st_size > COPY_MAX_BYTES:
        raise KeepRefused(f"larger than {COPY_MAX_BYTES:,} bytes")
    temporary = f".{secrets.token_hex(8)}.keeping"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600, dir_fd=folder)
    copied = 0
    try:
        with closing(fd):
            while copied <= COPY_MAX_BYTES:
                chunk = os.read(source, 1 << 20)
                if not chunk:
                    break
                os.write(fd, chunk)
                copied += len(chunk)
            if copied > COPY_MAX_BYTES:
                raise KeepRefused(f"larger than {COPY_MAX_BYTES:,} bytes")
            mask = os.umask(0o022)
            os.umask(mask)
            os.fchmod(fd, 0o666 & ~mask)
            os.fsync(fd)
        if force:
            theirs = lstat_at(folder, name)
            if theirs is not None and not stat.S_ISREG(theirs.st_mode):
                raise KeepRefused("your folder has a link or a folder by that name")
            os.rename(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        else:
            try:
                os.link(
                    temporary, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False
                )
            except FileExistsError:
                raise KeepRefused(
                    "your folder has a file by that name (--force replaces it)"
                ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)
    return copied


def _read_text(parent: int, parts: list[str], what: str) -> list[str]:
    try:
        with closing(open_beneath(parent, "/".join(parts[:-1]))) as folder:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(parts[-1], flags, dir_fd=folder)
    except OSError as exc:
        if vanished(exc) or exc.errno == errno.ENOENT:
            return []
        raise
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise KeepRefused(f"{what} is not a regular file")
        data = handle.read(DIFF_MAX_BYTES + 1)
    if len(data) > DIFF_MAX_BYTES:
        raise KeepRefused(f"{what} is larger than {DIFF_MAX_BYTES:,} bytes: no diff")
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        raise KeepRefused(f"{what} is not UTF-8 text: no diff") from None


def diff(real: int, layer: int, name: str) -> str:
    """A unified diff from the user's file `name` to the session's, at most DIFF_MAX_LINES
    lines; KeepRefused for a name that is not plain, or a file that is not text."""
    try:
        parts = split(name)
    except ValueError:
        raise KeepRefused("not a plain relative path in the notebook's folder") from None
    theirs = _read_text(real, parts, "your file")
    ours = _read_text(layer, parts, "the session's file")
    lines = list(difflib.unified_diff(theirs, ours, f"yours/{name}", f"session/{name}"))
    if len(lines) > DIFF_MAX_LINES:
        more = len(lines) - DIFF_MAX_LINES
        lines = [*lines[:DIFF_MAX_LINES], f"... and {more} more lines\n"]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
