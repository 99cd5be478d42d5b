"""The notebook's folder as a copy-on-write overlay: the guest reads every file there and may
write, rename and delete, while the user's own files are never changed.

The guest's working folder (/notebook) is a layer folder beside the user's files:

    <notebook folder>/.sandbox-kernel/layer/      what the guest sees and changes
    <notebook folder>/.sandbox-kernel/state.json  what the host linked (the guest cannot see it)

At each session start `prepare_overlay` fills the layer with hard links to the folder's
files (no copy, no space): a read reads the user's file as it is now. A link shares its file
with the user's, so before the guest may change one (an open for writing or truncation, or
new timestamps), the guard's shadow calls `Overlay.before_write`, which replaces the link
with a private copy first (copy-up); the write then lands in the copy. Renames and deletes
change the layer's names only. A file the guest wrote, renamed or deleted stays that way at
the next start (state.json remembers what was linked); a file the user changed by replacing
it is linked again, one the user deleted goes from the layer too. Folders are made in the
layer, empty ones included (a notebook writes into its `output/`); one the guest removed stays
removed, one the user removed goes when the guest left nothing in it.

Never shown: names starting with "." (hidden files and folders: .git, .env, .ssh, .aws, the
layer itself), known secret files (SECRET_NAMES: SSH and TLS keys, cloud credentials, key
stores), tool folders that are not the notebook's data (a virtual environment, which holds a
pyvenv.cfg; __pycache__; node_modules), links, FIFOs, sockets and devices, and beyond
MAX_ENTRIES files. A folder that is
the home folder, or holds it, is refused whole (OverlayRefused).

How the guard knows a shared file: wasmtime's WASI reports as a file's inode the SipHash-1-3
(keys 0, 0) of its host device and inode numbers (`wasi_inode`), so the set of the linked
files' WASI inodes identifies them exactly, whatever name or folder the guest reaches them by.
A shared file the guard cannot find on the host by the guest's path (a folder renamed after
it was opened) is refused, never written.

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final

from sandbox_kernel.core.errors import SandboxError
from sandbox_kernel.core.notebook_folder import STATE_FOLDER, layer_of
from sandbox_kernel.host import wasi_quota
from sandbox_kernel.host.run_guard import EACCES, REGULAR_FILE, FileStat, RunGuard

__all__ = [
    "MAX_ENTRIES",
    "SECRET_NAMES",
    "STATE_FOLDER",
    "Overlay",
    "OverlayRefused",
    "prepare_overlay",
    "wasi_inode",
]

MAX_ENTRIES: Final = 20_000  # files and folders shown; a bigger tree shows its first ones
# Names never shown, whatever folder they are in (case-insensitive, whole name).
SECRET_NAMES: Final = re.compile(
    r"(id_(rsa|dsa|ecdsa|ed25519)(_sk)?(\.pub)?|.*\.(pem|key|p12|pfx|jks|keystore|kdbx|ovpn"
    r"|gpg|asc)|credentials(\.json|\.csv)?|client_secret.*\.json|service[-_]account.*\.json"
    r"|token\.json|secrets?\.(toml|ya?ml|json)|htpasswd|netrc|_netrc|known_hosts"
    r"|authorized_keys)",
    re.IGNORECASE,
)
# Folders of tools, not data: never shown (a virtual environment is found by its pyvenv.cfg).
TOOL_FOLDERS: Final = frozenset({"__pycache__", "node_modules"})
EINTR, EFBIG = 27, 22  # WASI preview1 errno values
_CHUNK = 1 << 20
_MASK = 0xFFFFFFFFFFFFFFFF


class OverlayRefused(SandboxError):
    """The notebook's folder cannot be shown as an overlay (the reason says why)."""

    def __init__(self, message: str, *, never_shown: bool = False) -> None:
        super().__init__(message)
        self.never_shown = never_shown  # True: not even read-only (the home folder)


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def _siphash13(data: bytes) -> int:
    """SipHash-1-3 with keys 0 and 0: Rust's DefaultHasher::new(), which wasmtime's WASI uses
    for a file's inode."""
    v0, v1, v2, v3 = 0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573

    def rounds(count: int) -> None:
        nonlocal v0, v1, v2, v3
        for _ in range(count):
            v0 = (v0 + v1) & _MASK
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & _MASK
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & _MASK
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & _MASK
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)

    end = len(data) - len(data) % 8
    for (word,) in struct.iter_unpack("<Q", data[:end]):
        v3 ^= word
        rounds(1)
        v0 ^= word
    last = (len(data) & 0xFF) << 56 | int.from_bytes(data[end:], "little")
    v3 ^= last
    rounds(1)
    v0 ^= last
    v2 ^= 0xFF
    rounds(3)
    return v0 ^ v1 ^ v2 ^ v3


def wasi_inode(st: os.stat_result) -> int:
    """The inode wasmtime's WASI reports for the host file whose stat is `st`."""
    return _siphash13(struct.pack("<QQ", st.st_dev & _MASK, st.st_ino & _MASK))


@dataclass
class Overlay:
    """A prepared layer: where it is, which of its files are the user's (by WASI inode), and
    what was left out."""

    layer: Path
    shared: frozenset[int]  # WASI inodes of the user's files linked into the layer
    notes: list[str] = field(default_factory=list)
    real: Path | None = None  # the user's folder
    exclude: tuple[Path, ...] = ()
    watched: dict[Path, int] = field(default_factory=dict)  # its folders' mtimes, when shown

    def refresh(self) -> bool:
        """Bring the layer up to date with the folder again if a folder of it changed since
        (a file added, removed or replaced: its folder's mtime moved), as at a start: the
        user's new files appear between two cells, as on ipykernel. Cheap when nothing
        changed (one stat a folder). True when it looked again. Only between turns."""
        if self.real is None or not self._changed():
            return False
        fresh = prepare_overlay(self.real, self.exclude)
        self.shared, self.notes, self.watched = fresh.shared, fresh.notes, fresh.watched
        return True

    def _changed(self) -> bool:
        for folder, seen in self.watched.items():
            try:
                if os.stat(folder).st_mtime_ns != seen:
                    return True
            except OSError:
                return True
        return False

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
        host = self._find(guard, fd, path, found.inode)
        shown = path.decode(errors="replace")
        if host is None:
            detail = f"{shown!r} is a file of the notebook's folder reached by a moved path"
            return guard.refuse("fs_denied", detail, EACCES)
        return _copy_up(guard, host, truncate, shown)

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

    def _find(self, guard: RunGuard, fd: int, path: bytes, inode: int) -> Path | None:
        """The host path of the file the guest names, if it is the file with `inode` and lies
        in one of the session's writable folders; None otherwise."""
        parts: list[bytes] = [path]
        seen = 0
        while fd not in guard.preopen_roots:
            opened = guard.files.get(fd)
            if opened is None or seen > 64:
                return None
            parts.append(opened.path)
            fd, seen = opened.dirfd, seen + 1
        root = guard.preopen_roots[fd]
        relative = PurePosixPath(*(p.decode("utf-8", "surrogateescape") for p in reversed(parts)))
        host = Path(os.path.realpath(root / relative))
        if not host.is_relative_to(root):
            return None
        try:
            st = os.lstat(host)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or wasi_inode(st) != inode:
            return None
        return host


def _copy_up(guard: RunGuard, host: Path, truncate: bool, shown: str) -> int:
    """Replace the link at `host` with a private copy of its file (empty when the open will
    truncate it anyway), bounded by the file cap, the quota and the turn's deadline."""
    st = host.stat()
    size = 0 if truncate else st.st_size
    if size > guard.limits.max_file_bytes:
        detail = f"{shown!r}: a copy of {size:,} bytes is over the file cap"
        return guard.refuse("file_size", detail, EFBIG)
    refused = wasi_quota.charge(guard, size)
    if refused is not None:
        return refused
    temporary = host.with_name(f".{host.name}.{secrets.token_hex(6)}.copy")
    mode = st.st_mode & 0o7777
    try:
        with contextlib.ExitStack() as stack:
            out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            stack.callback(os.close, out)
            if not truncate:
                source = os.open(host, os.O_RDONLY | os.O_NOFOLLOW)
                stack.callback(os.close, source)
                while chunk := os.read(source, _CHUNK):
                    if guard.stopped():
                        raise InterruptedError
                    os.write(out, chunk)
        os.replace(temporary, host)
    except InterruptedError:
        temporary.unlink(missing_ok=True)
        return EINTR
    except OSError:
        temporary.unlink(missing_ok=True)
        return guard.refuse("fs_denied", f"{shown!r} could not be copied", EACCES)
    return 0


# -- preparing the layer ---------------------------------------------------------------------


def prepare_overlay(real: Path, exclude: tuple[Path, ...] = ()) -> Overlay:
    """The layer for the folder `real`, brought up to date with it (see the module's text);
    folders in `exclude` (the session's workspace, when it lies inside) are not shown.
    OverlayRefused when the folder may not be shown this way."""
    real = real.expanduser().resolve()
    home = Path.home().resolve()
    if real == Path("/") or home.is_relative_to(real):
        raise OverlayRefused(
            f"{real} is your home folder or holds it, which is never shown whole: put the "
            "notebook in a folder of its own",
            never_shown=True,
        )
    state = _private_folder(real / STATE_FOLDER)
    layer = _private_folder(layer_of(real))
    record_path = state / "state.json"
    sync = _Sync(real, layer, _read_record(record_path))
    overlay = Overlay(layer, frozenset())
    shared: set[int] = set()
    skipped = 0
    left_out = {
        str(p.resolve().relative_to(real)) for p in exclude if p.resolve().is_relative_to(real)
    }
    overlay.real, overlay.exclude = real, exclude
    overlay.watched[real] = os.stat(real).st_mtime_ns
    for relative, st in _shown_files(real, overlay.notes, left_out):
        if stat.S_ISDIR(st.st_mode):  # an empty folder is shown too (`output/`, to write in)
            overlay.watched[real / relative] = st.st_mtime_ns
            skipped += not sync.show_folder(relative, st)
        elif not sync.show_file(relative, st):
            skipped += 1
        elif sync.linked.get(relative) == (st.st_dev, st.st_ino):
            shared.add(wasi_inode(st))
    sync.remove_gone()
    if skipped:
        overlay.notes.append(
            f"{skipped} files could not be linked (another file system, or not yours)"
        )
    _write_record(record_path, sync.linked)
    overlay.shared = frozenset(shared)
    return overlay


@dataclass
class _Sync:
    """One bringing-up-to-date of the layer: what the last start linked (`before`, taken off
    as the folder's entries are seen; what is left there is gone from the folder) and what
    this one links (`linked`, the new record; a folder's key ends in "/")."""

    real: Path
    layer: Path
    before: dict[str, tuple[int, int]]
    linked: dict[str, tuple[int, int]] = field(default_factory=dict)

    def _seen(
        self, key: str, relative: str
    ) -> tuple[tuple[int, int] | None, os.stat_result | None]:
        """(what the last start recorded for `key`, what the layer holds at `relative`)."""
        previous = self.before.pop(key, None)
        try:
            return previous, os.lstat(self.layer / relative)
        except FileNotFoundError:
            return previous, None

    def show_file(self, relative: str, st: os.stat_result) -> bool:
        """Link the user's file into the layer, unless the guest deleted it since the last
        start or has a file of its own by that name; False when it cannot be linked."""
        previous, current = self._seen(relative, relative)
        target = self.layer / relative
        if current is None and previous is not None:
            self.linked[relative] = previous  # the guest deleted it: it stays deleted
            return True
        if current is not None and (current.st_dev, current.st_ino) != (st.st_dev, st.st_ino):
            if previous is None or (current.st_dev, current.st_ino) != previous:
                return True  # the guest's own file by that name: it wins
            target.unlink()  # the user replaced the file: link the new one
        if current is None or not os.path.samestat(current, st):
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(self.real / relative, target, follow_symlinks=False)
            except OSError:
                return False
        self.linked[relative] = (st.st_dev, st.st_ino)
        return True

    def show_folder(self, relative: str, st: os.stat_result) -> bool:
        """Make the folder in the layer, unless the guest removed it since the last start or
        put a file of its own by that name; False when it cannot be made."""
        key = f"{relative}/"
        previous, current = self._seen(key, relative)
        if current is None and previous is not None:
            self.linked[key] = previous  # the guest removed it: it stays removed
            return True
        if current is None:
            try:
                (self.layer / relative).mkdir(parents=True)
            except OSError:
                return False
        elif not stat.S_ISDIR(current.st_mode):
            return True  # the guest's own file by that name: it wins
        self.linked[key] = (st.st_dev, st.st_ino)
        return True

    def remove_gone(self) -> None:
        """Remove from the layer what the user removed from the folder: a link that is still
        the user's file, a folder the guest left empty (the deepest first)."""
        for relative in sorted(self.before, key=len, reverse=True):
            target = self.layer / relative
            with contextlib.suppress(OSError):
                if relative.endswith("/"):
                    target.rmdir()  # only if empty: what the guest put there stays
                    continue
                current = os.lstat(target)
                if (current.st_dev, current.st_ino) == self.before[relative]:
                    target.unlink()


def _private_folder(folder: Path) -> Path:
    """`folder`, made 0700 if new; refused if it is a link or another user's."""
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(folder)
    except OSError as exc:
        raise OverlayRefused(f"cannot make {folder}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OverlayRefused(f"{folder} is not a folder of yours (a link, or another user's)")
    return folder


def _shown_files(
    real: Path, notes: list[str], left_out: set[str]
) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, stat) of every file and folder the guest may see, a folder before what
    it holds; folders whose relative path is in `left_out` are skipped whole."""
    count = 0
    stack = [""]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(real / folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(".") or SECRET_NAMES.fullmatch(entry.name):
                continue
            if count >= MAX_ENTRIES:
                notes.append(f"the folder has over {MAX_ENTRIES:,} entries: only the first shown")
                return
            relative = f"{folder}/{entry.name}" if folder else entry.name
            if relative in left_out:
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name in TOOL_FOLDERS or os.path.isfile(Path(entry.path, "pyvenv.cfg")):
                    continue
                count += 1
                stack.append(relative)
                yield relative, entry.stat(follow_symlinks=False)
            elif entry.is_file(follow_symlinks=False):
                count += 1
                yield relative, entry.stat(follow_symlinks=False)


def _read_record(path: Path) -> dict[str, tuple[int, int]]:
    """What the last start linked: {relative path: (device, inode)}, a folder's path ending
    in "/". Entries that are not
    plain relative paths are dropped (the file is the host's, but a cloned folder could
    carry one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as handle:
            raw = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    record: dict[str, tuple[int, int]] = {}
    for key, value in raw.items():
        parts = PurePosixPath(str(key)).parts
        if not parts or PurePosixPath(key).is_absolute() or ".." in parts:
            continue
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
            record[str(key)] = (value[0], value[1])
    return record


def _write_record(path: Path, linked: dict[str, tuple[int, int]]) -> None:
    temporary = path.with_name(f".state.{secrets.token_hex(6)}.json")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({k: list(v) for k, v in linked.items()}, handle)
    os.replace(temporary, path)
