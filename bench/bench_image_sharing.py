"""What a kernel's session makes its own of the shared warm image, cell by cell.

    .venv/bin/python bench/bench_image_sharing.py

A session with the kernel's settings (IPython, numpy and pandas in the warm image) starts from
the image and runs a few ordinary cells. After each, printed: the pages its rollback image
has patched (`ImageFile.changed`, what differs from the file) and the anonymous (private)
memory of the guest's memory mapping, from /proc/self/smaps. The baseline, in the same run, is
a session whose restore may not map the file (`ImageFile.map_over` refused: the image copied
in, as before issue 15), so each row shows what mapping the file saves.

Reaches into ReplSandbox's private session and image on purpose: the public API never exposes
them. Run the kernel once first (or `sandbox-kernel warm`), so the warm image exists.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox_kernel.host.memory_image import ImageFile
from sandbox_kernel.kernel.settings import KernelSettings
from sandbox_kernel.repl.sandbox import ReplSandbox

CELLS = (
    ("first cell", "x = 1"),
    ("second cell", "x = 2"),
    ("gc.collect()", "import gc; gc.collect()"),
    ("first error", "1 / 0"),
    ("second error", "1 / 0"),
    ("a pandas cell", "import pandas as pd\npd.DataFrame({'a': range(100)}).describe()"),
)


def anonymous_mib(start: int, length: int) -> float:
    """Private copies in the mappings over [start, start + length), the guest's memory (a file
    page only read is not one)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            low, high = (int(x, 16) for x in head.split("-"))
            inside = low < start + length and start < high
        elif inside and line.startswith("Anonymous:"):
            total += int(line.split()[1])
    return total / 1024


def rows(folder: Path) -> list[tuple[str, float, float]]:
    """(step, patched MiB, private MiB of the guest's memory) after the start and each cell."""
    config = KernelSettings.from_environment().repl_config()
    repl = ReplSandbox(config.model_copy(update={"workspace": folder}))
    started = time.perf_counter()
    repl.initialize()
    found: list[tuple[str, float, float]] = []

    def look(step: str) -> None:
        repl._join_capture()
        origin = repl._image.origin if repl._image is not None else None
        patched = sum(origin.changed) * 4096 / 2**20 if origin is not None else float("nan")
        session: Any = repl._session
        found.append((step, patched, anonymous_mib(session._base, session.memory_bytes())))

    look(f"start ({(time.perf_counter() - started) * 1000:.0f} ms)")
    for step, code in CELLS:
        repl.execute(code)
        look(step)
    repl.destroy()
    return found


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-sharing-") as temp:
        shared = rows(Path(temp))
        refuse = ImageFile.map_over
        ImageFile.map_over = lambda self, address: False  # type: ignore[method-assign]
        try:
            copied = rows(Path(temp))
        finally:
            ImageFile.map_over = refuse  # type: ignore[method-assign]
    print(f"{'after':<22}{'patched MiB':>12}{'private MiB':>13}{'copied in: private':>20}")
    for (step, patched, private), (_, _, before) in zip(shared, copied, strict=True):
        print(f"{step:<22}{patched:>12.1f}{private:>13.1f}{before:>20.1f}")
    print(f"start with the image copied in: {copied[0][0]}")
    print(
        "patched = pages the rollback image holds apart from the file (copied again by a "
        "rollback); private = the guest memory mapping's own pages; copied in = the same "
        "with the image copied into the memory instead of mapped"
    )


if __name__ == "__main__":
    main()
