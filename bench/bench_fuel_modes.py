"""What fuel metering costs on notebook-like cells: the same cells in a session that counts fuel
(the default) and in one that stops a runaway cell by the wall clock alone
(`meter_fuel = false`), in the same run, alternating, median of several rounds each.

    .venv/bin/python bench/bench_fuel_modes.py [ROUNDS]

The cells are the kinds a teaching notebook runs: pure-Python loops, string work, a pandas
group-by and merge, numpy array work, and a trivial cell (the per-cell cost).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from record import Figure, Row, arguments, save

from sandbox_kernel import ExecutionPolicy, REPLConfig
from sandbox_kernel.repl.sandbox import ReplSandbox

SETUP = "import numpy as np, pandas as pd\nrng = np.random.default_rng(0)"
CELLS = {
    "trivial cell": "x = 1",
    "python loop": "total = 0\nfor i in range(300_000):\n    total += i * i % 7",
    "strings": "words = ' '.join(f'w{i}' for i in range(50_000)).upper().split()",
    "pandas group-by": (
        "df = pd.DataFrame({'k': rng.integers(0, 100, 200_000), 'v': rng.random(200_000)})\n"
        "g = df.groupby('k').v.agg(['mean', 'sum']).merge(df.head(100), left_index=True,"
        " right_on='k')"
    ),
    "numpy": "a = rng.random((400, 400))\nb = (a @ a.T).sum()",
}


def session(meter_fuel: bool, folder: Path) -> ReplSandbox:
    policy = ExecutionPolicy(
        fuel_budget=10**12, timeout_seconds=300, memory_bytes=1_000_000_000, meter_fuel=meter_fuel
    )
    config = REPLConfig(
        policy=policy, workspace=folder, ipython=True, warm_start_modules=("numpy", "pandas")
    )
    repl = ReplSandbox(config)
    repl.initialize()
    assert repl.execute(SETUP).ok
    return repl


def timed(repl: ReplSandbox, code: str) -> float:
    """The cell's time to its result, as a kernel's reply sees it; the rollback image is
    copied after, outside the timing, so that it never runs beside the other session's cell."""
    started = time.perf_counter()
    done = repl.execute(code, defer_image=True)
    elapsed = (time.perf_counter() - started) * 1000
    assert done.ok, done.error
    repl.take_image(wait=True)
    return elapsed


def main() -> int:
    args = arguments()
    rounds = int(args[0]) if args else 7
    with tempfile.TemporaryDirectory() as folder:
        metered, clock = session(True, Path(folder)), session(False, Path(folder))
        samples: dict[str, dict[str, list[float]]] = {n: {"fuel": [], "clock": []} for n in CELLS}
        for _ in range(rounds):
            for name, code in CELLS.items():
                samples[name]["fuel"].append(timed(metered, code))
                samples[name]["clock"].append(timed(clock, code))
        metered.destroy()
        clock.destroy()
    print(f"{'cell':<18}{'clock only ms':>15}{'fuel ms':>10}{'fuel / clock':>14}")
    rows = []
    for name, taken in samples.items():
        fuel, clock_ms = statistics.median(taken["fuel"]), statistics.median(taken["clock"])
        print(f"{name:<18}{clock_ms:>15.1f}{fuel:>10.1f}{fuel / clock_ms:>13.2f}x")
        rows.append(Row(label=name, baseline=clock_ms, subject=fuel))
    figure = Figure(
        title="Fuel metering on notebook cells",
        baseline="clock only (meter_fuel = false)",
        subject="fuel and clock (default)",
        unit="ms",
        rows=rows,
        note=f"Median of {rounds} rounds per cell, the two sessions alternating.",
    )
    save("bench_fuel_modes", "What fuel metering costs", [figure])
    return 0


if __name__ == "__main__":
    sys.exit(main())
