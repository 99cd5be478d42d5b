"""Model calls from the guest: what the door adds to llm_query, and llm_query_batched's fan-out.

A real OpenAI-compatible server answers every call: http.server's ThreadingHTTPServer on
127.0.0.1 (a thread of this process), HTTP/1.1 keep-alive, the Chat Completions JSON shape,
a set delay before each answer. Both sides use the same OpenAICompatibleProvider inside the
same LLMService, so the only difference between them is the way in.

1. llm_query overhead, server delay 0. A cell calls llm_query(prompt) in a loop and times
   each call inside the guest with time.perf_counter (the guest's JSON, the door, the bridge,
   the HTTP call, the answer back into the guest); the baseline is service.query of the same
   prompt from the host, timed the same way. Both are warmed up first; CALLS of each run in 4
   alternating blocks. added = guest median - host median. Goal: < 1 ms added per call.
   A check from outside the guest, which also sees tails the medians hide: (execute() of the
   cell - execute() of the same cell with 0 calls) / calls - the host's mean per call.
   Rows: a short prompt and answer, a ~10 KB prompt, a ~10 KB answer.
2. llm_query_batched of 32 prompts, server 100 ms per answer, service concurrency 8 (the
   bound: 32 / 8 x 100 ms = 400 ms) and 32 (bound 100 ms), timed inside the guest; beside it
   the same fan-out on the host (a thread pool of that size over service.query) and, for
   context, 32 llm_query calls one after another (bound 3.2 s).

The machine is shared: read medians, not single runs.
Usage: .venv/bin/python bench/bench_llm.py [CALLS]
"""

from __future__ import annotations

import concurrent.futures
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sandbox_kernel import ExecutionPolicy, REPLConfig, create_repl
from sandbox_kernel.llm import LLMService, OpenAICompatibleProvider, RetryPolicy
from sandbox_kernel.repl.sandbox import ReplSandbox

BLOCKS = 4  # host and guest calls come in alternating blocks, so a burst of load hits both
WARMUP = 20
KB10 = 10_000
BATCH = 32
BATCH_DELAY_SECONDS = 0.1
BATCH_ROUNDS = 5
POLICY = ExecutionPolicy(fuel_budget=10**12)  # fuel is not what is measured here
TIMEOUT_MS = 120_000
GOAL_ADDED_MS = 1.0


def text(chars: int) -> str:
    """Plain English-like text of exactly `chars` characters (ASCII, as most prompts are)."""
    words = "the quick brown fox jumps over the lazy dog and keeps running "
    return (words * (chars // len(words) + 1))[:chars]


# -- the model server ---------------------------------------------------------------------------


class ModelServer(ThreadingHTTPServer):
    """POST /v1/chat/completions: waits `delay_seconds`, answers `answer_chars` characters."""

    daemon_threads = True
    request_queue_size = 128  # a batch opens up to 32 connections at once

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ChatHandler)
        self.delay_seconds = 0.0
        self.answer_chars = 2

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class ChatHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection serves many calls
    disable_nagle_algorithm = True  # headers and body are two writes
    server: ModelServer

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length))
        prompt = request["messages"][-1]["content"]
        if self.server.delay_seconds:
            time.sleep(self.server.delay_seconds)
        answer = text(self.server.answer_chars)
        body = json.dumps(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request.get("model", "bench"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": len(prompt) // 4,
                    "completion_tokens": len(answer) // 4,
                    "total_tokens": (len(prompt) + len(answer)) // 4,
                },
            }
        ).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


# -- helpers ------------------------------------------------------------------------------------


def summary(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), statistics.quantiles(samples, n=10)[-1]


def session(service: LLMService, workspace: Path) -> ReplSandbox:
    """A WebAssembly session whose llm_query the service answers (start it with `with`)."""
    policy = POLICY.with_overrides(timeout_seconds=TIMEOUT_MS / 1000)
    config = REPLConfig(policy=policy, workspace=workspace, backend="wasm")
    repl = create_repl(service.configure(config))
    assert isinstance(repl, ReplSandbox)
    return repl


def guest_numbers(repl: ReplSandbox, code: str) -> list[float]:
    """Run a cell that prints one JSON list of numbers; the list."""
    result = repl.execute(code)
    assert result.ok, result.error
    numbers: list[float] = json.loads(result.stdout)
    return numbers


def loop_cell(prompt: str, calls: int, answer_chars: int) -> str:
    """A cell that times `calls` llm_query calls, each inside the guest."""
    return (
        "import json, time\n"
        f"_prompt = {prompt!r}\n"
        "_took = []\n"
        f"for _ in range({calls}):\n"
        "    _start = time.perf_counter()\n"
        "    _answer = llm_query(_prompt)\n"
        "    _took.append((time.perf_counter() - _start) * 1e3)\n"
        f"    assert len(_answer) == {answer_chars}, len(_answer)\n"
        "print(json.dumps(_took))\n"
    )


def host_calls(ask: Callable[[str], str], prompt: str, calls: int) -> list[float]:
    took = []
    for _ in range(calls):
        start = time.perf_counter()
        ask(prompt)
        took.append((time.perf_counter() - start) * 1e3)
    return took


# -- 1. llm_query overhead ----------------------------------------------------------------------


class Row:
    """One prompt and answer size: per-call samples, and the cells' execute() wall times."""

    def __init__(self, prompt: str, answer_chars: int) -> None:
        self.prompt, self.answer_chars = prompt, answer_chars
        self.host: list[float] = []
        self.guest: list[float] = []
        self.cells: list[float] = []  # execute() of a cell of `per_block` calls, ms
        self.empty_cells: list[float] = []  # execute() of the same cell with 0 calls, ms

    def measure(
        self, server: ModelServer, service: LLMService, repl: ReplSandbox, calls: int
    ) -> None:
        server.answer_chars = self.answer_chars
        per_block = calls // BLOCKS
        guest_numbers(repl, loop_cell(self.prompt, WARMUP, self.answer_chars))
        host_calls(service.query, self.prompt, WARMUP)
        cell = loop_cell(self.prompt, per_block, self.answer_chars)
        empty = loop_cell(self.prompt, 0, self.answer_chars)
        for _ in range(BLOCKS):
            self.host += host_calls(service.query, self.prompt, per_block)
            start = time.perf_counter()
            self.guest += guest_numbers(repl, cell)
            self.cells.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            guest_numbers(repl, empty)
            self.empty_cells.append((time.perf_counter() - start) * 1e3)

    def per_call_by_cell(self, per_block: int) -> float:
        """Mean ms per call from the outside: (cell - empty cell) / calls, medians."""
        return (statistics.median(self.cells) - statistics.median(self.empty_cells)) / per_block


def overhead(
    server: ModelServer, provider: OpenAICompatibleProvider, workspace: Path, calls: int
) -> None:
    server.delay_seconds = 0.0
    service = LLMService(provider)
    rows = {
        "short prompt, short answer": Row(text(20), 2),
        "10 KB prompt, short answer": Row(text(KB10), 2),
        "short prompt, 10 KB answer": Row(text(20), KB10),
    }
    per_block = calls // BLOCKS
    with session(service, workspace) as repl:
        for row in rows.values():
            row.measure(server, service, repl, calls)
    print(
        f"\n1. llm_query, server delay 0: ms per call, median / p90 of {per_block * BLOCKS}"
        f" after {WARMUP} warm-up"
    )
    print(
        f"{'':<28}{'host query()':>15}{'guest llm_query':>18}{'added':>8}{'ratio':>8}"
        f"{'mean added, by cell':>21}"
    )
    worst = 0.0
    for label, row in rows.items():
        (h_med, h_p90), (g_med, g_p90) = summary(row.host), summary(row.guest)
        worst = max(worst, g_med - h_med)
        by_cell = row.per_call_by_cell(per_block) - statistics.fmean(row.host)
        print(
            f"{label:<28}{h_med:7.3f} /{h_p90:6.3f}{g_med:10.3f} /{g_p90:6.3f}"
            f"{g_med - h_med:8.3f}{g_med / h_med:7.2f}x{by_cell:21.3f}"
        )
    print(
        "guest = each call timed inside the guest; added = guest - host medians;"
        "\nmean added, by cell = (execute() of a cell of calls - of the same cell without calls)"
        " / calls - host mean"
    )
    verdict = "met" if worst < GOAL_ADDED_MS else "NOT met"
    print(f"goal < {GOAL_ADDED_MS:g} ms added per call: {verdict} (worst row: {worst:.3f} ms)")


# -- 2. llm_query_batched -----------------------------------------------------------------------

BATCH_CELL = (
    "import json, time\n"
    "_prompts = [f'question {{i}}' for i in range({n})]\n"
    "_start = time.perf_counter()\n"
    "_answers = llm_query_batched(_prompts)\n"
    "_took = (time.perf_counter() - _start) * 1e3\n"
    "assert len(_answers) == {n}\n"
    "print(json.dumps([_took]))\n"
)
SEQUENTIAL_CELL = (
    "import json, time\n"
    "_start = time.perf_counter()\n"
    "for _i in range({n}):\n"
    "    llm_query(f'question {{_i}}')\n"
    "print(json.dumps([(time.perf_counter() - _start) * 1e3]))\n"
)


def host_batch(service: LLMService, concurrency: int) -> float:
    prompts = [f"question {i}" for i in range(BATCH)]
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        answers = list(pool.map(service.query, prompts))
    assert len(answers) == BATCH
    return (time.perf_counter() - start) * 1e3


def batched(server: ModelServer, provider: OpenAICompatibleProvider, workspace: Path) -> None:
    server.delay_seconds, server.answer_chars = BATCH_DELAY_SECONDS, 2
    delay_ms = BATCH_DELAY_SECONDS * 1e3
    print(
        f"\n2. llm_query_batched of {BATCH} prompts, server {delay_ms:g} ms per answer: "
        f"wall ms inside the guest, median of {BATCH_ROUNDS} after 1 warm-up"
    )
    print(
        f"{'concurrency':<14}{'bound':>8}{'guest':>9}{'/bound':>8}{'host pool':>11}{'/bound':>8}"
        f"{'guest/host':>12}"
    )
    for concurrency in (8, 32):
        service = LLMService(provider, concurrency=concurrency)
        bound = -(-BATCH // concurrency) * delay_ms
        with session(service, workspace) as repl:
            cell = BATCH_CELL.format(n=BATCH)
            guest_numbers(repl, cell)
            host_batch(service, concurrency)
            guest, host = [], []
            for _ in range(BATCH_ROUNDS):
                guest += guest_numbers(repl, cell)
                host.append(host_batch(service, concurrency))
        g, h = statistics.median(guest), statistics.median(host)
        print(
            f"{concurrency:<14}{bound:8.0f}{g:9.1f}{g / bound:7.2f}x{h:11.1f}{h / bound:7.2f}x"
            f"{g / h:11.2f}x"
        )
    with session(LLMService(provider), workspace) as repl:
        (took,) = guest_numbers(repl, SEQUENTIAL_CELL.format(n=BATCH))
    bound = BATCH * delay_ms
    print(f"{'sequential':<14}{bound:8.0f}{took:9.1f}{took / bound:7.2f}x")
    print(
        f"bound = ceil({BATCH} / concurrency) x delay; guest = llm_query_batched, timed inside "
        f"the guest\n(sequential: {BATCH} llm_query calls in a loop, once); host pool = "
        "ThreadPoolExecutor(concurrency).map(service.query) on the host"
    )


def main() -> int:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    server = ModelServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    provider = OpenAICompatibleProvider(
        server.base_url, "bench", retry=RetryPolicy(max_retries=0, timeout_seconds=30)
    )
    with tempfile.TemporaryDirectory(prefix="bench-llm-") as folder:
        overhead(server, provider, Path(folder), calls)
        batched(server, provider, Path(folder))
    provider.close()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
