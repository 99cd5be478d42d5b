"""Make a warm image's objects immortal: their reference counts are never written again.

    make_immortal(memory, address, count, static)   write CPython's immortal count into the
                                                  objects listed at `address` (a part the
                                                  driver's list_image sent through the door,
                                                  while it waits); returns how many

Why: CPython 3.12 and later leave the count of an immortal object alone (PEP 683). A trivial
IPython cell increments and decrements the counts of a few thousand long-lived objects
(functions, modules, types, dicts), scattered over ~400 pages of the warm image; each of those
pages is then written, so the write watch reports it and the rollback image copies it after
every cell, and the kernel's copy-on-write mapping of the image loses it. Made immortal once,
when the warm image is made, they stay clean. This is what PEP 683 names as its use: a
pre-fork server's objects that should stay shared.

The layout is CPython's for 32-bit builds (wasm32): `ob_refcnt` is the object's first word, and
an object whose count is at least 2**30 is immortal; None's count (`static`, as the guest
reads it) is 7 << 28 in such a build. A build whose None says otherwise is left alone.

Every listed object is checked before anything is written: inside the memory, aligned, a
mortal count and a type pointer inside the memory. One that is not stops the whole write
(ImageLayoutError): the list or the layout is not what this code assumes.

Must not import: wasmtime, sandbox_kernel.repl, anything Jupyter.
"""

from __future__ import annotations

import sys

__all__ = ["IMMORTAL_REFCOUNT", "STATIC_IMMORTAL_REFCOUNT", "ImageLayoutError", "make_immortal"]

IMMORTAL_REFCOUNT = 5 << 28  # _Py_IMMORTAL_INITIAL_REFCNT, 32-bit builds
STATIC_IMMORTAL_REFCOUNT = 7 << 28  # _Py_STATIC_IMMORTAL_INITIAL_REFCNT: None's count
_IMMORTAL_MINIMUM = 1 << 30  # _Py_IMMORTAL_MINIMUM_REFCNT
_WORD = 4


class ImageLayoutError(ValueError):
    """The guest's list of objects does not fit the memory or the layout this module knows."""


def make_immortal(memory: memoryview, address: int, count: int, static: int) -> int:
    """Give each object listed in `memory` (the guest's linear memory, bytes) as `count`
    32-bit addresses at `address` the immortal count. Returns the objects written: 0 when the
    guest's build counts in a way this module does not know (`static`, None's count)."""
    if static != STATIC_IMMORTAL_REFCOUNT or sys.byteorder != "little":
        return 0
    size = len(memory) - len(memory) % _WORD
    end = address + count * _WORD
    if count < 0 or address < 0 or address % _WORD or end > size:
        raise ImageLayoutError(f"the list of {count} objects at {address:#x} is not in memory")
    words = memory[:size].cast("I")
    listed = words[address // _WORD : end // _WORD].tolist()
    for where in listed:
        if where % _WORD or where + 2 * _WORD > size:
            raise ImageLayoutError(f"an object at {where:#x} is not in memory")
        refcount, kind = words[where // _WORD], words[where // _WORD + 1]
        if not 0 < refcount < _IMMORTAL_MINIMUM or not 0 < kind < size:
            raise ImageLayoutError(f"no mortal object at {where:#x} ({refcount}, {kind:#x})")
    for where in listed:
        words[where // _WORD] = IMMORTAL_REFCOUNT
    return len(listed)
