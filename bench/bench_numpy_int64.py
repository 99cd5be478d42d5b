"""What the 64-bit default integer (sandbox_kernel/guest/numpy64.py) costs, measured in the
guest: the same cells with numpy's functions as the sandbox patches them and with NumPy's own
(put back for the baseline in the same session), median of several rounds.

    .venv/bin/python bench/bench_numpy_int64.py

1. calls: 25,000 calls of np.array([1, 2, 3]) / np.arange(10) / np.zeros(3, dtype=int) /
   np.sum(a) / a.sum(): the wrapper's cost per call, the worst case.
2. work: a pandas and numpy cell of the kind notebooks run (a 100,000-row DataFrame built,
   grouped, merged and summed; array arithmetic), where numpy's functions are called from
   pandas too.
"""

from __future__ import annotations

import statistics

from record import Figure, Row, save

from sandbox_kernel import ExecutionPolicy, REPLConfig, create_repl

ROUNDS = 5
POLICY = ExecutionPolicy(fuel_budget=10**12, timeout_seconds=300, memory_bytes=1_000_000_000)

SETUP = """
import time, numpy as np, pandas as pd, numpy._core._methods as methods
PATCHED = {}
for owner, names in ((np, ("array", "asarray", "asanyarray", "fromiter", "zeros", "ones",
        "empty", "full", "arange", "sum", "prod", "cumsum", "cumprod", "nansum", "nanprod")),
        (np.random, ("randint", "permutation", "choice")), (methods, ("_sum", "_prod"))):
    for name in names:
        PATCHED[(owner, name)] = getattr(owner, name)

def use(patched):
    for (owner, name), function in PATCHED.items():
        setattr(owner, name, function if patched else function.__sandbox_kernel_original__)

def calls():
    a = np.ones(4, dtype=np.int64)
    for _ in range(5_000):
        np.array([1, 2, 3]); np.arange(10); np.zeros(3, dtype=int); np.sum(a); a.sum()

def work():
    n = 100_000
    df = pd.DataFrame({"k": np.arange(n) % 100, "v": np.arange(n) * 0.5,
                       "w": np.random.randint(0, 1000, n)})
    g = df.groupby("k").agg(total=("v", "sum"), most=("w", "max")).reset_index()
    m = df.merge(g, on="k")
    x = np.arange(n).reshape(100, -1)
    return float(m.total.sum()) + float((x @ x.T).sum()) + float(np.cumsum(x).sum())

def timed(fn, patched):
    use(patched)
    try:
        start = time.perf_counter(); fn(); return (time.perf_counter() - start) * 1e3
    finally:
        use(True)
"""


def main() -> None:
    repl = create_repl(REPLConfig(policy=POLICY, backend="wasm"))
    try:
        setup = repl.execute(SETUP)
        assert setup.status == "ok", setup
        print(f"{'cell':<8} {'numpy (ms)':>11} {'int64 (ms)':>11} {'ratio':>6}")
        rows = []
        for name in ("calls", "work"):
            samples: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(ROUNDS):
                for patched in (False, True):
                    done = repl.execute(f"timed({name}, {patched})")
                    assert done.status == "ok", done
                    samples[patched].append(float(done.result["text/plain"]))  # type: ignore[index]
            base = statistics.median(samples[False])
            ours = statistics.median(samples[True])
            print(f"{name:<8} {base:>11.1f} {ours:>11.1f} {ours / base:>6.2f}x")
            rows.append(Row(label=name, baseline=base, subject=ours))
        figure = Figure(
            title="numpy's 64-bit default integer in the guest",
            baseline="NumPy's own functions",
            subject="as the sandbox patches them",
            unit="ms",
            rows=rows,
            note=f"Median of {ROUNDS} rounds in one session, the two alternating.",
        )
        save("bench_numpy_int64", "The 64-bit default integer", [figure])
    finally:
        repl.destroy()


if __name__ == "__main__":
    main()
