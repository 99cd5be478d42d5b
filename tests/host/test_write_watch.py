"""The write watch on plain memory: what it reports, what it protects, what it refuses.

These run on any host; where Linux cannot watch writes (another OS, a kernel before 6.7, a
seccomp profile without userfaultfd) `WriteWatch.open` returns None and they are skipped, and
the sessions copy whole memories instead (tests/host/test_session_images.py covers both).
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Iterator

import pytest

from sandbox_kernel.host.write_watch import PAGE_SIZE, WriteWatch

PAGES = 64


class Area:
    """An anonymous mapping of PAGES pages and its write watch."""

    def __init__(self, touch: bool, regions: int = 4096) -> None:
        self.map = mmap.mmap(-1, PAGES * PAGE_SIZE)
        self.start = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        if touch:
            for page in range(PAGES):
                self.map[page * PAGE_SIZE] = 1
        watch = WriteWatch.open(self.start, PAGES * PAGE_SIZE, regions=regions)
        if watch is None:
            self.map.close()
            pytest.skip("this host cannot watch writes (userfaultfd async write-protect)")
        self.watch = watch

    def write(self, *pages: int) -> None:
        for page in pages:
            self.map[page * PAGE_SIZE + 7] = 0x5A

    def written(self, protect: bool = True) -> list[int]:
        """Written page numbers, one per page."""
        return [
            page
            for offset, length in self.watch.written(protect=protect)
            for page in range(offset // PAGE_SIZE, (offset + length) // PAGE_SIZE)
        ]

    def close(self) -> None:
        self.watch.close()
        self.map.close()


@pytest.fixture(params=[True, False], ids=["populated", "never-touched"])
def area(request: pytest.FixtureRequest) -> Iterator[Area]:
    made = Area(touch=request.param)
    yield made
    made.close()


def test_nothing_is_written_right_after_open(area: Area) -> None:
    assert area.written() == []


def test_writes_are_reported_once_and_protected_again(area: Area) -> None:
    area.write(3, 4, 10, PAGES - 1)
    assert area.written() == [3, 4, 10, PAGES - 1]
    assert area.written() == []
    area.write(4)
    assert area.written() == [4]


def test_runs_of_pages_come_merged(area: Area) -> None:
    area.write(*range(20, 30))
    assert area.watch.written() == [(20 * PAGE_SIZE, 10 * PAGE_SIZE)]


def test_pages_left_writable_are_reported_until_protected(area: Area) -> None:
    area.write(5)
    assert area.written(protect=False) == [5]
    assert area.written(protect=False) == [5]  # still writable: reported again
    area.write(6)
    assert area.written() == [5, 6]
    assert area.written() == []


def test_writes_by_the_kernel_are_reported(area: Area) -> None:
    """A read(2) into the range (wasmtime's fd_read writes guest memory this way)."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"from the kernel")
        view = memoryview(area.map)
        os.readv(read_end, [view[40 * PAGE_SIZE + 100 : 40 * PAGE_SIZE + 115]])
        view.release()
    finally:
        os.close(read_end)
        os.close(write_end)
    assert area.written() == [40]
    assert area.map[40 * PAGE_SIZE + 100 : 40 * PAGE_SIZE + 115] == b"from the kernel"


def test_more_runs_than_the_answer_buffer_holds() -> None:
    area = Area(touch=True, regions=3)
    try:
        every_other = list(range(0, PAGES, 2))
        area.write(*every_other)
        assert area.written() == every_other
    finally:
        area.close()


def test_the_end_may_stop_short_of_the_range(area: Area) -> None:
    area.write(2, 50)
    assert area.watch.written(area.start + 10 * PAGE_SIZE) == [(2 * PAGE_SIZE, PAGE_SIZE)]
    assert area.written() == [50]


@pytest.mark.parametrize(
    ("start", "length"),
    [(1, PAGE_SIZE), (0, 0), (0, PAGE_SIZE + 1), (0, -PAGE_SIZE)],
    ids=["unaligned-start", "empty", "unaligned-length", "negative"],
)
def test_a_range_that_is_not_whole_pages_is_refused(start: int, length: int) -> None:
    with pytest.raises(ValueError, match="page-aligned"):
        WriteWatch.open(start, length)


def test_an_end_outside_the_range_is_refused(area: Area) -> None:
    with pytest.raises(ValueError, match="outside"):
        area.watch.written(area.start + (PAGES + 1) * PAGE_SIZE)
    with pytest.raises(ValueError, match="outside"):
        area.watch.written(area.start - PAGE_SIZE)


def test_a_closed_watch_says_so(area: Area) -> None:
    area.watch.close()
    with pytest.raises(OSError, match="closed"):
        area.watch.written()
    area.watch.close()  # twice is harmless


def test_a_range_already_watched_cannot_be_watched_twice(area: Area) -> None:
    """userfaultfd refuses a second registration (EBUSY): open says None, no exception."""
    assert WriteWatch.open(area.start, PAGES * PAGE_SIZE) is None
    area.write(1)
    assert area.written() == [1]  # the first watch is unaffected
