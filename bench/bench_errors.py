"""A cell's error as clients feel it: sandbox-python against ipykernel, same run (the
`sandbox-baseline` kernel: ipykernel with the guest's numpy and pandas, bin/setup makes it).

    .venv/bin/python bench/bench_errors.py [BLOCKS] [ERRORS]

Both kernels format the error with IPython (Context mode, colours), the sandbox's inside
WebAssembly. Each block starts one kernel of each kind in turn (one up at a time), imports
pandas in a first cell, pauses, then times from execute_request to execute_reply:

    first error   the session's first error: a pandas KeyError, whose traceback runs through
                  pandas' Python and Cython frames
    KeyError      ERRORS more of the same (default 20), median
    1/0           ERRORS errors raised in the cell itself, median

Prints the medians over all blocks (default 3) and their ratio, sandbox over ipykernel.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from typing import Any

from bench_kernel import SETTLE_SECONDS, running
from record import Figure, Row, arguments, save

KEY_ERROR = "pd.DataFrame({'a': [1]})['b']"
DIVISION = "1 / 0"
KERNELS = ("sandbox-baseline", "sandbox-python")


def failing(client: Any, code: str, ename: str) -> float:
    began = time.perf_counter()
    reply = client.execute(code, reply=True, timeout=60)
    taken = time.perf_counter() - began
    assert reply["content"].get("ename") == ename, reply["content"]
    return taken


def main() -> int:
    args = arguments()
    blocks = int(args[0]) if len(args) > 0 else 3
    errors = int(args[1]) if len(args) > 1 else 20
    taken: dict[str, dict[str, list[float]]] = {
        name: {"first error": [], "KeyError": [], "1/0": []} for name in KERNELS
    }
    with tempfile.TemporaryDirectory(prefix="bench-errors-") as folder:
        for _ in range(blocks):
            for name in KERNELS:
                with running(name, folder) as (_, client, _, _):
                    imported = client.execute("import pandas as pd", reply=True, timeout=120)
                    assert imported["content"]["status"] == "ok", imported["content"]
                    time.sleep(SETTLE_SECONDS)
                    samples = taken[name]
                    samples["first error"].append(failing(client, KEY_ERROR, "KeyError"))
                    samples["KeyError"] += [
                        failing(client, KEY_ERROR, "KeyError") for _ in range(errors)
                    ]
                    samples["1/0"] += [
                        failing(client, DIVISION, "ZeroDivisionError") for _ in range(errors)
                    ]
    base, ours = taken["sandbox-baseline"], taken["sandbox-python"]
    print(f"{'median':<13}{'ipykernel':>12}{'sandbox':>12}{'ratio':>9}")
    rows = []
    for key in base:
        before, after = statistics.median(base[key]), statistics.median(ours[key])
        print(f"{key:<13}{before * 1e3:>10.1f}ms{after * 1e3:>10.1f}ms{after / before:>8.2f}x")
        rows.append(Row(label=key, baseline=before * 1e3, subject=after * 1e3))
    figure = Figure(
        title="A cell's error, to its reply",
        baseline="ipykernel",
        subject="sandbox-python",
        unit="ms",
        rows=rows,
        note=f"Medians; {blocks} blocks alternating the kernels, {errors} errors a kind a block.",
    )
    save("bench_errors", "Errors against ipykernel", [figure])
    return 0


if __name__ == "__main__":
    sys.exit(main())
