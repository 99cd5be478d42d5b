"""Kernels through Jupyter Kernel Gateway: sandbox-python against ipykernel (the
`sandbox-baseline` spec) through the same gateway, in the same run.

    .venv/bin/python bench/bench_gateway.py [KERNELS]        (default: 8 kernels a kind)

1. Start: POST /api/kernels until the first cell's reply has come back over the WebSocket,
   median of 5 kernels a kind.
2. Round trip: `x = 1` over the WebSocket, execute_request to idle, median of 200 cells.
3. Memory: KERNELS kernels of a kind held by one gateway, each having run
   `import numpy, pandas` (ipykernel: the `sandbox-baseline` spec, which has them),
   PSS per kernel process from /proc/PID/smaps_rollup; and how many such kernels this
   machine's MemAvailable would hold (the gateway's own memory left aside).

It reuses the tests' gateway client (tests/kernel/gateway.py), so it runs from the repository.
"""

from __future__ import annotations

import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from record import Figure, Row, arguments, save  # noqa: E402

from tests.kernel.gateway import Gateway, start_gateway  # noqa: E402

BASELINE = "sandbox-baseline"  # ipykernel with the guest's numpy and pandas (bin/setup --tests)
KINDS = (BASELINE, "sandbox-python")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_time(gateway: Gateway, kind: str) -> float:
    began = time.perf_counter()
    kernel_id = gateway.start_kernel(kind)
    kernel = gateway.connect(kernel_id)
    assert kernel.execute("1").status == "ok"
    took = time.perf_counter() - began
    kernel.close()
    gateway.api("DELETE", f"/api/kernels/{kernel_id}")
    return took


def round_trip(gateway: Gateway, kind: str, cells: int = 200) -> float:
    kernel_id = gateway.start_kernel(kind)
    kernel = gateway.connect(kernel_id)
    for _ in range(10):
        kernel.execute("x = 1")
    times = []
    for _ in range(cells):
        began = time.perf_counter()
        assert kernel.execute("x = 1").status == "ok"
        times.append(time.perf_counter() - began)
    kernel.close()
    gateway.api("DELETE", f"/api/kernels/{kernel_id}")
    return statistics.median(times)


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found |= {int(child), *children(int(child))}
    return found


def pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise LookupError(pid)


def memory(gateway: Gateway, kind: str, count: int) -> float:
    """Median PSS (MiB) of `count` kernels of `kind` held at once."""
    before = children(gateway.process.pid)
    ids = [gateway.start_kernel(kind) for _ in range(count)]
    for kernel_id in ids:
        kernel = gateway.connect(kernel_id)
        assert kernel.execute("import numpy, pandas", timeout=600).status == "ok"
        kernel.close()
    time.sleep(5)
    pids = children(gateway.process.pid) - before
    readings = [pss_kib(pid) for pid in pids]
    for kernel_id in ids:
        gateway.api("DELETE", f"/api/kernels/{kernel_id}")
    return statistics.median(readings) / 1024


def available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise LookupError("MemAvailable")


def main() -> None:
    args = arguments()
    count = int(args[0]) if args else 8
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as folder:
        gateway = start_gateway(Path(folder), free_port())
        try:
            starts = {k: statistics.median(start_time(gateway, k) for _ in range(5)) for k in KINDS}
            trips = {k: round_trip(gateway, k) for k in KINDS}
            print(f"start (to the first reply), median of 5: ipykernel {starts[BASELINE]:.2f} s, "
                  f"sandbox-python {starts['sandbox-python']:.2f} s, "
                  f"ratio {starts['sandbox-python'] / starts[BASELINE]:.2f}x")  # fmt: skip
            print(f"round trip `x = 1`, median of 200: ipykernel {trips[BASELINE] * 1000:.2f} ms, "
                  f"sandbox-python {trips['sandbox-python'] * 1000:.2f} ms, "
                  f"ratio {trips['sandbox-python'] / trips[BASELINE]:.2f}x")  # fmt: skip
            spare = available_mib()
            held = {}
            for kind in KINDS:
                pss = held[kind] = memory(gateway, kind, count)
                print(f"{count} {kind} kernels held: PSS {pss:.0f} MiB each; MemAvailable "
                      f"{spare:.0f} MiB holds about {int(spare // pss)} of them")  # fmt: skip
            ours = "sandbox-python"
            timing = Figure(
                title="Kernels through Jupyter Kernel Gateway",
                baseline="ipykernel",
                subject="sandbox-python",
                unit="ms",
                rows=[
                    Row(label="start, to the first reply (median of 5)",
                        baseline=starts[BASELINE] * 1000, subject=starts[ours] * 1000),
                    Row(label="round trip of x = 1 (median of 200)",
                        baseline=trips[BASELINE] * 1000, subject=trips[ours] * 1000),
                ],
                note="Both kernels behind the same gateway, over its REST API and WebSocket.",
            )  # fmt: skip
            memory_figure = Figure(
                title=f"Memory of {count} kernels held by the gateway",
                baseline="ipykernel",
                subject="sandbox-python",
                unit="MiB",
                rows=[Row(label="PSS per kernel", baseline=held[BASELINE], subject=held[ours])],
            )
            save("bench_gateway", "Kernels through a gateway", [timing, memory_figure])
        finally:
            gateway.stop()


if __name__ == "__main__":
    main()
