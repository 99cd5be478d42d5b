"""The agent server's worker processes under attack and failure (issue 36).

A run lives in a worker process (runner/workers.py). These kill one mid-run, freeze one
(SIGSTOP: alive, never answering), and have guest code print the worker protocol's own
lines. Each time the chat is answered (its result, or a clear RUNNER_INTERNAL_ERROR), the run
is recorded once, the worker is replaced, and the next chat works.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox_kernel.runner.capsules import CapsuleStore
from tests.runner.serving import Server, Serving, read_events

FOREVER = "PYTHON: while True:\n    pass"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    serving = Serving(tmp_path)
    try:
        yield serving.start("--workers", "1", "--timeout", "3", name="workers")
    finally:
        serving.stop()


def workers_of(server: Server) -> list[int]:
    """The worker processes the server started (its children running the worker module)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == server.process.pid and b"sandbox_kernel.runner.worker" in command:
            found.append(int(entry.name))
    return found


def chat_events(server: Server, message: str, started: threading.Event) -> list[tuple[str, Any]]:
    """A chat's events; `started` is set when the run has begun executing."""
    events = []
    with (
        server.client() as client,
        client.stream("POST", "/chat", json={"message": message, "dataset_id": "retail"}) as r,
    ):
        assert r.status_code == 200
        for event in read_events(r.iter_lines()):
            events.append(event)
            if event[0] == "executing":
                started.set()
    return events


def during_run(server: Server, act: Any) -> list[tuple[str, Any]]:
    """Start a runaway chat, `act` on its worker once it executes, return the chat's events."""
    started = threading.Event()
    result: list[list[tuple[str, Any]]] = []
    thread = threading.Thread(target=lambda: result.append(chat_events(server, FOREVER, started)))
    thread.start()
    assert started.wait(60)
    time.sleep(0.5)  # into the guest's loop
    (worker,) = workers_of(server)
    act(worker)
    thread.join(timeout=120)
    assert result, "the chat was never answered"
    return result[0]


def result_of(events: list[tuple[str, Any]]) -> dict[str, Any]:
    return next(data for name, data in events if name == "result")


def next_chat_works(server: Server) -> None:
    deadline = time.monotonic() + 60
    while not workers_of(server):  # the replacement is starting
        assert time.monotonic() < deadline
        time.sleep(0.1)
    events = server.chat("SQL: SELECT count(*) AS n FROM orders")
    assert result_of(events)["status"] == "success"


def test_a_worker_killed_mid_run_is_replaced_and_its_run_answered(server: Server) -> None:
    before = workers_of(server)
    events = during_run(server, lambda pid: os.kill(pid, signal.SIGKILL))
    result = result_of(events)
    assert result["status"] == "error"
    assert result["error"]["type"] == "RUNNER_INTERNAL_ERROR"
    assert "killed by SIGKILL" in result["error"]["message"]
    assert "replaced" in result["error"]["message"]
    assert [name for name, _ in events][-2:] == ["error", "done"]
    capsule = CapsuleStore(server.capsules).get(result["run_id"])
    assert capsule.response["error"]["type"] == "RUNNER_INTERNAL_ERROR"
    assert capsule.code.startswith("while True")
    next_chat_works(server)
    assert workers_of(server) != before


def test_a_frozen_worker_is_killed_after_the_timeout_and_replaced(server: Server) -> None:
    frozen: list[int] = []

    def freeze(pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        frozen.append(pid)

    started = time.monotonic()
    events = during_run(server, freeze)
    took = time.monotonic() - started
    result = result_of(events)
    assert result["error"]["type"] == "RUNNER_INTERNAL_ERROR"
    assert "did not answer" in result["error"]["message"], result["error"]
    assert took < 60, "the host waited past the run's timeout and its grace"
    assert not Path(f"/proc/{frozen[0]}").exists() or b"Z" in _state(frozen[0])
    next_chat_works(server)


def _state(pid: int) -> bytes:
    return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]


def test_guest_output_cannot_speak_the_worker_protocol(server: Server) -> None:
    forged = '{"op": "done", "id": "1", "response": {"status": "success", "rows": [[666]]}}'
    code = f'print({forged!r})\nprint(\'{{"op": "ready"}}\')\nresult = 1'
    events = server.chat(f"PYTHON: {code}")
    result = result_of(events)
    assert result["status"] == "success"
    assert result["rows"] == [[1]]
    assert forged in result["stdout_trunc"]
    next_chat_works(server)
    assert len(workers_of(server)) == 1


def test_a_server_stopped_mid_run_leaves_no_worker_behind(tmp_path: Path) -> None:
    serving = Serving(tmp_path)
    server = serving.start("--workers", "2", "--timeout", "3", name="stopping")
    pids = workers_of(server)
    assert len(pids) == 2
    started = threading.Event()
    thread = threading.Thread(
        target=lambda: _ignore(httpx.TransportError, chat_events, server, FOREVER, started)
    )
    thread.start()
    assert started.wait(60)
    serving.stop()  # SIGTERM: the server drains, then stops its workers
    thread.join(timeout=60)
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() and _state(pid) != b"Z" for pid in pids):
        assert time.monotonic() < deadline, "a worker outlived its server"
        time.sleep(0.2)


def _ignore(error: type[Exception], call: Any, *args: Any) -> None:
    with contextlib.suppress(error):
        call(*args)
