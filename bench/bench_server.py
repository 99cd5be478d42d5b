"""The agent server under load: chats per second and latency with 1, 8 and 32 concurrent
clients, for each way of serving, against the in-process runner measured in the same run.

    .venv/bin/python bench/bench_server.py [--no-save]

Ways of serving, each `sandbox-kernel serve` as users start it (the example datasets, Python
on, a queue of 64):
- threads: `--in-process --workers 2`, runs on two threads of the server's own process (how
  the server ran before worker processes: one GIL);
- 1 worker, 2 workers: worker processes (runner/workers.py);
- 2 replicas: two servers with one worker each behind Debian's nginx, capsules in Debian's
  PostgreSQL (the deployment recipe of docs/runner.md, on one machine).
Each chat is an explicit `SQL:` or `PYTHON:` message (the golden retail queries), timed from
the request to the `done` event by a lean asyncio client (raw HTTP/1.1 on keep-alive
connections: httpx's threads cost a quarter of a core on this 2-core machine, which the
servers then lacked). "Server-side" is the done event's elapsed_ms, measured by the server.

Baselines: the same request through the runner in this process (`run_request`, one at a
time: the sandbox's cost without HTTP), and the SQL on the host's own sqlite3 over the same
CSV files (no sandbox at all).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from record import Figure, Row, save

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sandbox_kernel.runner import RunnerSettings, run_request  # noqa: E402
from tests.services import nginx, postgres  # noqa: E402

DATASETS = REPO / "datasets" / "datasets.toml"
GOLDEN = REPO / "datasets" / "golden"
TOKEN = "bench-token-0123456789abcdef"
CLIENTS = (1, 8, 32)
PER_RUN = 64  # chats per measurement (split across the clients)
WAYS = ("threads", "1 worker", "2 workers", "2 replicas")


def start(folder: Path, *arguments: str) -> tuple[subprocess.Popen[bytes], str]:
    """`sandbox-kernel serve` with `arguments`, once it answers; (process, URL)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SANDBOX_KERNEL_DATASETS": str(DATASETS),
        "SANDBOX_KERNEL_CAPSULES": str(folder / "capsules.sqlite3"),
        "ENABLE_PYTHON_EXECUTION": "1",
    }
    command = [str(Path(sys.executable).parent / "sandbox-kernel"), "serve", "--port", "0"]
    process = subprocess.Popen(
        [*command, "--token", TOKEN, "--queue", "64", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert process.stdout is not None
    found = re.search(r"open (http://\S+?)/\?token", process.stdout.readline().decode())
    assert found, "the server printed no link"
    url = found.group(1)
    asyncio.run(_until_up(url))
    return process, url


async def _until_up(url: str) -> None:
    host, port = _address(url)
    while True:
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            status = await reader.readline()
            writer.close()
            if b" 200 " in status:
                return
        except OSError:
            pass
        await asyncio.sleep(0.2)


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


@contextmanager
def serving(way: str, folder: Path) -> Iterator[str]:
    """The server(s) for `way`, stopped at the end; the URL clients use."""
    with ExitStack() as stack:
        processes: list[subprocess.Popen[bytes]] = []
        stack.callback(_stop_all, processes)
        if way == "2 replicas":
            db = stack.enter_context(postgres())
            urls = []
            for i in (1, 2):
                process, url = start(folder / f"r{i}", "--workers", "1", "--database", db.url)
                processes.append(process)
                urls.append(url)
            yield stack.enter_context(nginx(folder / "nginx", urls))
            return
        workers = {"threads": ["--in-process", "--workers", "2"], "1 worker": ["--workers", "1"]}
        process, url = start(folder / way.replace(" ", "-"), *workers.get(way, ["--workers", "2"]))
        processes.append(process)
        yield url


def _stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=60)
        if process.stdout is not None:
            process.stdout.close()


class Client:
    """One keep-alive connection that sends chats and reads each to its done event."""

    def __init__(self, url: str) -> None:
        self.host, self.port = _address(url)
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def chat(self, message: str) -> tuple[float, float]:
        """(seconds to the done event, the server's elapsed_ms)."""
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        body = json.dumps({"message": message, "dataset_id": "retail"}).encode()
        started = time.perf_counter()
        writer.write(
            f"POST /chat HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        status = await reader.readline()
        assert b" 200 " in status, status
        while (await reader.readline()).strip():  # the headers
            pass
        text = b""
        while True:  # chunked: size line, data, CRLF; a zero size ends the response
            size = int((await reader.readline()).strip(), 16)
            if size == 0:
                await reader.readline()
                break
            text += await reader.readexactly(size + 2)
        took = time.perf_counter() - started
        assert b'"status": "success"' in text, text[-500:]
        done = text[text.rindex(b"event: done") :].split(b"data: ", 1)[1].split(b"\n", 1)[0]
        return took, float(json.loads(done)["elapsed_ms"])


async def load(url: str, message: str, clients: int) -> tuple[float, list[float], list[float]]:
    """(chats per second, latencies, server-side ms) for `clients` clients, PER_RUN chats."""
    each = max(1, PER_RUN // clients)
    latencies: list[float] = []
    server: list[float] = []

    async def client_loop() -> None:
        client = Client(url)
        for _ in range(each):
            took, elapsed = await client.chat(message)
            latencies.append(took)
            server.append(elapsed)

    began = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(clients)))
    return len(latencies) / (time.perf_counter() - began), latencies, server


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-save", action="store_true", help="print only")
    args = parser.parse_args()
    sql = (GOLDEN / "retail.sql").read_text()
    python = (GOLDEN / "retail.py").read_text()
    messages = {"sql": f"SQL: {sql}", "python": f"PYTHON: {python}"}
    with tempfile.TemporaryDirectory() as folder:
        settings = RunnerSettings(
            datasets=DATASETS,
            capsules=Path(folder) / "in-process.sqlite3",
            enable_python_execution=True,
        )
        base = {"dataset_id": "retail"}
        in_process(settings, {**base, "query_type": "sql", "sql": sql}, n=2)  # images made
        baselines = {
            "sql": in_process(settings, {**base, "query_type": "sql", "sql": sql}),
            "python": in_process(settings, {**base, "query_type": "python", "python_code": python}),
        }
        host_sql = native_sql(sql)
        print(f"in-process runner (no HTTP), median of 15: SQL {baselines['sql'] * 1000:.0f} ms, "
              f"Python {baselines['python'] * 1000:.0f} ms; host sqlite3 (no sandbox): "
              f"{host_sql * 1000:.2f} ms")  # fmt: skip
        print(f"{'way':<11} {'kind':<7} {'clients':>7} {'chats/s':>8} {'p50 ms':>7} "
              f"{'p99 ms':>7} {'server p50':>10}")  # fmt: skip
        results: list[dict[str, Any]] = []
        for way in WAYS:
            with serving(way, Path(folder) / "servers") as url:
                for kind, message in messages.items():
                    asyncio.run(load(url, message, 2))  # connections and images warm
                    for clients in CLIENTS:
                        rate, latencies, server = asyncio.run(load(url, message, clients))
                        row = {
                            "way": way, "kind": kind, "clients": clients, "per_second": rate,
                            "p50_ms": percentile(latencies, 0.5) * 1000,
                            "p99_ms": percentile(latencies, 0.99) * 1000,
                            "server_p50_ms": percentile(server, 0.5),
                        }  # fmt: skip
                        results.append(row)
                        print(f"{way:<11} {kind:<7} {clients:>7} {rate:>8.1f} "
                              f"{row['p50_ms']:>7.0f} {row['p99_ms']:>7.0f} "
                              f"{row['server_p50_ms']:>10.0f}", flush=True)  # fmt: skip
        print(json.dumps({"baselines_ms": {k: v * 1000 for k, v in baselines.items()},
                          "host_sqlite_ms": host_sql * 1000, "load": results}))  # fmt: skip
        if not args.no_save:
            _save(baselines, results)


def _rate(results: list[dict[str, Any]], way: str, kind: str, clients: int) -> float:
    return next(
        r["per_second"]
        for r in results
        if r["way"] == way and r["kind"] == kind and r["clients"] == clients
    )


def _save(baselines: dict[str, float], results: list[dict[str, Any]]) -> None:
    """Throughput of each way against one worker process; latency at one client against the
    in-process runner."""
    figures = []
    for kind, name in (("sql", "SQL"), ("python", "Python")):
        rows = [
            Row(
                label=f"{way}, {clients} clients",
                baseline=_rate(results, "1 worker", kind, clients),
                subject=_rate(results, way, kind, clients),
            )
            for way in ("threads", "2 workers", "2 replicas")
            for clients in (8, 32)
        ]
        figures.append(
            Figure(
                title=f"{name} chats per second",
                baseline="1 worker process",
                subject="this way of serving",
                unit="chats/s",
                rows=rows,
                higher_is_better=True,
                note="2 cores: the server, its workers and the clients share them.",
            )
        )
        one = [r for r in results if r["kind"] == kind and r["clients"] == 1]
        figures.append(
            Figure(
                title=f"{name} chat at one client",
                baseline="in-process runner, one at a time",
                subject="server-side (the done event's elapsed_ms), p50",
                unit="ms",
                rows=[
                    Row(label=r["way"], baseline=baselines[kind] * 1000, subject=r["server_p50_ms"])
                    for r in one
                ],
                note="The server's own time for a chat: planning, the run, the capsule.",
            )
        )
    save("bench_server", "The agent server under load", figures)


if __name__ == "__main__":
    main()
