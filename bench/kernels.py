"""Pure-Python compute kernels, timed from inside whichever interpreter runs this file.

Run as a script it prints one JSON object: kernel name -> best-of-N seconds. The same file
runs under native CPython and inside the WebAssembly guest, so the two are compared on
identical code. Kept free of imports beyond the standard library.
"""

from __future__ import annotations

import json
import re
import time


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def recursion() -> None:
    fib(22)


def loops() -> None:
    total = 0
    for i in range(300_000):
        total += i * i % 7
    assert total > 0


def strings_regex() -> None:
    text = " ".join(f"user{i}@example{i % 13}.org visited /page/{i}" for i in range(5_000))
    emails = re.findall(r"[\w.]+@[\w.]+", text)
    words = text.upper().split()
    assert len(emails) == 5_000 and words


def json_roundtrip() -> None:
    data = [
        {"id": i, "name": f"item{i}", "tags": ["a", "b", str(i)], "v": i / 3} for i in range(3_000)
    ]
    for _ in range(3):
        assert json.loads(json.dumps(data)) == data


KERNELS = {
    "recursion": recursion,
    "loops": loops,
    "strings_regex": strings_regex,
    "json": json_roundtrip,
}


def main(repeats: int = 5) -> dict[str, float]:
    best: dict[str, float] = {}
    for name, kernel in KERNELS.items():
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            kernel()
            times.append(time.perf_counter() - start)
        best[name] = min(times)
    return best


if __name__ == "__main__":
    print(json.dumps(main()))
