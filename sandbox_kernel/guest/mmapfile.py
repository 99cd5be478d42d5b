"""`mmap.mmap` for the guest, which has none: the mapped part of a file read into memory.

Runs INSIDE the sandbox's CPython as the module "sandbox_kernel_mmap"; the driver installs it
(`patch`) once `mmap` is imported. WASI has no mmap: the image's `mmap.mmap` raises "mmap is
unavailable on wasm32-wasi", so `np.memmap` (and everything over it: `np.load(mmap_mode=...)`,
joblib, pandas' memory_map) failed. Here a map is the file's bytes in the guest's memory:

- a `bytearray` holding the mapped bytes (read once: a map of 300 MB costs 300 MB);
- read-only (ACCESS_READ, or no PROT_WRITE): assignment raises as on a real read-only map,
  and np.memmap's arrays over it are made read-only (`patch_memmap`);
- writable and shared (ACCESS_WRITE, or MAP_SHARED with PROT_WRITE: `np.memmap(mode="w+" |
  "r+")`): changes reach the file at flush(), close() and when the map is collected; a
  private map (ACCESS_COPY) never writes back.

What differs from a real map: the mapped bytes count against the sandbox's memory, and a
change reaches the file at flush, not at once (no other process reads it meanwhile). The
file's size bounds a map, as in CPython; writing past it is an error. Works under host
CPython too (tests run it there against the real module).

Must import only the standard library.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

__all__ = ["FileMap", "patch", "patch_memmap", "read_only_new"]

ACCESS_DEFAULT, ACCESS_READ, ACCESS_WRITE, ACCESS_COPY = 0, 1, 2, 3
MAP_SHARED, MAP_PRIVATE = 1, 2
PROT_READ, PROT_WRITE = 1, 2
_CHUNK = 1 << 24
_dup = os.dup  # raises on WASI (tests replace it to take the guest's path on the host)


def patch(module: Any) -> None:
    """Give `module` (the image's mmap) a working `mmap` class where the platform has none."""
    if sys.platform == "wasi" and getattr(module.mmap, "__module__", "") != __name__:
        module.mmap = FileMap
        for name in ("ACCESS_DEFAULT", "ACCESS_READ", "ACCESS_WRITE", "ACCESS_COPY"):
            setattr(module, name, globals()[name])
        for name in ("MAP_SHARED", "MAP_PRIVATE", "PROT_READ", "PROT_WRITE"):
            if not hasattr(module, name):
                setattr(module, name, globals()[name])


class FileMap:
    """`mmap.mmap(fileno, length, flags=MAP_SHARED, prot=..., access=..., offset=0)`: a
    read-only map is a `bytes`, a writable one a `bytearray` (both are FileMaps)."""

    _fd = -1  # where changes are written back (a writable shared map's only)
    _owned = False  # _fd is this map's own, closed with it
    _offset = 0
    _write_back = False
    _position = 0
    closed = False

    def __new__(
        cls,
        fileno: int,
        length: int,
        flags: int = MAP_SHARED,
        prot: int = PROT_READ | PROT_WRITE,
        access: int = ACCESS_DEFAULT,
        offset: int = 0,
        **_: Any,
    ) -> Any:
        if access not in (ACCESS_DEFAULT, ACCESS_READ, ACCESS_WRITE, ACCESS_COPY):
            raise ValueError("mmap invalid access parameter.")
        if access != ACCESS_DEFAULT and (flags != MAP_SHARED or prot != PROT_READ | PROT_WRITE):
            raise ValueError("mmap can't specify both access and flags, prot.")
        if length < 0 or offset < 0:
            raise OverflowError("memory mapped length and offset must be positive")
        fd = fileno
        try:
            size = os.fstat(fd).st_size
            if length == 0:
                if offset >= size:
                    raise ValueError("mmap offset is greater than file size")
                length = size - offset
            elif offset + length > size:
                raise ValueError("mmap length is greater than file size")
            data = _read(fd, offset, length)
        except OSError as exc:
            raise OSError(exc.errno, f"the file cannot be mapped: {exc.strerror}") from None
        read_only = access == ACCESS_READ or (access == ACCESS_DEFAULT and not prot & PROT_WRITE)
        mapped: Any = bytearray.__new__(_Map)
        bytearray.__init__(mapped, data)  # the bytes once: no copy
        mapped._read_only = read_only
        mapped._offset = offset
        mapped._write_back = access == ACCESS_WRITE or (
            access == ACCESS_DEFAULT and flags & MAP_SHARED and bool(prot & PROT_WRITE)
        )
        if mapped._write_back:  # a descriptor of its own, which outlives the caller's file
            mapped._fd, mapped._owned = _own_descriptor(fileno, sys._getframe(1))
        return mapped

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Made by __new__ (bytes and bytearray must not see mmap's arguments)."""

    # -- the map's own methods ---------------------------------------------------------------

    def flush(self, offset: int = 0, size: int | None = None) -> None:
        self._check_open()
        if not self._write_back:
            return
        view = memoryview(self)
        end = len(view) if size is None else min(len(view), offset + size)
        written = offset
        while written < end:
            written += os.pwrite(self._fd, view[written : min(end, written + _CHUNK)],
                                 self._offset + written)  # fmt: skip

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self.closed = True
            if self._owned:
                os.close(self._fd)

    def __del__(self) -> None:
        if not self.closed:
            with contextlib.suppress(OSError, ValueError):
                self.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def size(self) -> int:
        self._check_open()
        return os.fstat(self._fd).st_size if self._fd >= 0 else self._offset + len(self)

    def tell(self) -> int:
        return self._position

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._position, 2: len(self)}[whence]
        if not 0 <= base + pos <= len(self):
            raise ValueError("seek out of range")
        self._position = base + pos
        return self._position

    def read(self, n: int | None = None) -> bytes:
        self._check_open()
        end = len(self) if n is None or n < 0 else min(len(self), self._position + n)
        data = bytes(self[self._position : end])
        self._position = end
        return data

    def readline(self) -> bytes:
        found = self.find(b"\n", self._position)
        return self.read(None if found < 0 else found + 1 - self._position)

    def madvise(self, *args: int) -> None:
        """Advice about pages this map does not have: taken, and nothing to do."""

    def resize(self, newsize: int) -> None:
        raise SystemError("mmap: resizing not available in the sandbox")

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("mmap closed or invalid")


class _Map(FileMap, bytearray):
    _read_only = False

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._read_only:
            raise TypeError("mmap can't modify a readonly memory map.")
        super().__setitem__(key, value)

    def write(self, data: bytes) -> int:
        self._check_open()
        end = self._position + len(data)
        if self._read_only:
            raise TypeError("mmap can't modify a readonly memory map.")
        if end > len(self):
            raise ValueError("data out of range")
        self[self._position : end] = data
        self._position = end
        return len(data)


def read_only_new(original: Any) -> Any:
    """np.memmap.__new__ whose arrays of a read-only map (mode "r") are read-only: numpy
    relies on the map's buffer for that, and this one's buffer is a bytearray's."""

    def __new__(cls: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
        array = original(cls, filename, *args, **kwargs)
        mode = kwargs.get("mode", args[1] if len(args) > 1 else "r+")
        if mode in ("r", "readonly"):
            array.flags.writeable = False
        return array

    return __new__


def patch_memmap(module: Any) -> None:
    """numpy's memmap module: read-only maps give read-only arrays (where mmap is ours)."""
    if sys.platform == "wasi":
        module.memmap.__new__ = staticmethod(read_only_new(module.memmap.__new__))


def _own_descriptor(fileno: int, frame: Any) -> tuple[int, bool]:
    """A descriptor of the map's own for the file open at `fileno`, and whether it is one.
    WASI has no dup(): the file is opened again by its name, found on the caller's file object
    (np.memmap's `fid`, which it closes once the map is made); else `fileno` itself is used,
    valid while the caller keeps its file open."""
    try:
        return _dup(fileno), True
    except OSError:
        pass
    for _ in range(3):
        if frame is None:
            break
        for value in frame.f_locals.values():
            name = getattr(value, "name", None)
            try:
                same = isinstance(name, str) and value.fileno() == fileno
            except (AttributeError, OSError, ValueError, TypeError):
                continue
            if same and os.path.samestat(os.fstat(fileno), os.stat(name)):
                return os.open(name, os.O_RDWR), True
        frame = frame.f_back
    return fileno, False


def _read(fd: int, offset: int, length: int) -> bytearray:
    data = bytearray(length)
    done = 0
    while done < length:
        chunk = os.pread(fd, min(_CHUNK, length - done), offset + done)
        if not chunk:
            raise ValueError("mmap length is greater than file size")
        data[done : done + len(chunk)] = chunk
        done += len(chunk)
    return data
