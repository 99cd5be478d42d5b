"""Guest compute speed: pure-Python kernels in the WebAssembly guest vs native CPython.

Both run bench/kernels.py, which times each kernel from inside its own interpreter (best of
5), so guest start-up is not counted. Three columns, measured in the same run:

    native      the host's CPython (the baseline)
    wasm+fuel   the guest as the sandbox runs it (fuel metering on)
    wasm        the guest on an engine without fuel metering (compiled separately, cached)

The guest is CPython 3.15 and the host usually 3.11, so part of any ratio is the version.
Usage: .venv/bin/python bench/bench_compute.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from record import Figure, Row, save

from sandbox_kernel import ExecutionPolicy, PythonSandbox
from sandbox_kernel.host import python_abi
from sandbox_kernel.host.artifacts import python_image
from sandbox_kernel.host.engine import get_engine
from sandbox_kernel.host.guest_run import RunSpec, run_guest
from sandbox_kernel.host.wasi_config import Preopen
from sandbox_kernel.runtimes.base import limits_from_policy

KERNELS = Path(__file__).with_name("kernels.py")
POLICY = ExecutionPolicy(fuel_budget=10**12, timeout_seconds=600)


def native() -> dict[str, float]:
    out = subprocess.run([sys.executable, str(KERNELS)], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def guest(consume_fuel: bool) -> dict[str, float]:
    handle = get_engine(consume_fuel=consume_fuel)
    image = python_image()
    module = handle.module(image.binary, image.binary_sha256)
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "kernels.py").write_text(KERNELS.read_text())
        spec = RunSpec(
            argv=(python_abi.ARGV0, "/app/kernels.py"),
            env={**python_abi.BASE_ENV, **POLICY.guest_env()},
            preopens=[*python_abi.image_preopens(image), Preopen(Path(folder), "/app", True)],
            limits=limits_from_policy(POLICY),
        )
        outcome = run_guest(handle, module, spec, python_abi.run_main)
    if not outcome.ok:
        raise RuntimeError(outcome.stderr.text() or outcome.trap_message)
    return dict(json.loads(outcome.stdout.data()))


def main() -> int:
    PythonSandbox(POLICY)  # checks the image before the timings start
    base = native()
    metered = guest(consume_fuel=True)
    free = guest(consume_fuel=False)
    print(
        f"{'kernel':<15}{'native ms':>11}{'wasm+fuel ms':>14}{'wasm ms':>10}"
        f"{'fuel/native':>13}{'fuel on/off':>13}"
    )
    for name, seconds in base.items():
        print(
            f"{name:<15}{seconds * 1e3:>11.1f}{metered[name] * 1e3:>14.1f}{free[name] * 1e3:>10.1f}"
            f"{metered[name] / seconds:>12.2f}x{metered[name] / free[name]:>12.2f}x"
        )
    note = "Best of 5, timed inside each interpreter (guest CPython 3.15, host CPython 3.11)."
    figures = [
        Figure(
            title="Pure Python in the sandbox against native CPython",
            baseline="native CPython",
            subject="wasm, fuel on",
            unit="ms",
            rows=[
                Row(label=n, baseline=s * 1e3, subject=metered[n] * 1e3) for n, s in base.items()
            ],
            note=note,
        ),
        Figure(
            title="What fuel metering costs",
            baseline="wasm, fuel off",
            subject="wasm, fuel on",
            unit="ms",
            rows=[Row(label=n, baseline=free[n] * 1e3, subject=metered[n] * 1e3) for n in base],
            note="The same guest on an engine compiled without fuel (cached separately).",
        ),
    ]
    save("bench_compute", "Guest compute speed", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
