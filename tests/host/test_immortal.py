"""make_immortal (host/immortal.py) on a memory laid out as a 32-bit CPython's: it writes the
immortal count into each listed object, and writes nothing at all when the list or one of its
objects is not what it should be."""

from __future__ import annotations

import struct

import pytest

from sandbox_kernel.host.immortal import (
    IMMORTAL_REFCOUNT,
    STATIC_IMMORTAL_REFCOUNT,
    ImageLayoutError,
    make_immortal,
)

SIZE = 4096
TYPE = 0x100  # a type object's address, inside the memory
OBJECTS = (0x200, 0x210, 0x400)
LIST = 0x800


def memory(objects: tuple[int, ...] = OBJECTS, listed: tuple[int, ...] = OBJECTS) -> bytearray:
    data = bytearray(SIZE)
    for number, where in enumerate(objects, start=1):
        struct.pack_into("<II", data, where, number, TYPE)  # ob_refcnt, ob_type
    struct.pack_into(f"<{len(listed)}I", data, LIST, *listed)
    return data


def counts(data: bytearray, objects: tuple[int, ...] = OBJECTS) -> list[int]:
    return [struct.unpack_from("<I", data, where)[0] for where in objects]


def test_each_listed_object_gets_the_immortal_count() -> None:
    data = memory()
    assert make_immortal(memoryview(data), LIST, 3, STATIC_IMMORTAL_REFCOUNT) == 3
    assert counts(data) == [IMMORTAL_REFCOUNT] * 3
    assert struct.unpack_from("<I", data, OBJECTS[0] + 4)[0] == TYPE  # the type is kept


def test_an_unknown_layout_is_left_alone() -> None:
    data = memory()
    assert make_immortal(memoryview(data), LIST, 3, 1 << 30) == 0
    assert counts(data) == [1, 2, 3]


@pytest.mark.parametrize(
    ("address", "count"),
    [(SIZE - 4, 2), (LIST + 1, 3), (-4, 1), (LIST, -1), (LIST, 1 << 30)],
    ids=["past-the-end", "unaligned", "negative-address", "negative-count", "huge-count"],
)
def test_a_list_outside_the_memory_is_refused(address: int, count: int) -> None:
    data = memory()
    with pytest.raises(ImageLayoutError):
        make_immortal(memoryview(data), address, count, STATIC_IMMORTAL_REFCOUNT)
    assert counts(data) == [1, 2, 3]


@pytest.mark.parametrize(
    "bad",
    [SIZE - 4, 0x301, 0x600, 0x700],
    ids=["past-the-end", "unaligned", "no-count", "already-immortal"],
)
def test_one_bad_object_stops_every_write(bad: int) -> None:
    data = memory(listed=(*OBJECTS, bad))
    struct.pack_into("<II", data, 0x700, STATIC_IMMORTAL_REFCOUNT, TYPE)
    with pytest.raises(ImageLayoutError):
        make_immortal(memoryview(data), LIST, 4, STATIC_IMMORTAL_REFCOUNT)
    assert counts(data) == [1, 2, 3], "written before the bad object was found"


def test_a_type_pointer_outside_the_memory_is_refused() -> None:
    data = memory()
    struct.pack_into("<I", data, OBJECTS[1] + 4, SIZE + 16)
    with pytest.raises(ImageLayoutError):
        make_immortal(memoryview(data), LIST, 3, STATIC_IMMORTAL_REFCOUNT)
    assert counts(data) == [1, 2, 3]
