"""The inode number wasmtime's WASI reports for a host file: the SipHash-1-3 (keys 0, 0) of its
device and inode numbers, so the host can tell which of its files the guest names
(overlay.py's guard).

Must not import: anything of sandbox_kernel (the standard library only).
"""

from __future__ import annotations

import os
import struct

__all__ = ["wasi_inode"]

_MASK = 0xFFFFFFFFFFFFFFFF


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
