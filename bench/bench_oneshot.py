"""One-shot latency: PythonSandbox.execute() of a trivial program vs `python3 -c` in a subprocess.

Both start a fresh interpreter, run `print(1)`, and hand back its output; the baseline is the
host's own CPython started as a subprocess, measured in the same run. The guest starts from
the image's snapshot and its compiled module is already cached (as after `sandbox-kernel warm`).
Usage: .venv/bin/python bench/bench_oneshot.py [ROUNDS]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

from record import Figure, Row, arguments, save

from sandbox_kernel import ExecutionPolicy, PythonSandbox


def timed(call: object, rounds: int) -> list[float]:
    assert callable(call)
    call()  # warm-up
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def main() -> int:
    args = arguments()
    rounds = int(args[0]) if args else 30
    with tempfile.TemporaryDirectory() as folder:
        sandbox = PythonSandbox(ExecutionPolicy(), workspace=folder)

        def guest() -> None:
            assert sandbox.execute("print(1)").stdout == "1\n"

        def native() -> None:
            subprocess.run([sys.executable, "-c", "print(1)"], check=True, capture_output=True)

        wasm = timed(guest, rounds)
        base = timed(native, rounds)
    med_wasm, med_base = statistics.median(wasm), statistics.median(base)
    print(f"rounds: {rounds}")
    print(f"python3 -c subprocess   median {med_base:7.1f} ms  p90 {_p90(base):7.1f} ms")
    print(f"PythonSandbox.execute   median {med_wasm:7.1f} ms  p90 {_p90(wasm):7.1f} ms")
    print(f"ratio (sandbox / subprocess): {med_wasm / med_base:.2f}x")
    figure = Figure(
        title="One-shot latency of print(1)",
        baseline="python3 -c",
        subject="PythonSandbox.execute",
        unit="ms",
        rows=[
            Row(label="median", baseline=med_base, subject=med_wasm),
            Row(label="p90", baseline=_p90(base), subject=_p90(wasm)),
        ],
        note=f"{rounds} rounds each, compiled module cached; both start a fresh interpreter.",
    )
    save("bench_oneshot", "One-shot sandboxes", [figure])
    return 0


def _p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10)[-1]


if __name__ == "__main__":
    sys.exit(main())
