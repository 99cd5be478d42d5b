"""What one run of the host's pip may hold, for `%pip install` (packages.py): the bytes it has
downloaded (measured while it runs, capped per file by RLIMIT_FSIZE), what it says on stderr
(kept to its first and last 64 KiB), and a downloaded wheel's hash (read in pieces). A hostile
or broken index decides how big a wheel and how long pip's words are; none of it is ever held
whole in the kernel's memory.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Final

__all__ = [
    "PipSaid",
    "bytes_in",
    "files_under",
    "limit_file_size",
    "remove",
    "sha256",
]

SAID_BYTES: Final = 64 * 1024  # of pip's stderr, kept from its start and from its end
_READER_JOIN_SECONDS: Final = 5.0  # pip has ended: its stderr is at its end at once


class PipSaid:
    """What pip writes to stderr, read on a thread as it comes and kept to its first and last
    SAID_BYTES: an index can make pip's words as long as its pages (every version it lists)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._head, self._tail = bytearray(), bytearray()
        self._reader = threading.Thread(
            target=self._read, args=(stream,), name="sandbox-kernel-pip-stderr", daemon=True
        )
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            for chunk in iter(lambda: os.read(stream.fileno(), SAID_BYTES), b""):
                room = SAID_BYTES - len(self._head)
                self._head += chunk[:room]
                self._tail += chunk[max(room, 0) :]
                del self._tail[:-SAID_BYTES]

    def text(self) -> str:
        """All that was kept, once pip has ended (its stderr is then at its end)."""
        self._reader.join(_READER_JOIN_SECONDS)
        cut = "\n[...]\n" if self._tail else ""
        return (bytes(self._head) + cut.encode() + bytes(self._tail)).decode(errors="replace")


def sha256(path: Path) -> str:
    """The file's SHA-256, read in pieces (a wheel may be up to the session's limit)."""
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def bytes_in(paths: Iterable[Path]) -> int:
    """The bytes of the regular files among `paths` (one that vanishes meanwhile counts 0)."""
    total = 0
    for path in paths:
        try:
            status = path.lstat()
        except OSError:
            continue
        if stat.S_ISREG(status.st_mode):
            total += status.st_size
    return total


def files_under(folder: Path) -> Iterator[Path]:
    """Every file beneath `folder`, as pip leaves it now: os.walk skips a folder pip removes
    while it is read (Path.rglob raises FileNotFoundError), and follows no link."""
    for parent, _, names in os.walk(folder):
        for name in names:
            yield Path(parent, name)


def remove(paths: Iterable[Path]) -> None:
    """What a refused pip run left in the wheel folder (pip writes only files there)."""
    for path in paths:
        path.unlink(missing_ok=True)


def limit_file_size(pid: int, max_bytes: int) -> None:
    """No file pip writes grows past `max_bytes` (its write fails with EFBIG). Set at once on
    the started process (pip imports for a few hundred ms before it opens a connection), as
    preexec_fn is unsafe in this threaded process; the folder's polling caps it regardless."""
    with contextlib.suppress(ProcessLookupError):
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
