"""The guest's linear memory at a moment it was idle (`MemoryImage`), the file a warm image's
buffer maps (`ImageFile`), and the copies between an image and a live memory that write only
the pages that differ.

A rollback restores an image into a fresh instance (session.py); a warm image is a file that
every kernel maps copy-on-write, so a page becomes a kernel's own only when its cells write it.

Why a memory image is enough to roll back: between turns the guest's C stack is empty, so its
mutable globals (the stack pointer) hold their initial values, and all interpreter state is in
linear memory. WASI state (open descriptors) lives in the host: an image keeps the open-file
table and a restore opens those files again (descriptors.py); files written under /app stay.

Must not import: sandbox_kernel.repl, runtimes, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import os
import re
import sys
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sandbox_kernel.host.descriptors import SavedFile
from sandbox_kernel.host.write_watch import PAGE_SIZE

__all__ = [
    "ImageFile",
    "MemoryImage",
    "address_of",
    "copy_changed",
    "image_buffer",
    "memory_view",
]

_MARKED_RUNS = 1 << 16  # runs ImageFile.mark remembers as marked, at most
_MAP_FIXED = 0x10  # <sys/mman.h> on Linux; the mmap module does not export it
_MAP_NORESERVE = 0x4000 if sys.platform == "linux" else 0  # exported from Python 3.13 only
_PAGE_SHIFT = PAGE_SIZE.bit_length() - 1


class ImageFile:
    """The file an image's buffer is a copy-on-write mapping of, held open (so a restore maps
    the very bytes the loader checked), and which of the buffer's pages may differ from the
    file since: the ones captures patched.

    What it is for: a restore maps the file over the new instance's memory copy-on-write, as
    wasmtime maps a module's initial memory, and copies only the patched pages. Every kernel
    started from the same warm image then shares its pages in the page cache, and a page
    becomes a kernel's own only when its cells write it."""

    def __init__(self, fd: int, size: int) -> None:
        self._closer = weakref.finalize(self, os.close, fd)
        if size % PAGE_SIZE:
            raise ValueError(f"an image of {size} bytes is not whole pages")
        self.fd = fd
        self.size = size
        self.changed = bytearray(size // PAGE_SIZE)  # nonzero: the buffer's page was patched
        self._marked: set[tuple[int, int]] = set()  # runs known to be in `changed` already

    def mark(self, runs: Sequence[tuple[int, int]]) -> None:
        """Note the runs (offset, length) patched into the buffer; what lies past the file (a
        grown memory) is not the file's, and always copied. A capture marks mostly the same few
        hundred runs after every cell (they stay writable until REPROTECT_BYTES), and a page
        once marked stays marked, so a run seen before costs one set lookup (a trivial IPython
        cell's runs: 0.28x of a search of the page map per run, bench/bench_cell_cost.py).
        The set is bounded: past `_MARKED_RUNS` it starts again (a run is then marked twice)."""
        changed, pages, known = self.changed, len(self.changed), self._marked
        for run in runs:
            if run in known:
                continue
            offset, length = run
            first, end = offset >> _PAGE_SHIFT, (offset + length + PAGE_SIZE - 1) >> _PAGE_SHIFT
            end = min(end, pages)
            changed[first:end] = b"\x01" * (end - first)
            known.add(run)
        if len(known) > _MARKED_RUNS:
            known.clear()

    def changed_runs(self) -> Iterator[tuple[int, int]]:
        """The patched pages as runs (offset, length), in order."""
        for run in re.finditer(b"\x01+", self.changed):
            yield run.start() * PAGE_SIZE, (run.end() - run.start()) * PAGE_SIZE

    def map_over(self, address: int) -> bool:
        """Replace the pages at [address, address + size) by a private (copy-on-write) mapping
        of the file. False where this host cannot (the caller copies instead)."""
        if sys.platform != "linux" or not hasattr(mmap, "MAP_PRIVATE"):
            return False
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        flags = mmap.MAP_PRIVATE | _MAP_FIXED
        return _mmap()(address, self.size, prot, flags, self.fd, 0) == address


@functools.cache
def _mmap() -> Callable[[int, int, int, int, int, int], int | None]:
    function = ctypes.CDLL(None, use_errno=True).mmap
    function.argtypes = (
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    )
    function.restype = ctypes.c_void_p
    return function


@dataclass(frozen=True)
class MemoryImage:
    """The guest's linear memory at a moment it was idle. `data` is read-only bytes (an image
    loaded as is) or a writable buffer from `image_buffer` that captures update in place;
    `origin`, when the buffer is a copy-on-write mapping of a file (a warm image), that file."""

    data: bytes | mmap.mmap
    flag_address: int | None  # the soft-interrupt flag byte, where the driver put it
    files: tuple[SavedFile, ...] = ()  # the guest's open files then (descriptors.py)
    origin: ImageFile | None = None
    # The memory's bytes: data's first `size`. A buffer from image_buffer may be longer, room
    # for the memory to grow into, and is zero past `size` (the captures keep it so).
    size: int = -1

    def __post_init__(self) -> None:
        if self.size < 0:
            object.__setattr__(self, "size", len(self.data))
        elif self.size > len(self.data):
            raise ValueError(f"an image of {self.size} bytes in a buffer of {len(self.data)}")

    @property
    def room(self) -> int:
        """How far the memory may grow and the image still be patched in place: the length of
        its writable buffer (a file's own mapping has none past the file)."""
        return len(self.data) if isinstance(self.data, mmap.mmap) else self.size

    def memory(self) -> memoryview:
        """The memory's bytes (a view of the buffer's first `size`)."""
        return memoryview(self.data)[: self.size]


def image_buffer(size: int, room: int = 0) -> mmap.mmap:
    """A writable buffer for a memory image: anonymous memory the kernel hands out zeroed and
    page by page, so nothing fills it under the GIL (a bytearray of 66 MB is set to zero while
    holding it, 30 ms that stalled every other thread of a starting kernel).

    `room`: its length when more than `size`, so that the memory can grow and its image stay
    the same buffer, patched with the pages written (a grown memory's new buffer had every
    page copied and faulted in again: 150 ms for a 300 MB memory after each cell that grew
    it). The room costs address space only (MAP_NORESERVE): no page exists until written. A
    host that will not reserve it (strict overcommit accounting, a small address-space limit)
    gets a buffer of `size`, as before: growth then copies into a new one."""
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    if not flags:
        return mmap.mmap(-1, size)
    if room > size:
        try:
            return mmap.mmap(-1, room, flags=flags | _MAP_NORESERVE)
        except (OSError, OverflowError):
            pass
    return mmap.mmap(-1, size, flags=flags)


@functools.cache
def _memcmp() -> Callable[[int, int, int], int]:
    function = ctypes.CDLL(None).memcmp
    function.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    function.restype = ctypes.c_int
    return function


def copy_changed(target: int, source: int, length: int) -> int:
    """Make `length` bytes at `target` equal to those at `source`, writing only the pages that
    differ (runs of them, one copy each); returns the bytes written. A fresh instance's memory
    maps the compiled module's initial image copy-on-write and grows with untouched zero
    pages: a page the image holds unchanged (a third of a kernel's warm image) stays shared
    with every other kernel, instead of becoming a private copy of the same bytes."""
    memcmp = _memcmp()
    run = -1  # where the current run of differing pages starts
    written = 0
    for page in range(0, length, PAGE_SIZE):
        differs = memcmp(target + page, source + page, min(PAGE_SIZE, length - page)) != 0
        if differs and run < 0:
            run = page
        elif not differs and run >= 0:
            ctypes.memmove(target + run, source + run, page - run)
            written += page - run
            run = -1
    if run >= 0:
        ctypes.memmove(target + run, source + run, length - run)
        written += length - run
    return written


@contextlib.contextmanager
def address_of(buffer: mmap.mmap) -> Iterator[int]:
    """The buffer's address for ctypes copies; the export is released on leaving, so the
    buffer may be closed or freed later."""
    view = (ctypes.c_char * len(buffer)).from_buffer(buffer)
    try:
        yield ctypes.addressof(view)
    finally:
        del view


@contextlib.contextmanager
def memory_view(address: int, size: int) -> Iterator[memoryview]:
    """The bytes at [address, address + size) (the guest's memory) as a memoryview, released
    on leaving."""
    with memoryview((ctypes.c_char * size).from_address(address)).cast("B") as view:
        yield view
