"""The agent server under load: requests per second and latency for SQL and Python chats with
1, 8 and 32 concurrent clients, against baselines measured in the same run.

    .venv/bin/python bench/bench_server.py

The server is `sandbox-kernel serve` as users start it (2 workers, a queue of 64, the example
datasets, Python on), reached over HTTP by httpx clients on threads; each chat is an explicit
`SQL:` or `PYTHON:` message (the golden retail queries), timed from the request to the `done`
event. Baselines: the same request through the runner in-process (`run_request`, one at a
time: the cost of the sandbox without HTTP), and the SQL on the host's own sqlite3 over the
same CSV files (no sandbox at all). Latency ratios are p50 against the in-process runner.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from record import Figure, Row, save

from sandbox_kernel.runner import RunnerSettings, run_request

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO / "datasets" / "datasets.toml"
GOLDEN = REPO / "datasets" / "golden"
TOKEN = "bench-token-0123456789abcdef"
CLIENTS = (1, 8, 32)
PER_RUN = 48  # chats per measurement (split across the clients)


def start(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {
        **os.environ,
        "SANDBOX_KERNEL_DATASETS": str(DATASETS),
        "SANDBOX_KERNEL_CAPSULES": str(folder / "capsules.sqlite3"),
        "ENABLE_PYTHON_EXECUTION": "1",
    }
    command = [str(Path(sys.executable).parent / "sandbox-kernel"), "serve", "--port", "0"]
    process = subprocess.Popen(
        [*command, "--token", TOKEN, "--workers", "2", "--queue", "64"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert process.stdout is not None
    found = re.search(r"open (http://\S+?)/\?token", process.stdout.readline().decode())
    assert found, "the server printed no link"
    url = found.group(1)
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)


def chat(client: httpx.Client, message: str) -> float:
    started = time.perf_counter()
    body = {"message": message, "dataset_id": "retail"}
    with client.stream("POST", "/chat", json=body) as answer:
        text = answer.read().decode()
    assert answer.status_code == 200 and '"status": "success"' in text, text[-500:]
    return time.perf_counter() - started


def load(url: str, message: str, clients: int) -> tuple[float, list[float]]:
    """(chats per second, latencies) for `clients` clients sharing PER_RUN chats."""
    latencies: list[float] = []
    lock = threading.Lock()
    each = max(1, PER_RUN // clients)

    def client_loop() -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=url, headers=headers, timeout=300) as client:
            for _ in range(each):
                took = chat(client, message)
                with lock:
                    latencies.append(took)

    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(latencies) / (time.perf_counter() - began), latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def in_process(settings: RunnerSettings, request: dict[str, str], n: int = 15) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        assert run_request(request, settings=settings).ok
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def native_sql(sql: str, n: int = 15) -> float:
    """The SQL on the host's sqlite3: load the CSVs into memory, query."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        db = sqlite3.connect(":memory:")
        for file in (REPO / "datasets" / "retail").glob("*.csv"):
            with file.open(newline="") as handle:
                rows = list(csv.reader(handle))
            columns = ", ".join(f'"{c}"' for c in rows[0])
            db.execute(f"CREATE TABLE {file.stem} ({columns})")
            marks = ", ".join("?" * len(rows[0]))
            db.executemany(f"INSERT INTO {file.stem} VALUES ({marks})", rows[1:])
        db.execute(sql).fetchall()
        db.close()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    sql = (GOLDEN / "retail.sql").read_text()
    python = (GOLDEN / "retail.py").read_text()
    with tempfile.TemporaryDirectory() as folder:
        settings = RunnerSettings(
            datasets=DATASETS,
            capsules=Path(folder) / "in-process.sqlite3",
            enable_python_execution=True,
        )
        base = {"dataset_id": "retail"}
        baselines = {
            "sql": in_process(settings, {**base, "query_type": "sql", "sql": sql}),
            "python": in_process(settings, {**base, "query_type": "python", "python_code": python}),
        }
        host_sql = native_sql(sql)
        print(f"in-process runner (no HTTP), median of 15: SQL {baselines['sql'] * 1000:.0f} ms, "
              f"Python {baselines['python'] * 1000:.0f} ms; host sqlite3 (no sandbox): "
              f"{host_sql * 1000:.2f} ms")  # fmt: skip
        process, url = start(Path(folder))
        try:
            chat(httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}),
                 f"SQL: {sql}")  # fmt: skip
            print(f"{'kind':<7} {'clients':>7} {'chats/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
                  f"{'p50 / in-process':>17}")  # fmt: skip
            results = []
            for kind, message in (("sql", f"SQL: {sql}"), ("python", f"PYTHON: {python}")):
                for clients in CLIENTS:
                    rate, latencies = load(url, message, clients)
                    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
                    ratio = p50 / baselines[kind]
                    print(f"{kind:<7} {clients:>7} {rate:>8.2f} {p50 * 1000:>8.0f} "
                          f"{p99 * 1000:>8.0f} {ratio:>16.2f}x", flush=True)  # fmt: skip
                    results.append({"kind": kind, "clients": clients, "per_second": rate,
                                    "p50_ms": p50 * 1000, "p99_ms": p99 * 1000})  # fmt: skip
            print(json.dumps({"baselines_ms": {k: v * 1000 for k, v in baselines.items()},
                              "host_sqlite_ms": host_sql * 1000, "load": results}))  # fmt: skip
            _save(baselines, results)
        finally:
            process.terminate()
            process.wait(timeout=30)


def _save(baselines: dict[str, float], results: list[dict[str, float]]) -> None:
    """The p50 latencies against the in-process runner, one figure per kind of chat."""
    figures = []
    for kind, name in (("sql", "SQL"), ("python", "Python")):
        rows = [
            Row(
                label=f"{int(r['clients'])} clients, p50 ({r['per_second']:.1f} chats/s)",
                baseline=baselines[kind] * 1000,
                subject=r["p50_ms"],
            )
            for r in results
            if r["kind"] == kind
        ]
        figures.append(
            Figure(
                title=f"{name} chats over HTTP",
                baseline="in-process runner, one at a time",
                subject="sandbox-kernel serve",
                unit="ms",
                rows=rows,
                note="Latency from the request to the done event; the label gives the rate.",
            )
        )
    save("bench_server", "The agent server under load", figures)


if __name__ == "__main__":
    main()
