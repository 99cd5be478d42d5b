"""The host's quiet stdout and stderr (`QuietOutStream`), measured against ipykernel's own
`OutStream` in the same run: the same sandbox-python kernel started alternately with each.

    .venv/bin/python bench/bench_host_streams.py [BLOCKS] [ROUNDS] [INTERRUPTS]

Each block starts one kernel of each kind in turn (one up at a time), pauses, then times
ROUNDS trivial round trips (default 200) and INTERRUPTS interrupts (default 10). Prints the
medians over all blocks (default 4) and their ratio, quiet over ipykernel's.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

from bench_kernel import SETTLE_SECONDS, interrupt, round_trip, running
from record import Figure, Row, arguments, save

ARMS = {
    "ipykernel OutStream": ("--SandboxKernelApp.outstream_class=ipykernel.iostream.OutStream",),
    "QuietOutStream": (),
}


def main() -> int:
    args = arguments()
    blocks = int(args[0]) if len(args) > 0 else 4
    rounds = int(args[1]) if len(args) > 1 else 200
    interrupts = int(args[2]) if len(args) > 2 else 10
    taken: dict[str, dict[str, list[float]]] = {
        arm: {"round_trip": [], "interrupt": []} for arm in ARMS
    }
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as folder:
        for _ in range(blocks):
            for arm, extra in ARMS.items():
                with running("sandbox-python", folder, extra) as (manager, client, _, _):
                    time.sleep(SETTLE_SECONDS)
                    for _ in range(10):
                        round_trip(client, "x = 1")
                    taken[arm]["round_trip"] += [round_trip(client, "x = 1") for _ in range(rounds)]
                    taken[arm]["interrupt"] += [
                        interrupt(manager, client) for _ in range(interrupts)
                    ]
    base, quiet = taken["ipykernel OutStream"], taken["QuietOutStream"]
    print(f"{'median':<12}{'OutStream':>12}{'Quiet':>12}{'ratio':>9}")
    rows = []
    for key in ("round_trip", "interrupt"):
        before, after = statistics.median(base[key]), statistics.median(quiet[key])
        print(f"{key:<12}{before * 1e3:>10.2f}ms{after * 1e3:>10.2f}ms{after / before:>8.2f}x")
        rows.append(Row(label=key.replace("_", " "), baseline=before * 1e3, subject=after * 1e3))
    figure = Figure(
        title="The kernel's own stdout and stderr",
        baseline="ipykernel's OutStream",
        subject="QuietOutStream",
        unit="ms",
        rows=rows,
        note=f"Medians; the same sandbox-python kernel started with each, {blocks} blocks.",
    )
    save("bench_host_streams", "The kernel's host streams", [figure])
    return 0


if __name__ == "__main__":
    sys.exit(main())
