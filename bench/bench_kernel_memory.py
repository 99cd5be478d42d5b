"""What an idle kernel costs in memory: sandbox-python against ipykernel with the same imports
(the `sandbox-baseline` kernel: ipykernel with the guest's numpy and pandas), N kernels of a
kind started at once, each having run `import numpy, pandas, IPython`.

    .venv/bin/python bench/bench_kernel_memory.py [N ...]      (default: 1 10)

For each kernel process, from /proc/PID/smaps_rollup: PSS (proportional set size: shared
pages divided among the processes that map them, the figure that sums to the machine's use)
and private memory (pages no other process maps). Printed per kernel, as medians, and the
ratio of sandbox-python's PSS to ipykernel's.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager
from record import Figure, Row, arguments, save

KINDS = ("sandbox-baseline", "sandbox-python")
IMPORTS = "import numpy, pandas, IPython"
SETTLE_SECONDS = 5.0


def memory_kib(pid: int) -> dict[str, int]:
    """PSS and private memory of `pid`, in KiB."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0])
    return {"pss": fields["Pss"], "private": fields["Private_Clean"] + fields["Private_Dirty"]}


def start_many(kind: str, count: int, folder: Path) -> list[tuple[KernelManager, Any]]:
    """`count` kernels of `kind`, all launched before any is waited for."""
    started = []
    for index in range(count):
        root = folder / f"{kind}-{index}"
        root.mkdir()
        env = {**os.environ, "SANDBOX_KERNEL_WORKSPACE": str(root / "workspace")}
        env["SANDBOX_KERNEL_RUN_LOG"] = str(root / "runs.jsonl")
        manager = KernelManager(kernel_name=kind)
        manager.start_kernel(cwd=str(root), env=env)
        started.append((manager, manager.client()))
    for _, client in started:
        client.start_channels()
        client.wait_for_ready(timeout=600)
        reply = client.execute(IMPORTS, reply=True, timeout=600)
        assert reply["content"]["status"] == "ok", reply["content"]
    return started


def measure(kind: str, count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as temp:
        kernels = start_many(kind, count, Path(temp))
        try:
            time.sleep(SETTLE_SECONDS)  # background start-up work (the first image) is done
            readings = [memory_kib(m.provisioner.process.pid) for m, _ in kernels]  # type: ignore[union-attr]
        finally:
            for manager, client in kernels:
                client.stop_channels()
                manager.shutdown_kernel(now=True)
    return {
        "pss_mib": statistics.median(r["pss"] for r in readings) / 1024,
        "private_mib": statistics.median(r["private"] for r in readings) / 1024,
    }


def main() -> None:
    counts = [int(a) for a in arguments()] or [1, 10]
    print(f"{'kernels':>7} {'kind':<17} {'PSS MiB':>8} {'private MiB':>12}")
    rows = []
    for count in counts:
        figures = {kind: measure(kind, count) for kind in KINDS}
        for kind, figure in figures.items():
            print(f"{count:>7} {kind:<17} {figure['pss_mib']:>8.0f} {figure['private_mib']:>12.0f}")
        ratio = figures["sandbox-python"]["pss_mib"] / figures["sandbox-baseline"]["pss_mib"]
        print(f"{count:>7} PSS ratio, sandbox-python / ipykernel: {ratio:.2f}x")
        base, ours = figures["sandbox-baseline"], figures["sandbox-python"]
        for key, name in (("pss_mib", "PSS"), ("private_mib", "private")):
            label = f"{name} per kernel, {count} alive"
            rows.append(Row(label=label, baseline=base[key], subject=ours[key]))
    figure = Figure(
        title="Memory of an idle kernel after import numpy, pandas, IPython",
        baseline="ipykernel",
        subject="sandbox-python",
        unit="MiB",
        rows=rows,
        note="Medians over the kernels alive at once, from /proc/PID/smaps_rollup.",
    )
    save("bench_kernel_memory", "Kernel memory", [figure])


if __name__ == "__main__":
    main()
