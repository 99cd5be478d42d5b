"""Which pages of a memory range were written since the last look: a write watch.

    WriteWatch.open(start, length)   None when the host cannot watch writes
    .written(end, protect=True)      [(offset, length)] written in [start, end) since the range
                                     was last protected (by default, protected again)
    .close()

Linux (6.7 or later) tracks writes for us with two documented pieces
(Documentation/admin-guide/mm/pagemap.rst, "PAGEMAP_SCAN"): a userfaultfd registered for
write-protect with the UFFD_FEATURE_WP_ASYNC feature, so that a write to a protected page is
resolved by the kernel itself (it only clears the page's protection, no handler thread), and
the PAGEMAP_SCAN ioctl on /proc/self/pagemap, which lists the pages whose protection was
cleared and protects them again in the same walk. UFFD_FEATURE_WP_UNPOPULATED makes pages never
touched count too. Writes by the kernel on the process's behalf (a read(2) into the range) are
seen like the process's own. This is what CRIU and Wine's GetWriteWatch use.

The REPL uses it so that the rollback image after a cell copies the pages the cell wrote
(a few hundred kB) instead of the whole linear memory (tens of MB): see GuestSession.capture.

Where it is not available (another OS, an older kernel, a seccomp profile that refuses
userfaultfd), `open` returns None and the caller copies everything, as before.

Must not import: wasmtime, sandbox_kernel.repl, anything Jupyter.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import struct
import sys
import threading

__all__ = ["PAGE_SIZE", "WriteWatch"]

PAGE_SIZE = 4096

# <linux/userfaultfd.h>
_NR_USERFAULTFD = {"x86_64": 323, "aarch64": 282}
_UFFD_USER_MODE_ONLY = 1  # allowed without privileges; the kernel's own writes still count
_UFFD_API = 0xAA
_UFFD_FEATURE_WP_UNPOPULATED = 1 << 13
_UFFD_FEATURE_WP_ASYNC = 1 << 15
_UFFDIO_API = 0xC018AA3F  # _IOWR(0xAA, 0x3F, struct uffdio_api)
_UFFDIO_REGISTER = 0xC020AA00  # _IOWR(0xAA, 0x00, struct uffdio_register)
_UFFDIO_REGISTER_MODE_WP = 1 << 1

# <linux/fs.h>
_PAGEMAP_SCAN = 0xC0606610  # _IOWR('f', 16, struct pm_scan_arg)
_PM_SCAN_WP_MATCHING = 1 << 0
_PM_SCAN_CHECK_WPASYNC = 1 << 1
_PAGE_IS_WRITTEN = 1 << 1
_PM_SCAN_ARG = struct.Struct("=12Q")  # size, flags, start, end, walk_end, vec, vec_len,
# max_pages, category_inverted, category_mask, category_anyof_mask, return_mask
_REGION_WORDS = 3  # struct page_region: start, end, categories


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library's symbols, from the process itself (ctypes.util.find_library would run
    ldconfig in a subprocess at every session start)."""
    return ctypes.CDLL(None, use_errno=True)


class WriteWatch:
    """A write watch over one page-aligned range of this process's memory. One caller at a
    time (the lock only guards against a close during a scan)."""

    def __init__(self, start: int, length: int, uffd: int, pagemap: int, regions: int) -> None:
        self.start = start
        self.length = length
        self._uffd = uffd
        self._pagemap = pagemap
        self._regions = (ctypes.c_uint64 * (_REGION_WORDS * regions))()
        self._capacity = regions
        self._lock = threading.Lock()

    @classmethod
    def open(cls, start: int, length: int, *, regions: int = 4096) -> WriteWatch | None:
        """Watch [start, start + length) (page-aligned; every page of it mapped, accessible or
        not). None when this host cannot: the caller then copies whole ranges. Every page
        counts as written until the first `written()`."""
        if start % PAGE_SIZE or length <= 0 or length % PAGE_SIZE or regions <= 0:
            raise ValueError(f"not a page-aligned range: {start:#x} + {length:#x}")
        number = _NR_USERFAULTFD.get(os.uname().machine) if sys.platform == "linux" else None
        if number is None:
            return None
        flags = os.O_CLOEXEC | os.O_NONBLOCK | _UFFD_USER_MODE_ONLY
        uffd = int(_libc().syscall(number, flags))
        if uffd < 0:
            return None  # ENOSYS, EPERM (seccomp, vm.unprivileged_userfaultfd), ...
        pagemap = -1
        try:
            features = _UFFD_FEATURE_WP_ASYNC | _UFFD_FEATURE_WP_UNPOPULATED
            fcntl.ioctl(uffd, _UFFDIO_API, bytearray(struct.pack("=3Q", _UFFD_API, features, 0)))
            register = struct.pack("=4Q", start, length, _UFFDIO_REGISTER_MODE_WP, 0)
            fcntl.ioctl(uffd, _UFFDIO_REGISTER, bytearray(register))
            pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
            watch = cls(start, length, uffd, pagemap, regions)
            watch.written(start + length)  # protect the range: from now on writes are seen
        except OSError:  # EINVAL from a kernel without the features or the ioctl, ENOTTY...
            os.close(uffd)
            if pagemap >= 0:
                os.close(pagemap)
            return None
        return watch

    def written(self, end: int | None = None, *, protect: bool = True) -> list[tuple[int, int]]:
        """The written runs of pages in [start, end) as (offset from start, length), merged and
        in order. With `protect`, the same walk write-protects them again; without, they stay
        writable and are reported again by every later call until one protects them. Raises
        OSError when the kernel refuses (the caller must then assume everything was written)."""
        stop = self.start + self.length if end is None else end
        if not self.start <= stop <= self.start + self.length:
            raise ValueError(f"{stop:#x} is outside the watched range")
        runs: list[tuple[int, int]] = []
        regions = self._regions
        flags = _PM_SCAN_WP_MATCHING | _PM_SCAN_CHECK_WPASYNC if protect else 0
        with self._lock:
            if self._pagemap < 0:
                raise OSError("the write watch is closed")
            cursor = self.start
            while cursor < stop:
                arg = bytearray(
                    _PM_SCAN_ARG.pack(
                        _PM_SCAN_ARG.size,
                        flags,
                        cursor,
                        stop,
                        0,
                        ctypes.addressof(regions),
                        self._capacity,
                        0,
                        0,
                        _PAGE_IS_WRITTEN,
                        0,
                        _PAGE_IS_WRITTEN,
                    )
                )
                found = fcntl.ioctl(self._pagemap, _PAGEMAP_SCAN, arg)
                words = memoryview(regions).cast("B").cast("Q")[: _REGION_WORDS * found]
                starts, ends = words[0::_REGION_WORDS].tolist(), words[1::_REGION_WORDS].tolist()
                if runs and starts and runs[-1][0] + runs[-1][1] == starts[0] - self.start:
                    offset, _ = runs.pop()  # one run cut by the end of the last walk
                    starts[0] = offset + self.start
                runs += [(a - self.start, b - a) for a, b in zip(starts, ends, strict=True)]
                walk_end = _PM_SCAN_ARG.unpack(arg)[4]
                if walk_end <= cursor:  # no progress: never loop forever on a kernel quirk
                    raise OSError(f"PAGEMAP_SCAN stopped at {walk_end:#x}")
                cursor = walk_end
        return runs

    def close(self) -> None:
        with self._lock:
            for fd in (self._uffd, self._pagemap):
                if fd >= 0:
                    os.close(fd)
            self._uffd = self._pagemap = -1

    def __del__(self) -> None:
        if getattr(self, "_pagemap", -1) >= 0:
            self.close()
