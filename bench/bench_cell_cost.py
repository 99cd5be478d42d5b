"""Where a trivial cell's time goes, with and without IPython in the guest (`ReplSandbox`).

    .venv/bin/python bench/bench_cell_cost.py

1. Per cell, medians of 60 `x = 1` cells: execute() (its image deferred), the guest turn
   alone, instructions (fuel), the rollback image's copy after the cell, and the memory pages
   the cell wrote (what the write watch faults on and the image copies), for the plain driver
   and for IPython's shell.
2. IPython's `run_cell` inside the guest, the door stubbed out, 300 cells in one turn: what the
   shell itself costs, without the host.
3. The floor of the bound on written pages kept writable between captures
   (session.REPROTECT_BYTES; the bound follows the cells' footprint above it) at 2, 4, 5 and
   8 MB: an IPython cell back to back, medians of 100.
4. Tracebacks: a session's first error and the next; `raise KeyboardInterrupt` after `x = 1`,
   and the `x = 1` after it (which first checks IPython's shell), medians of 35; and
   `raise KeyboardInterrupt` in each of IPython's modes (the traceback an interrupt's reply
   carries), medians of 15.
5. The rollback image's page map (`ImageFile.mark`) given a trivial IPython cell's written runs
   again, as after every cell: the set lookup against the search of the map per run it
   replaced (kept here as the baseline), best of 5 x 200 calls each.
6. The bound on writable pages: the session's rule (a quarter above its cells' footprint,
   between REPROTECT_BYTES and twice that) against the fixed 4 MB it replaced, two IPython
   sessions alternating in this process: `x = 1`, an interrupted `while True: pass` (cancel()
   to execute()'s return, and the process's page faults meanwhile; its traceback writes ~1.5
   MB more than a trivial cell) and `x = 1` in turn, then `x = 1` alone; numpy, pandas and
   IPython imported, as in the kernel; medians of 40 (200 alone).
7. Cold memory: a trivial cell in the kernel's session (numpy, pandas and IPython warm), its
   turn and its rollback copy, back to back and after 2 ms and 5 ms of idle (a kernel's cells
   always come after a pause: the reply, the client, the next request); medians of 200.
8. Guest instructions (fuel, the same from run to run where times are not): a trivial cell and
   a 25-line one through IPython, medians of 9, and what each piece of a cell's turn costs,
   run 200 times in a cell less an empty loop: IPython's run_cell with and without history,
   its static input transforms, should_run_async, a compile, the driver's repair() and the
   reply's JSON.
"""

from __future__ import annotations

import statistics
import threading
import time
import timeit
from pathlib import Path
from typing import Any

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.host import session as session_module
from sandbox_kernel.host import write_watch
from sandbox_kernel.repl import REPLConfig, ReplSandbox

POLICY = ExecutionPolicy(fuel_budget=10**12, timeout_seconds=300)
WARM = ("numpy", "pandas", "IPython")  # the kernel's warm image (part 6)
IN_GUEST = """
import time
driver = __sandbox_kernel__
door, driver.door = driver.door, (lambda frame: b'{"ok": true}')
try:
    began = time.perf_counter()
    for i in range(300):
        driver.run_cell(5000 + i, "x = 1")
    per_cell = (time.perf_counter() - began) / 300 * 1000
finally:
    driver.door = door
round(per_cell, 3)
"""


def session(ipython: bool, warm: tuple[str, ...] = ()) -> ReplSandbox:
    config = REPLConfig(ipython=ipython, warm_start_modules=warm, policy=POLICY)
    repl = ReplSandbox(config)
    for _ in range(10):
        repl.execute("x = 1")
    return repl


def per_cell(ipython: bool) -> dict[str, float]:
    written: list[int] = []
    original = write_watch.WriteWatch.written

    def counting(self: Any, *args: Any, **kwargs: Any) -> list[tuple[int, int]]:
        runs: list[tuple[int, int]] = original(self, *args, **kwargs)
        written.append(sum(length for _, length in runs))
        return runs

    bound = session_module.REPROTECT_BYTES
    repl = session(ipython)
    try:
        took, turns, fuel, captures = [], [], [], []
        for _ in range(60):
            began = time.perf_counter()
            done = repl.execute("x = 1", defer_image=True)
            took.append((time.perf_counter() - began) * 1000)
            turns.append(done.duration_ms)
            fuel.append(done.fuel_consumed)
            began = time.perf_counter()
            repl.take_image()
            repl._join_capture()  # the bench times the session's capture on purpose
            captures.append((time.perf_counter() - began) * 1000)
        # Pages one cell writes: protected again after every capture, counted at the next.
        session_module.REPROTECT_BYTES = 0
        write_watch.WriteWatch.written = counting  # type: ignore[method-assign]
        for _ in range(20):
            repl.execute("x = 1")
            repl._join_capture()  # the bench reads the session's capture on purpose
        pages = statistics.median(w for w in written if w) / write_watch.PAGE_SIZE
        in_guest = float(repl.execute(IN_GUEST).result["text/plain"])  # type: ignore[index]
    finally:
        write_watch.WriteWatch.written = original  # type: ignore[method-assign]
        session_module.REPROTECT_BYTES = bound
        repl.destroy()
    return {
        "execute_ms": statistics.median(took),
        "turn_ms": statistics.median(turns),
        "fuel": statistics.median(fuel),
        "capture_ms": statistics.median(captures),
        "pages": pages,
        "run_cell_ms": in_guest,
    }


def bound_variants() -> dict[int, float]:
    found = {}
    bound = session_module.REPROTECT_BYTES
    try:
        for megabytes in (2, 4, 5, 8):
            session_module.REPROTECT_BYTES = megabytes << 20
            repl = session(ipython=True)
            try:
                took = []
                for _ in range(100):
                    began = time.perf_counter()
                    repl.execute("x = 1")
                    took.append((time.perf_counter() - began) * 1000)
            finally:
                repl.destroy()
            found[megabytes] = statistics.median(took)
    finally:
        session_module.REPROTECT_BYTES = bound
    return found


def tracebacks() -> None:
    repl = ReplSandbox(REPLConfig(ipython=True, policy=POLICY))
    try:
        first, later = repl.execute("1 / 0"), repl.execute("1 / 0")
        print(f"first error: {first.fuel_consumed:,} instructions, next {later.fuel_consumed:,}")
        # An interrupt after a trivial cell, as a user meets one, and the cell after it (which
        # checks the shell first: the driver's probe after a failed cell).
        pairs = [
            (repl.execute("raise KeyboardInterrupt"), repl.execute("x = 1")) for _ in range(40)
        ]
        parts = {"the interrupt": [a for a, _ in pairs], "the cell after it": [b for _, b in pairs]}
        for label, runs in parts.items():
            took = statistics.median(run.duration_ms for run in runs[5:])
            fuel = statistics.median(run.fuel_consumed for run in runs[5:])
            print(f"after `x = 1`, {label}: {took:.2f} ms, {fuel:,.0f} instructions")
        for mode in ("Context", "Minimal", "Plain"):
            repl.execute(f"%xmode {mode}")
            runs = [repl.execute("raise KeyboardInterrupt") for _ in range(15)]
            took = statistics.median(run.duration_ms for run in runs)
            fuel = statistics.median(run.fuel_consumed for run in runs)
            print(f"KeyboardInterrupt traceback, {mode}: {took:.1f} ms, {fuel:,.0f} instructions")
    finally:
        repl.destroy()


def _minor_faults() -> int:
    """This process's minor page faults so far (a write to a protected page is one)."""
    return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[7])


def _interrupted(repl: ReplSandbox) -> tuple[float, int]:
    """Milliseconds from cancel(), 0.1 s into `while True: pass`, to execute()'s return, and
    the page faults the process took meanwhile."""
    sent: list[tuple[float, int]] = []

    def cancel() -> None:
        time.sleep(0.1)
        sent.append((time.perf_counter(), _minor_faults()))
        repl.cancel()

    canceller = threading.Thread(target=cancel)
    canceller.start()
    repl.execute("while True:\n    pass")
    done, faults = time.perf_counter(), _minor_faults()
    canceller.join()
    return (done - sent[0][0]) * 1000, faults - sent[0][1]


def bound_rules(rounds: int = 40) -> None:
    """Part 6: the previous fixed bound (4 MB, whatever the cells write) is put in place for
    one session's captures only; the other keeps the session's rule."""
    rule = session_module._writable_bound
    sessions = {name: session(ipython=True, warm=WARM) for name in ("fixed 4 MB", "session's rule")}
    fixed = sessions["fixed 4 MB"]._session
    original = session_module.GuestSession.capture

    def capture(self: Any, into: Any = None) -> Any:
        session_module._writable_bound = (lambda footprint: 4 << 20) if self is fixed else rule
        try:
            return original(self, into)
        finally:
            session_module._writable_bound = rule

    def timed(repl: ReplSandbox) -> float:
        began = time.perf_counter()
        repl.execute("x = 1")
        return (time.perf_counter() - began) * 1000

    session_module.GuestSession.capture = capture  # type: ignore[method-assign]
    took: dict[str, dict[str, list[float]]] = {name: {} for name in sessions}
    try:
        for _ in range(rounds):
            for name, repl in sessions.items():
                took[name].setdefault("x = 1 before an interrupt", []).append(timed(repl))
                interrupt, faults = _interrupted(repl)
                took[name].setdefault("the interrupt", []).append(interrupt)
                took[name].setdefault("page faults in the interrupt", []).append(faults)
                took[name].setdefault("the cell after it", []).append(timed(repl))
        for _ in range(rounds):
            for name, repl in sessions.items():
                took[name].setdefault("x = 1 alone", []).extend(timed(repl) for _ in range(5))
    finally:
        session_module.GuestSession.capture = original  # type: ignore[method-assign]
        for repl in sessions.values():
            repl.destroy()
    base, ours = took["fixed 4 MB"], took["session's rule"]
    for key in base:
        old, new = statistics.median(base[key]), statistics.median(ours[key])
        unit = "" if key.startswith("page faults") else " ms"
        print(
            f"writable pages, {key}: fixed 4 MB {old:.2f}{unit}, "
            f"the session's rule {new:.2f}{unit} ({new / max(old, 1e-9):.2f}x)"
        )


def _searched_marks(changed: bytearray, runs: list[tuple[int, int]]) -> None:
    """The page map's marks as they were made before the set of known runs: a search per run."""
    shift, pages = write_watch.PAGE_SIZE.bit_length() - 1, len(changed)
    for offset, length in runs:
        first, end = offset >> shift, (offset + length + write_watch.PAGE_SIZE - 1) >> shift
        if changed.find(0, first, end) >= 0:
            end = min(end, pages)
            changed[first:end] = b"\x01" * (end - first)


def marks() -> None:
    repl = session(ipython=True)
    seen: list[list[tuple[int, int]]] = []
    original = write_watch.WriteWatch.written

    def keeping(self: Any, *args: Any, **kwargs: Any) -> list[tuple[int, int]]:
        runs: list[tuple[int, int]] = original(self, *args, **kwargs)
        seen.append(runs)
        return runs

    write_watch.WriteWatch.written = keeping  # type: ignore[method-assign]
    try:
        repl.execute("x = 1")
        repl._join_capture()
        origin = repl._image.origin if repl._image is not None else None
    finally:
        write_watch.WriteWatch.written = original  # type: ignore[method-assign]
        repl.destroy()
    if origin is None or not seen:
        print("page map: the session has no file image or write watch here")
        return
    runs = seen[-1]
    origin.mark(runs)
    searched = bytearray(origin.changed)
    by_set = min(timeit.repeat(lambda: origin.mark(runs), number=200, repeat=5)) / 200
    by_search = min(timeit.repeat(lambda: _searched_marks(searched, runs), number=200, repeat=5))
    by_search /= 200
    print(
        f"page map after a trivial cell ({len(runs)} runs): search per run "
        f"{by_search * 1e6:.0f} us, set lookup {by_set * 1e6:.0f} us ({by_set / by_search:.2f}x)"
    )


def main() -> None:
    plain, ipython = per_cell(False), per_cell(True)
    print(f"{'trivial cell':<40} {'plain':>10} {'IPython':>10}")
    for key, label in (
        ("execute_ms", "execute(), back to back (ms)"),
        ("turn_ms", "the guest turn (ms)"),
        ("fuel", "instructions"),
        ("capture_ms", "the rollback image's copy after it (ms)"),
        ("pages", "pages written"),
        ("run_cell_ms", "run_cell in the guest, door stubbed (ms)"),
    ):
        print(f"{label:<40} {plain[key]:>10.2f} {ipython[key]:>10.2f}")
    for megabytes, took in bound_variants().items():
        print(f"IPython cell, writable-page floor {megabytes} MB: {took:.2f} ms")
    tracebacks()
    marks()
    bound_rules()
    cold_memory()
    instructions()


def cold_memory() -> None:
    repl = session(ipython=True, warm=WARM)
    try:
        for pause in (0.0, 0.002, 0.005):
            turns, captures = [], []
            for _ in range(200):
                time.sleep(pause)
                done = repl.execute("x = 1", defer_image=True)
                began = time.perf_counter()
                repl.take_image(wait=True)
                captures.append((time.perf_counter() - began) * 1000)
                turns.append(done.duration_ms)
            print(
                f"after {pause * 1000:.0f} ms idle: turn {statistics.median(turns):.2f} ms, "
                f"rollback copy {statistics.median(captures):.2f} ms"
            )
    finally:
        repl.destroy()


CELL_25_LINES = """\
import math
data = [i * 0.5 for i in range(10)]
total = 0
for i, x in enumerate(data):
    if x > 2:
        total += math.sqrt(x) * i
    else:
        total -= x
def summarize(values, scale=1.0):
    \"\"\"Mean and spread.\"\"\"
    n = len(values)
    mean = sum(values) / n
    spread = max(values) - min(values)
    return {"n": n, "mean": mean * scale, "spread": spread}
result = summarize(data, scale=2.0)
labels = {k: str(v) for k, v in result.items()}
while total > 100:
    total /= 2
print(len(labels))
"""
PIECES = {
    "IPython's run_cell, with history": "shell.run_cell('x = 1', store_history=True)",
    "IPython's run_cell, without history": "shell.run_cell('x = 1', store_history=False)",
    "IPython's input transforms, x = 1": "shell.transform_cell('x = 1')",
    "IPython's input transforms, 25 lines": f"shell.transform_cell({CELL_25_LINES!r})",
    "should_run_async, x = 1": "shell.should_run_async('x = 1', transformed_cell='x = 1\\n')",
    "compile('x = 1')": "compile('x = 1', '<c>', 'exec')",
    "IPython's store_inputs (history)": "shell.history_manager.store_inputs(7, 'x = 1')",
    "a 25-line cell's file name, hashed in the guest": (
        f"__import__('sandbox_kernel_shell').cell_file_name({CELL_25_LINES!r})"
    ),
    "the driver's repair()": "__sandbox_kernel__.repair()",
    "the reply's JSON": "json.dumps({'op': 'done', 'cell': 5, 'reply': {'status': 'ok'}})",
}


def instructions(loops: int = 200) -> None:
    repl = session(ipython=True)
    try:
        cells = {
            "x = 1": "x = 1",
            "a 25-line cell": CELL_25_LINES,
        }
        for label, code in cells.items():
            fuel = statistics.median(repl.execute(code).fuel_consumed for _ in range(9))
            print(f"instructions, {label}: {fuel / 1e6:.2f}M")
        repl.execute("import json\nshell = get_ipython()")
        empty = repl.execute(f"for _ in range({loops}):\n    pass").fuel_consumed
        for label, piece in PIECES.items():
            done = repl.execute(f"for _ in range({loops}):\n    {piece}")
            assert done.ok, (label, done.error)
            print(f"instructions, {label}: {(done.fuel_consumed - empty) / loops / 1e3:,.0f}K")
    finally:
        repl.destroy()


if __name__ == "__main__":
    main()
