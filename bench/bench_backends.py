"""The four REPL backends side by side, and the daemon under concurrent clients.

For each backend (wasm in process, daemon, native, pyodide), medians over ROUNDS sessions:

- start: a new session created, initialized and its first cell (`1`) answered. The wasm
  backend starts from its warm image; the daemon's session is a warm worker's; native starts
  a CPython process; pyodide starts Node and loads Pyodide.
- execute: a trivial cell (`x = 1`) back to back, 200 per session.
- interrupt: cancel() of `while True: pass` until execute() returns (soft interrupt).

The baseline is native (a plain CPython subprocess, no sandbox), measured in the same run;
ratios are against it. Then a fresh process's first cell, the case the daemon is for: a new
Python process that imports sandbox_kernel, opens a session (wasm in process, or the daemon's)
and runs `1`, timed from its start to its exit. Then the daemon alone: executes per second
with 1, 4 and 16 clients, each its own session running trivial cells back to back for a few
seconds.

A daemon is started on a socket of its own for the run and stopped at the end.
Usage: .venv/bin/python bench/bench_backends.py [ROUNDS]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from record import Figure, Row, arguments, save

from sandbox_kernel import ExecutionPolicy, REPLConfig, create_repl
from sandbox_kernel.repl.daemon import DaemonSettings, start_daemon, stop_daemon

BACKENDS = ("wasm", "daemon", "native", "pyodide")
CELLS_PER_SESSION = 200
THROUGHPUT_SECONDS = 5.0
BIG_FUEL = 200_000_000_000


def open_session(backend: str, folder: Path, socket: Path) -> tuple[Any, float]:
    config = REPLConfig(
        backend=backend,  # type: ignore[arg-type]
        workspace=folder,
        daemon_socket=socket,
        policy=ExecutionPolicy(fuel_budget=BIG_FUEL),  # the interrupt, not the fuel, stops it
    )
    started = time.perf_counter()
    repl = create_repl(config)
    repl.initialize()
    assert repl.execute("1").ok
    return repl, (time.perf_counter() - started) * 1000


def execute_ms(repl: Any) -> float:
    samples = []
    for _ in range(CELLS_PER_SESSION):
        started = time.perf_counter()
        repl.execute("x = 1")
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def interrupt_ms(repl: Any) -> float:
    fired: list[float] = []

    def cancel() -> None:
        fired.append(time.perf_counter())
        repl.cancel()

    threading.Timer(0.3, cancel).start()
    result = repl.execute("while True:\n    pass")
    assert result.ename == "KeyboardInterrupt", result
    return (time.perf_counter() - fired[0]) * 1000


FRESH = (
    "import sys\nfrom sandbox_kernel import REPLConfig, create_repl\n"
    "repl = create_repl(REPLConfig(backend=sys.argv[1], workspace=sys.argv[2],"
    " daemon_socket=sys.argv[3]))\n"
    "repl.initialize()\nassert repl.execute('1').ok\nrepl.destroy()\n"
)


def fresh_process_ms(backend: str, folder: Path, socket: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", FRESH, backend, str(folder), str(socket)], check=True, timeout=300
    )
    return (time.perf_counter() - started) * 1000


def throughput(socket: Path, folder: Path, clients: int) -> float:
    counts = [0] * clients
    sessions = []
    for index in range(clients):
        repl, _ = open_session("daemon", folder / f"client-{index}", socket)
        sessions.append(repl)
    go = threading.Barrier(clients + 1)

    def run(index: int) -> None:
        go.wait()
        until = time.perf_counter() + THROUGHPUT_SECONDS
        while time.perf_counter() < until:
            sessions[index].execute("x = 1")
            counts[index] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    go.wait()
    for thread in threads:
        thread.join()
    for repl in sessions:
        repl.destroy()
    return sum(counts) / THROUGHPUT_SECONDS


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-backends-") as scratch:
        folder = Path(scratch)
        socket = folder / "daemon.sock"
        start_daemon(DaemonSettings(socket=socket, pool=2, max_sessions=32))
        try:
            figures: dict[str, dict[str, list[float]]] = {
                name: {"start": [], "execute": [], "interrupt": []} for name in BACKENDS
            }
            for round_ in range(rounds):
                for name in BACKENDS:  # alternating, so load hits all alike
                    repl, start = open_session(name, folder / f"{name}-{round_}", socket)
                    figures[name]["start"].append(start)
                    figures[name]["execute"].append(execute_ms(repl))
                    figures[name]["interrupt"].append(interrupt_ms(repl))
                    repl.destroy()
            base = {key: statistics.median(figures["native"][key]) for key in figures["native"]}
            print(f"{rounds} sessions per backend, medians (ratio against native)")
            print(f"{'backend':<9} {'start ms':>16} {'execute ms':>16} {'interrupt ms':>16}")
            rows: dict[str, list[Row]] = {"start": [], "execute": [], "interrupt": []}
            for name in BACKENDS:
                cells = []
                for key in ("start", "execute", "interrupt"):
                    value = statistics.median(figures[name][key])
                    cells.append(f"{value:8.2f} ({value / base[key]:4.2f}x)")
                    if name != "native":
                        rows[key].append(Row(label=name, baseline=base[key], subject=value))
                print(f"{name:<9} " + " ".join(f"{cell:>16}" for cell in cells))
            fresh: dict[str, list[float]] = {"wasm": [], "daemon": []}
            for round_ in range(rounds):
                for name in fresh:
                    fresh[name].append(fresh_process_ms(name, folder / f"fresh-{round_}", socket))
            wasm_fresh = statistics.median(fresh["wasm"])
            daemon_fresh = statistics.median(fresh["daemon"])
            print(
                f"a fresh process's first cell: wasm in process {wasm_fresh:.0f} ms, "
                f"through the daemon {daemon_fresh:.0f} ms ({daemon_fresh / wasm_fresh:.2f}x)"
            )
            print("daemon: trivial executes per second, all clients together")
            for clients in (1, 4, 16):
                rate = throughput(socket, folder / f"throughput-{clients}", clients)
                print(f"  {clients:>2} clients: {rate:8.0f} /s")
            titles = {
                "start": "A session's start",
                "execute": "A trivial execute",
                "interrupt": "An interrupt, to the cell's end",
            }
            note = f"Medians of {rounds} sessions a backend, alternating; native is no sandbox."
            saved = [
                Figure(title=titles[key], baseline="native backend", subject="backend",
                       unit="ms", rows=rows[key], note=note)
                for key in ("start", "execute", "interrupt")
            ]  # fmt: skip
            save("bench_backends", "The REPL backends", saved)
        finally:
            stop_daemon(socket)


if __name__ == "__main__":
    given = arguments()
    main(int(given[0]) if given else 5)
