"""Attacks on a session's own machinery (issue 12): the door's bookkeeping, batched model
calls, the cell driver the rollback image holds, descriptors across a rollback, and the
workspace quota across executions. Real guests through ReplSandbox; after each attack the host
is unharmed and the session answers (or says plainly that it was rebuilt).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel import ExecutionPolicy, ExecutionStatus, REPLConfig, ReplSandbox
from tests.attacks.conftest import HostGuard


@pytest.fixture
def make(workspace: Path, host: HostGuard) -> Iterator[Any]:
    made: list[ReplSandbox] = []

    def repl(policy: dict[str, Any] | None = None, **config: Any) -> ReplSandbox:
        fields = {"mount_host_dir": workspace, "fuel_budget": 50_000_000_000, **(policy or {})}
        session = ReplSandbox(REPLConfig(policy=ExecutionPolicy(**fields), **config))
        made.append(session)
        session.initialize(context="the context")
        assert session.execute("earlier = 'kept'").ok
        return session

    yield repl
    for session in made:
        session.destroy()
    host.assert_untouched()


FORGED = (
    "import _host, json\n"
    "answers = []\n"
    "for i in range({n}):\n"
    "    frame = {{'op': {op!r}, 'name': 'n%d' % i, 'cell': 10**6 + i, 'found': True,\n"
    "             'value': 'x' * 1000, 'reply': {{'status': 'ok'}}}}\n"
    "    answers.append(_host.call(json.dumps(frame).encode()))\n"
    "refused = sum(b'unexpected' in a for a in answers)"
)


# -- 2. the door's bookkeeping ----------------------------------------------------------------


@pytest.mark.parametrize("op", ["value", "done", "hello", "context"])
def test_forged_bookkeeping_is_refused_counted_and_never_kept(make: Any, op: str) -> None:
    repl = make()
    for _ in range(3):
        result = repl.execute(FORGED.format(n=3000, op=op))
        assert result.ok, result.error
        assert repl.get_variable("refused") >= 999  # refused while the budget lasted
        assert len(repl.bridge.values) == 0 and len(repl.bridge.replies) == 0
    flood = repl.execute(FORGED.format(n=1000, op=op) + "\nimport time\ntime.sleep(0.01)")
    assert flood.status is ExecutionStatus.ERROR
    assert "too many host requests" in (flood.evalue or "")  # bookkeeping spent the budget
    assert repl.execute("earlier").result == {"text/plain": "'kept'"}


# -- 5. batched model calls -------------------------------------------------------------------


def test_a_huge_batch_makes_no_call_past_the_budget(make: Any) -> None:
    calls: list[str] = []
    repl = make(on_llm_query=lambda prompt: calls.append(prompt) or "a")
    result = repl.execute("llm_query_batched(['q'] * 10**6)")
    assert result.status is ExecutionStatus.ERROR
    assert "would pass the limit" in (result.evalue or "")
    assert calls == []
    assert repl.execute("len(llm_query_batched(['q'] * 900))").result == {"text/plain": "900"}
    assert len(calls) == 900


def test_a_batch_stops_when_its_execution_ends(make: Any) -> None:
    lock = threading.Lock()
    calls = [0]

    def slow(prompt: str) -> str:
        with lock:
            calls[0] += 1
        time.sleep(0.05)
        return "a"

    repl = make(on_llm_query=slow, timeout_ms=1_000, llm_concurrency=4)
    result = repl.execute("llm_query_batched(['q'] * 900)")
    assert result.status is ExecutionStatus.TIMEOUT
    time.sleep(0.3)
    with lock:
        after_the_cell = calls[0]
    time.sleep(1.0)
    assert calls[0] == after_the_cell, "model calls went on after the execution ended"
    assert after_the_cell < 200  # 1 s of 4 workers at 50 ms, not 900
    assert repl.execute("earlier").result == {"text/plain": "'kept'"}


# -- 9. the driver in the rollback image ------------------------------------------------------


@pytest.mark.parametrize(
    "tamper",
    [
        "import builtins\nbuiltins.__import__ = None",
        "__sandbox_kernel__.run_cell = lambda *a: None",
        "type(__sandbox_kernel__).run_cell = lambda *a: None",
        "import builtins\nbuiltins.compile = builtins.exec = None",
        "import linecache\nlinecache.cache = None",
        "del __sandbox_kernel__",
    ],
    ids=["import", "instance-method", "class-method", "compile-exec", "linecache", "del-name"],
)
def test_a_cell_cannot_break_the_driver_for_later_cells(make: Any, tamper: str) -> None:
    repl = make()
    tampered = repl.execute(tamper)
    assert "it was put back" in tampered.stderr
    assert repl.execute("import json\nearlier").result == {"text/plain": "'kept'"}
    assert repl.execute("while True: pass").rolled_back  # a rollback restores a working driver
    assert repl.execute("earlier").result == {"text/plain": "'kept'"}


def test_a_session_that_cannot_run_cells_is_rebuilt_and_says_so(make: Any) -> None:
    repl = make()
    assert repl.execute("import sys\nsys.modules['linecache'] = None").ok  # breaks later turns
    broken = repl.execute("earlier")
    assert broken.ename == "SandboxSessionRebuilt"
    assert "rebuilt" in (broken.evalue or "") and "variables are gone" in (broken.evalue or "")
    assert repl.rebuilds == 1
    assert repl.execute("earlier").ename == "NameError"  # said plainly, and true
    assert repl.execute("context").result == {"text/plain": "'the context'"}
    assert repl.execute("1 + 1").result == {"text/plain": "2"}
