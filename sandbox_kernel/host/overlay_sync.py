"""Bringing the overlay's layer up to date with the notebook's folder (overlay.py says what the
layer is): which entries are shown, the bounded scan, the links, and the record of what was
linked.

Both trees may change while this runs: a stranger who can write the folder may swap a folder
for a link to an outside one (an atomic rename exchange), another kernel's guest may plant
links in the layer, a download may create and remove its `.part` file. So every step works
from directory descriptors (beneath.py): a folder is entered only if it is a folder when it
is opened (O_NOFOLLOW), a file is linked only if the file opened is the one listed, and an
entry that vanishes or changes kind is skipped, never an error for the folder.

What the scan costs grows with what is shown, not with the folder: breadth first, at most
MAX_ENTRIES entries and MAX_DEPTH folders deep, with a plain notice naming what was left out
(the guest's own files in the layer are never touched by the bound). A refresh between cells
looks only into the folders whose mtime moved and keeps the rest as the last run left it
(LayerState).

Never shown: names starting with "." (hidden files and folders: .git, .env, .ssh, the layer
itself), known secret files (SECRET_NAMES), Jupyter's connection and runtime files
(RUNTIME_NAMES: a kernel's connection file holds its HMAC key), names that are not UTF-8
(the guest's WASI cannot carry them: listing the folder would fail whole), tool folders that
are not the notebook's data (a virtual environment, which holds a pyvenv.cfg; __pycache__;
node_modules), links, FIFOs, sockets and devices.

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from sandbox_kernel.host.beneath import (
    closing,
    link_opened,
    lstat_at,
    open_beneath,
    open_dir,
    scan,
    split,
    vanished,
)
from sandbox_kernel.host.wasi_inode import wasi_inode

__all__ = [
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "RUNTIME_NAMES",
    "SECRET_NAMES",
    "LayerState",
    "LayerSync",
    "Scan",
    "read_record",
    "write_record",
]

MAX_ENTRIES: Final = 10_000  # files and folders shown; a bigger tree shows its first ones
MAX_DEPTH: Final = 12  # folders below the notebook's that are shown
MAX_NAMED: Final = 5  # left-out names a notice spells out
# Names never shown, whatever folder they are in (case-insensitive, whole name).
SECRET_NAMES: Final = re.compile(
    r"(id_(rsa|dsa|ecdsa|ed25519)(_sk)?(\.pub)?|.*\.(pem|key|p12|pfx|jks|keystore|kdbx|ovpn"
    r"|gpg|asc)|credentials(\.json|\.csv)?|client_secret.*\.json|service[-_]account.*\.json"
    r"|token\.json|secrets?\.(toml|ya?ml|json)|htpasswd|netrc|_netrc|known_hosts"
    r"|authorized_keys)",
    re.IGNORECASE,
)
# Jupyter's connection files (with their HMAC keys) and runtime files, and sockets by name.
RUNTIME_NAMES: Final = re.compile(
    r"(kernel-.*\.json|(nb|jp)server-.*\.(json|html)|jupyter_cookie_secret"
    r"|notebook_cookie_secret|.*\.sock|jupyter-runtime.*)",
    re.IGNORECASE,
)
# Folders of tools, not data: never shown (a virtual environment is found by its pyvenv.cfg).
TOOL_FOLDERS: Final = frozenset({"__pycache__", "node_modules"})
Identity = tuple[int, int]  # (device, inode)


def _hidden(name: str) -> bool:
    return (
        name.startswith(".")
        or SECRET_NAMES.fullmatch(name) is not None
        or RUNTIME_NAMES.fullmatch(name) is not None
    )


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8, kept as a surrogate escape
        return False
    return True


def _identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino)


@dataclass
class Scan:
    """What one bringing-up-to-date left out, and the notes for the user about it."""

    notes: list[str] = field(default_factory=list)
    shown: int = 0
    skipped: int = 0  # files that could not be linked
    not_utf8: list[str] = field(default_factory=list)
    too_many: list[str] = field(default_factory=list)  # the first entries over MAX_ENTRIES
    left_out: int = 0  # entries seen but not shown: over MAX_ENTRIES
    too_deep: list[str] = field(default_factory=list)

    def leave_out(self, relative: str) -> None:
        """`relative` is not shown: over MAX_ENTRIES."""
        self.left_out += 1
        if len(self.too_many) < MAX_NAMED:
            self.too_many.append(relative)

    def finish(self) -> None:
        """The notices for what was left out."""

        def named(names: list[str]) -> str:
            more = f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
            return ", ".join(repr(n) for n in names[:MAX_NAMED]) + more

        if self.not_utf8:
            self.notes.append(
                f"{len(self.not_utf8)} names that are not UTF-8 are not shown (the sandbox "
                f"cannot carry them): {named(self.not_utf8)}"
            )
        if self.too_many:
            more = self.left_out - len(self.too_many)
            self.notes.append(
                f"the folder has over {MAX_ENTRIES:,} entries: the {MAX_ENTRIES:,} nearest are "
                f"shown; not shown: {named(self.too_many)}"
                + (f" and {more:,} more" if more > 0 else "")
            )
        if self.too_deep:
            self.notes.append(
                f"folders deeper than {MAX_DEPTH} are not shown: {named(self.too_deep)}"
            )
        if self.skipped:
            self.notes.append(
                f"{self.skipped} files could not be linked (another file system, or not yours)"
            )


@dataclass
class LayerState:
    """What the layer holds by the host's count, kept from one bringing-up-to-date to the
    next: the record (state.json: key -> identity, a folder's key ending in "/"), the user's
    files linked (key -> stat) and the folders watched (relative path -> (mtime, identity);
    the folder itself is "")."""

    record: dict[str, Identity] = field(default_factory=dict)
    shared: dict[str, tuple[Identity, int]] = field(default_factory=dict)  # WASI inode
    watched: dict[str, tuple[int, Identity]] = field(default_factory=dict)


def _parent(key: str) -> str:
    return key.rstrip("/").rpartition("/")[0]


@dataclass
class LayerSync:
    """One bringing-up-to-date of the layer (descriptors `layer`) with the folder (`real`),
    of the whole folder or only of the folders that changed since the last (`state`, updated
    in place). `excluded`: folders never shown (the session's workspace)."""

    real: int
    layer: int
    state: LayerState
    excluded: frozenset[Identity] = frozenset()
    before: dict[str, Identity] = field(default_factory=dict)  # popped as entries are seen
    linked: dict[str, Identity] = field(default_factory=dict)  # this run's record
    shared: dict[str, tuple[Identity, int]] = field(default_factory=dict)
    watched: dict[str, tuple[int, Identity]] = field(default_factory=dict)
    keep: frozenset[str] = frozenset()  # watched folders not looked into again
    full: bool = True  # the whole folder, not a refresh of what changed
    _children: dict[str, list[str]] = field(default_factory=dict)

    def run(self, changed: list[str] | None = None) -> Scan:
        """Walk breadth first from the folder (`changed` None) or from the folders in
        `changed` only (a refresh: what did not change is kept as it was) and bring the
        layer up to date (module text)."""
        full = self.full = changed is None
        starts = [""] if changed is None else sorted(set(changed), key=lambda f: f.count("/"))
        self.keep = frozenset() if full else frozenset(self.state.watched) - set(starts)
        for key in self.state.record:
            self._children.setdefault(_parent(key), []).append(key)
        found = Scan(shown=0 if full else len(self.state.record))
        queue: deque[tuple[str, int]] = deque((f, f.count("/") + 1 if f else 0) for f in starts)
        processed: set[str] = set()
        while queue:
            relative, depth = queue.popleft()
            if relative in processed:
                continue
            processed.add(relative)
            for child in self._folder(relative, found):
                if depth + 1 > MAX_DEPTH:
                    found.too_deep.append(child)
                else:
                    queue.append((child, depth + 1))
        self._settle(full, processed)
        found.finish()
        return found

    def _settle(self, full: bool, processed: set[str]) -> None:
        """The new state: what this run saw, and what it did not look at kept as it was;
        what is neither is gone from the layer."""
        gone_folders = {k for k in self.before if k.endswith("/")}
        kept: dict[str, Identity] = {}
        for key, identity in self.state.record.items():
            if key in self.linked or full or _parent(key) in processed:
                continue
            parts = key.rstrip("/").split("/")
            if any("/".join(parts[:n]) + "/" in gone_folders for n in range(1, len(parts))):
                continue
            kept[key] = identity
        gone = {
            k: v for k, v in self.state.record.items() if k not in kept and k not in self.linked
        }
        self._remove_gone(gone)
        record = {**kept, **self.linked}
        state = self.state
        state.shared = {
            **{k: v for k, v in state.shared.items() if k in kept},
            **self.shared,
        }
        state.watched = {
            **{
                k: v
                for k, v in state.watched.items()
                if k in self.keep and (not k or f"{k}/" in record)
            },
            **self.watched,
        }
        state.record = record

    def _folder(self, relative: str, found: Scan) -> list[str]:
        """Bring one folder up to date; the subfolders to look at next."""
        for key in self._children.get(relative, ()):
            self.before[key] = self.state.record[key]
        try:
            real = open_beneath(self.real, relative)
        except OSError as exc:
            if vanished(exc):
                return []
            raise
        with closing(real):
            st = os.fstat(real)
            try:
                layer = open_beneath(self.layer, relative)
            except OSError as exc:
                if vanished(exc):  # the guest replaced it by a link or a file since
                    return []
                raise
            self.watched[relative] = (st.st_mtime_ns, _identity(st))
            with closing(layer):
                return self._entries(real, layer, relative, found)

    def _entries(self, real: int, layer: int, relative: str, found: Scan) -> list[str]:
        folders: list[str] = []
        for name, st in scan(real):
            child = f"{relative}/{name}" if relative else name
            if _hidden(name):
                continue
            if not _utf8(name):
                found.not_utf8.append(child)
                continue
            # A refresh counts only what is new: the rest was counted when it was shown.
            new = self.full or (child not in self.before and f"{child}/" not in self.before)
            if new and found.shown >= MAX_ENTRIES:
                found.leave_out(child)
                continue
            if stat.S_ISDIR(st.st_mode):
                if name in TOOL_FOLDERS or _identity(st) in self.excluded or _is_venv(real, name):
                    continue
                found.shown += new
                if self._show_folder(layer, name, child, st) and not self._kept(child, st):
                    folders.append(child)
            elif stat.S_ISREG(st.st_mode):
                found.shown += new
                shown = self._show_file(real, layer, name, child, st)
                if shown is None:
                    found.skipped += 1
                elif shown:
                    self.shared[child] = self._inode(child, st)
        return folders

    def _inode(self, key: str, st: os.stat_result) -> tuple[Identity, int]:
        """The file's identity and WASI inode, the last run's when it is the same file (the
        hash costs 50 us a file)."""
        known = self.state.shared.get(key)
        if known is None or known[0] != _identity(st):
            known = (_identity(st), wasi_inode(st))
        return known

    def _kept(self, child: str, st: os.stat_result) -> bool:
        """True when the folder `child` is watched, unchanged and the same folder: what it
        holds is kept as the last run left it."""
        seen = self.state.watched.get(child)
        return child in self.keep and seen is not None and seen[1] == _identity(st)

    def _show_file(
        self, real: int, layer: int, name: str, key: str, st: os.stat_result
    ) -> bool | None:
        """Link the user's file into the layer, unless the guest deleted it since the last
        start or has a file (or link) of its own by that name. True when the layer's entry is
        the user's file, False when it is not, None when it could not be linked."""
        previous = self.before.pop(key, None)
        current = lstat_at(layer, name)
        if current is None and previous is not None:
            self.linked[key] = previous  # the guest deleted it: it stays deleted
            return False
        if current is not None and _identity(current) != _identity(st):
            if previous is None or _identity(current) != previous:
                if previous is not None:  # remembered: if the guest deletes its own, the
                    self.linked[key] = previous  # user's does not come back
                return False  # the guest's own file by that name: it wins
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=layer)  # the user replaced the file: link the new one
            current = None
        if current is None:
            try:
                if not link_opened(real, name, st, layer, name):
                    return False  # it changed or vanished since it was listed
            except FileExistsError:
                return False
            except OSError:
                return None
        self.linked[key] = _identity(st)
        return True

    def _show_folder(self, layer: int, name: str, key: str, st: os.stat_result) -> bool:
        """Make the folder in the layer, unless the guest removed it since the last start or
        put a file or link of its own by that name. True when it is to be looked into."""
        previous = self.before.pop(f"{key}/", None)
        current = lstat_at(layer, name)
        if current is None and previous is not None:
            self.linked[f"{key}/"] = previous  # the guest removed it: it stays removed
            return False
        if current is None:
            try:
                os.mkdir(name, dir_fd=layer)
            except FileExistsError:
                pass
            except OSError:
                return False
            current = lstat_at(layer, name)
        if current is None or not stat.S_ISDIR(current.st_mode):
            if previous is not None:
                self.linked[f"{key}/"] = previous
            return False  # the guest's own file or link by that name: it wins
        self.linked[f"{key}/"] = _identity(st)
        return True

    def _remove_gone(self, gone: dict[str, Identity]) -> None:
        """Remove from the layer what is no longer shown: a link that is still the user's
        file, a folder the guest left empty (the deepest first)."""
        for key in sorted(gone, key=len, reverse=True):
            relative = key.rstrip("/")
            parent, _, name = relative.rpartition("/")
            with contextlib.suppress(OSError, ValueError):
                split(relative)
                with closing(open_beneath(self.layer, parent)) as folder:
                    if key.endswith("/"):
                        os.rmdir(name, dir_fd=folder)  # only if empty: the guest's stay
                        continue
                    current = lstat_at(folder, name)
                    if current is not None and _identity(current) == gone[key]:
                        os.unlink(name, dir_fd=folder)


def _is_venv(real: int, name: str) -> bool:
    """True when the folder `name` holds a pyvenv.cfg (a virtual environment)."""
    try:
        with closing(open_dir(real, name)) as folder:
            found = lstat_at(folder, "pyvenv.cfg")
    except OSError:
        return False
    return found is not None and stat.S_ISREG(found.st_mode)


def read_record(state: int) -> dict[str, Identity]:
    """What the last start linked: {relative path: (device, inode)}, a folder's path ending
    in "/". Entries that are not plain relative paths are dropped (the file is the host's,
    but a cloned folder could carry one)."""
    try:
        fd = os.open("state.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=state)
        with os.fdopen(fd) as handle:
            raw = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    record: dict[str, Identity] = {}
    for key, value in raw.items():
        try:
            split(str(key).removesuffix("/"))
        except ValueError:
            continue
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
            record[str(key)] = (value[0], value[1])
    return record


def write_record(state: int, linked: dict[str, Identity]) -> None:
    """Replace the record in the folder `state` (a descriptor) with `linked`."""
    temporary = f".state.{secrets.token_hex(6)}.json"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600, dir_fd=state)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps({k: list(v) for k, v in linked.items()}, separators=(",", ":")))
    os.replace(temporary, "state.json", src_dir_fd=state, dst_dir_fd=state)
