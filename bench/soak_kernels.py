"""A soak: many sandbox-python kernels at once, each running a cell every few seconds, with
interrupts and rolled-back runaway cells mixed in; no kernel may be lost, memory must stay flat.

    .venv/bin/python bench/soak_kernels.py [KERNELS] [MINUTES]     (default: 40 kernels, 10)

Each kernel, in its own client thread, repeats: an ordinary cell (pandas, a sum, a counter
kept in the session); every third round a cell stopped by an interrupt (`time.sleep(30)`,
interrupted after 0.5 s: KeyboardInterrupt, the session kept); every fifth a runaway loop
stopped by the wall clock (`%policy timeout_seconds=2`: rolled back, the session kept); a
check that the counter survived all of it; then it waits 3 s. The kernels' summed PSS is
sampled every 30 s. Printed: cells by outcome, kernels lost, reply latency of ordinary cells
(p50, p99), and PSS at the start, after the first minute (warm-up: first tracebacks and
interrupts), highest and last. The baseline is the soak's own: memory "flat" means last /
after-a-minute near 1.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

ORDINARY = (
    "import pandas as pd\ncount = globals().get('count', 0) + 1\n"
    "frame = pd.DataFrame({'a': range(200), 'b': range(200)})\n"
    "int(frame.a.sum()) + sum(range(10_000)) + count"
)
SLEEPER = "import time\ntime.sleep(30)"
RUNAWAY = "while True:\n    pass"
PAUSE_SECONDS = 3.0
REPLY_TIMEOUT = 120.0


def pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


class Soaker(threading.Thread):
    def __init__(self, index: int, folder: Path, until: float) -> None:
        super().__init__(daemon=True)
        root = folder / f"kernel-{index}"
        root.mkdir()
        env = {**os.environ, "SANDBOX_KERNEL_WORKSPACE": str(root / "workspace")}
        env["SANDBOX_KERNEL_RUN_LOG"] = str(root / "runs.jsonl")
        self._start = {"cwd": str(root), "env": env}
        self.manager = KernelManager(kernel_name="sandbox-python")
        self.manager.start_kernel(**self._start)
        self.client: Any = self.manager.client()
        self.until = until
        self.outcomes: Counter[str] = Counter()
        self.latencies: list[float] = []
        self.lost = False
        self.expected_count = 0
        self.notes: list[str] = []

    def ready(self) -> None:
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=600)
        except RuntimeError:  # jupyter_client's port race when many start at once: once more,
            # on new ports (a restart would reuse the connection file's, the one taken included)
            self.client.stop_channels()
            self.manager.shutdown_kernel(now=True)
            self.manager = KernelManager(kernel_name="sandbox-python")
            self.manager.start_kernel(**self._start)
            self.client = self.manager.client()
            self.client.start_channels()
            self.client.wait_for_ready(timeout=600)
            self.outcomes["restarted at start (port taken)"] += 1
        self.execute("%policy timeout_seconds=2")

    def execute(self, code: str, *, expect_error: bool = False) -> dict[str, Any]:
        """One cell's reply. A cell meant to fail says so (stop_on_error off): otherwise
        ipykernel aborts whatever reaches it while it clears its queue after the error, the
        next cell included when the machine is loaded (status "aborted", no error at all)."""
        reply: dict[str, Any] = self.client.execute(
            code, reply=True, timeout=REPLY_TIMEOUT, stop_on_error=not expect_error
        )
        return dict(reply["content"])

    def run(self) -> None:
        rounds = 0
        try:
            while time.monotonic() < self.until:
                began = time.perf_counter()
                ok = self.execute(ORDINARY)["status"] == "ok"
                self.latencies.append(time.perf_counter() - began)
                self.expected_count += ok
                self.outcomes["ordinary ok" if ok else "ordinary FAILED"] += 1

                rounds += 1
                if rounds % 3 == 0:
                    self.interrupt_one()
                if rounds % 5 == 0:
                    stopped = self.execute(RUNAWAY, expect_error=True)
                    if stopped["status"] == "error":
                        self.outcomes["runaway stopped"] += 1
                    else:
                        self.outcomes["runaway NOT stopped"] += 1
                        self.notes.append(f"runaway: {stopped}"[:300])

                check = self.execute(f"assert count == {self.expected_count}, count")
                self.outcomes["state kept" if check["status"] == "ok" else "state LOST"] += 1
                if check["status"] != "ok":
                    what = f"{check.get('ename')}: {check.get('evalue')}"
                    self.notes.append(f"check after round {rounds}: {what}"[:300])
                time.sleep(PAUSE_SECONDS)
        except Exception as exc:
            self.lost = True
            self.outcomes[f"LOST: {type(exc).__name__}"] += 1

    def interrupt_one(self) -> None:
        msg_id = self.client.execute(SLEEPER, stop_on_error=False)
        time.sleep(0.5)
        self.manager.interrupt_kernel()
        reply = self.client.get_shell_msg(timeout=REPLY_TIMEOUT)
        assert reply["parent_header"]["msg_id"] == msg_id
        interrupted = reply["content"].get("ename") == "KeyboardInterrupt"
        self.outcomes["interrupted" if interrupted else "interrupt MISSED"] += 1

    def pid(self) -> int:
        return int(self.manager.provisioner.process.pid)  # type: ignore[union-attr]

    def stop(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    minutes = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    with tempfile.TemporaryDirectory(prefix="soak-") as folder:
        started = time.monotonic()
        until = started + 600 + minutes * 60  # replaced once all are ready
        soakers = [Soaker(i, Path(folder), until) for i in range(count)]
        for soaker in soakers:
            soaker.ready()
        print(f"{count} kernels ready in {time.monotonic() - started:.0f} s", flush=True)
        until = time.monotonic() + minutes * 60
        for soaker in soakers:
            soaker.until = until
            soaker.start()
        samples: list[tuple[float, float]] = []  # (minutes into the soak, MiB)
        soak_start = time.monotonic()
        while any(s.is_alive() for s in soakers):
            alive = [s for s in soakers if s.manager.is_alive()]
            minute = (time.monotonic() - soak_start) / 60
            samples.append((minute, sum(pss_kib(s.pid()) for s in alive) / 1024))
            print(f"  {minute:4.1f} min: {len(alive)} kernels alive, "
                  f"PSS {samples[-1][1]:,.0f} MiB", flush=True)  # fmt: skip
            time.sleep(30)
        outcomes: Counter[str] = Counter()
        for soaker in soakers:
            outcomes.update(soaker.outcomes)
        latencies = sorted(t for s in soakers for t in s.latencies)
        lost = sum(s.lost or not s.manager.is_alive() for s in soakers)
        print(f"cells: {dict(outcomes)}")
        print(f"kernels lost: {lost} of {count}")
        notes = Counter(note for soaker in soakers for note in soaker.notes)
        for note, times in notes.most_common(8):
            print(f"  {times} x {note}")
        p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
        print(f"ordinary cell reply: p50 {statistics.median(latencies) * 1000:.0f} ms, "
              f"p99 {p99 * 1000:.0f} ms")  # fmt: skip
        # The first minute is warm-up (each session's first traceback, first interrupt).
        settled = next((mib for minute, mib in samples if minute >= 1), samples[0][1])
        last, highest = samples[-1][1], max(mib for _, mib in samples)
        print(f"PSS of all kernels: at start {samples[0][1]:,.0f} MiB, after a minute "
              f"{settled:,.0f}, highest {highest:,.0f}, last {last:,.0f} "
              f"(last / after a minute {last / settled:.2f}x)")  # fmt: skip
        for soaker in soakers:
            soaker.stop()


if __name__ == "__main__":
    main()
