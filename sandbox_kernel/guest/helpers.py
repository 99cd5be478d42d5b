"""What cells call besides the door's helpers: chunk_text, and the haystacks search_context
looks through.

Runs INSIDE the sandbox (module sandbox_kernel_helpers, loaded before the driver).

Must import only the standard library; never imports sandbox_kernel.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["chunk_text", "haystacks", "need_int", "need_str"]


def chunk_text(text: str, size: int = 4000, overlap: int = 200) -> list[str]:
    """Cut `text` into windows of `size` characters, each sharing `overlap` with the previous.

    Chunk i starts at i * (size - overlap); the last one may be shorter and ends the text.
    """
    need_str("chunk_text", "text", text)
    need_int("chunk_text", "size", size)
    need_int("chunk_text", "overlap", overlap)
    if size <= 0:
        raise ValueError(f"chunk_text() size must be > 0, not {size}")
    if not 0 <= overlap < size:
        raise ValueError(
            f"chunk_text() needs 0 <= overlap < size, got overlap={overlap}, size={size}"
        )
    chunks = []
    for start in range(0, len(text), size - overlap):
        chunks.append(text[start : start + size])
        if start + size >= len(text):
            break
    return chunks


def haystacks(source: Any) -> list[tuple[int | None, str]]:
    if isinstance(source, str):
        return [(None, source)]
    if isinstance(source, list) and all(isinstance(item, str) for item in source):
        return list(enumerate(source))
    if isinstance(source, bytes | bytearray):
        return [(None, source.decode("utf-8", "replace"))]
    return [(None, json.dumps(source, ensure_ascii=False, default=str))]


def need_str(function: str, name: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{function}() {name} must be a str, not {type(value).__name__}")


def need_int(function: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{function}() {name} must be an int, not {type(value).__name__}")
