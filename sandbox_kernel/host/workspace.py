"""The host's view of a guest's workspace: listing and diffing without ever following a link.

A guest can plant a symlink in /app pointing anywhere on the host (`ln -s ../../..`): wasmtime
will not follow it for the guest, but host code that walks, reads, copies or cleans the folder
could. So everything here uses lstat and `follow_symlinks=False`; a link is reported as an
entry of its own and never entered. File contents are never read: a 1 TB sparse file costs a
stat, not a terabyte. A listing is bounded in entries, so a guest that creates millions of files
cannot make the host walk forever.

Must not import: wasmtime, runtimes, repl.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MAX_ENTRIES",
    "Entry",
    "Snapshot",
    "diff",
    "disk_growth",
    "disk_usage",
    "remove_tree",
    "snapshot",
    "write_file_nofollow",
]

MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class Entry:
    size: int
    mtime_ns: int
    inode: int
    kind: str  # "file", "link" or "other"


@dataclass(frozen=True)
class Snapshot:
    entries: dict[str, Entry]  # relative POSIX path -> what lstat said
    complete: bool  # False when MAX_ENTRIES cut the listing


def snapshot(
    root: Path, exclude: frozenset[str] = frozenset(), limit: int | None = None
) -> Snapshot:
    """Every non-directory under `root`, by relative path, links not followed; at most `limit`
    (default MAX_ENTRIES) items looked at, folders included (20,000 empty folders cost a walk
    too)."""
    entries: dict[str, Entry] = {}
    base = os.fspath(root)
    cut = len(base) if base.endswith(os.sep) else len(base) + 1  # the relative path's start
    for path, st in _walk([root], MAX_ENTRIES if limit is None else limit):
        if path is None:
            return Snapshot(entries, complete=False)
        rel = path[cut:]
        if not stat.S_ISDIR(st.st_mode) and rel not in exclude:
            entries[rel] = Entry(st.st_size, st.st_mtime_ns, st.st_ino, _kind(st))
    return Snapshot(entries, complete=True)


def disk_usage(roots: list[Path], entry_cost: int, limit: int = MAX_ENTRIES) -> int | None:
    """What the folders under `roots` hold as the workspace quota counts it: each file's size,
    `entry_cost` for each folder, link or other entry; links never followed. None when more
    than `limit` entries would have to be looked at."""
    total = 0
    for path, st in _walk(roots, limit):
        if path is None:
            return None
        total += st.st_size if stat.S_ISREG(st.st_mode) else entry_cost
    return total


def disk_growth(roots: list[Path], entry_cost: int, at_start: int | None) -> int | None:
    """How much more `roots` hold now than `at_start` (a disk_usage), never below zero; None
    when either could not be measured."""
    now = disk_usage(roots, entry_cost)
    if now is None or at_start is None:
        return None
    return max(0, now - at_start)


def _walk(roots: list[Path], limit: int) -> Iterator[tuple[str | None, os.stat_result]]:
    """Every entry under `roots` (its path, as a str: a Path made for each was a third of the
    cost of the listing the run log makes twice a cell) with what lstat says of it, links
    never followed nor entered; past `limit` entries, one last (None, ...) and the walk
    ends. A folder that vanishes or cannot be read while walking is passed over."""
    pending: list[str] = [os.fspath(root) for root in roots]
    seen = 0
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as listing:
                for item in listing:
                    seen += 1
                    st = item.stat(follow_symlinks=False)
                    if seen > limit:
                        yield None, st
                        return
                    if stat.S_ISDIR(st.st_mode):
                        pending.append(item.path)
                    yield item.path, st
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue


def _kind(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "link"
    return "file" if stat.S_ISREG(st.st_mode) else "other"


def diff(before: Snapshot, after: Snapshot) -> tuple[list[str], list[str]]:
    """(created, modified): sorted relative paths."""
    created = sorted(p for p in after.entries if p not in before.entries)
    modified = sorted(
        p for p, e in after.entries.items() if p in before.entries and before.entries[p] != e
    )
    return created, modified


def remove_tree(path: Path) -> None:
    """Remove a folder the host made, without following links a guest planted in it.

    shutil.rmtree unlinks symlinks rather than descending into them, and on Linux uses the
    fd-based walk that is safe against a link swapped in during the removal.
    """
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def write_file_nofollow(path: Path, data: bytes) -> None:
    """Put `data` at `path`, replacing whatever a guest left there without following it.

    A guest can turn /app/user_code.py into a link to a host file, a dangling link or a
    folder; writing through it would let the next run overwrite a file outside the workspace.
    So the name is removed as it is (a link is unlinked, not followed) and the file is created
    afresh with O_EXCL | O_NOFOLLOW.
    """
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            remove_tree(path)
        else:
            path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
