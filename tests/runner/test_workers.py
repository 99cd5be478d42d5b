"""The agent server's worker processes when idle ones die (issue 47, item 11): a chat is
never failed for a worker that died before it was given the chat. Dead idle workers are
replaced (at once, or when a run finds one gone before it said it began) and the chat runs on
a live one; only a worker lost while running a query reports that.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.attacks.test_worker_attacks import result_of, workers_of
from tests.runner.serving import Server, Serving

CHATS = 4
QUERY = "SQL: SELECT count(*) AS n FROM orders"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    serving = Serving(tmp_path)
    try:
        yield serving.start("--workers", "2", name="idle-workers")
    finally:
        serving.stop()


def wait_for_workers(server: Server, count: int, avoid: set[int]) -> list[int]:
    deadline = time.monotonic() + 120
    while True:
        pids = [pid for pid in workers_of(server) if pid not in avoid]
        if len(pids) >= count:
            return pids
        assert time.monotonic() < deadline, f"only {pids} of {count} workers came up"
        time.sleep(0.1)


def kill(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("rounds", [3], ids=["3-rounds"])
def test_chats_after_the_idle_workers_were_killed_all_run(server: Server, rounds: int) -> None:
    killed: set[int] = set()
    for n in range(rounds):
        pids = wait_for_workers(server, 2, killed)
        kill(pids)  # both idle: no chat is running
        killed.update(pids)
        for chat in range(CHATS):
            result = result_of(server.chat(QUERY))
            assert result["status"] == "success", (n, chat, result.get("error"))


def test_a_chat_right_after_one_idle_worker_died_runs(server: Server) -> None:
    pids = wait_for_workers(server, 2, set())
    kill(pids[:1])
    results = [result_of(server.chat(QUERY)) for _ in range(CHATS)]
    assert [r["status"] for r in results] == ["success"] * CHATS, [r.get("error") for r in results]
    assert len(wait_for_workers(server, 2, set(pids[:1]))) == 2  # the dead one was replaced
