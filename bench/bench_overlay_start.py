"""What the notebook folder's overlay costs at a kernel's start in a big folder (issue 47,
item 8): a folder of FOLDERS x FILES small files (50,000 by default), the layer made from
nothing (a first start), made again (a second start: every entry checked, none linked), and
refreshed between cells with nothing changed and with one file added; with what the layer
holds afterwards (links, and the size of its record, state.json).

Usage: .venv/bin/python bench/bench_overlay_start.py [FOLDERS [FILES]]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sandbox_kernel.host.overlay import prepare_overlay

ROUNDS = 3


def _folder(root: Path, folders: int, files: int) -> None:
    for index in range(folders):
        folder = root / f"part{index:04}"
        folder.mkdir(parents=True)
        for leaf in range(files):
            (folder / f"{leaf:04}.csv").write_bytes(b"x\n")


def _seconds(work: Callable[[], object], before: Callable[[], object] | None = None) -> float:
    times = []
    for _ in range(ROUNDS):
        if before is not None:
            before()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    folders = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    files = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    with tempfile.TemporaryDirectory(prefix="bench-overlay-") as top:
        root = Path(top) / "big"
        _folder(root, folders, files)
        state = root / ".sandbox-kernel"
        first = _seconds(
            lambda: prepare_overlay(root), lambda: shutil.rmtree(state, ignore_errors=True)
        )
        again = _seconds(lambda: prepare_overlay(root))
        overlay = prepare_overlay(root)
        unchanged = _seconds(overlay.refresh)
        added = iter(range(ROUNDS))
        one_more = _seconds(
            overlay.refresh, lambda: (root / f"added{next(added)}.csv").write_text("y\n")
        )
        links = sum(len(names) for _, _, names in os.walk(overlay.layer))
        record = (state / "state.json").stat().st_size
        print(f"folder: {folders * files:,} files in {folders:,} folders")
        print(f"first start (layer made):     {first * 1000:8.1f} ms")
        print(f"second start (layer checked): {again * 1000:8.1f} ms")
        print(f"refresh, nothing changed:     {unchanged * 1000:8.1f} ms")
        print(f"refresh, one file added:      {one_more * 1000:8.1f} ms")
        print(f"files linked: {links:,}; record: {record:,} bytes")
        for note in overlay.notes:
            print(f"note: {note}")


if __name__ == "__main__":
    main()
