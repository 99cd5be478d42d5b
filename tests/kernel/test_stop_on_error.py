"""stop_on_error as clients rely on it (issue 47, item 12): a cell that fails aborts the cells
that were queued behind it, and never one that a client sent after the failure's reply.

Agents and papermill interrupt a runaway cell, wait for its execute_reply, then send the next
cell at once. ipykernel 7.4 ends its aborting with a marker message posted after the reply,
which races the client's next request: that request was aborted in 0-4 of 8 fresh kernels on
ipykernel, 2-6 of 8 on this kernel before it aborted by arrival (kernel/aborts.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernel.conftest import RunningKernel, start_kernel

ROUNDS = 8
RUNAWAY = "print('looping', flush=True)\nwhile True:\n    pass"


@pytest.fixture(params=range(ROUNDS), ids=lambda n: f"kernel{n + 1}")
def new_kernel(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningKernel]:
    """A fresh kernel per round: the race showed most in a kernel's first interrupt."""
    running = start_kernel(tmp_path / f"k{request.param}")
    try:
        yield running
    finally:
        running.shutdown()


def interrupt_runaway(kernel: RunningKernel) -> None:
    """Run a cell that never ends, interrupt it once it runs, and wait for its reply only
    (not its idle status), as agents and papermill do."""
    running = kernel.send(RUNAWAY)
    deadline = time.monotonic() + 120
    while True:  # the cell runs (the session has started): an interrupt now reaches it
        msg = kernel.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == running.msg_id and msg["msg_type"] == "stream":
            break
    time.sleep(0.2)  # into the loop
    kernel.km.interrupt_kernel()
    while True:  # the shell channel only, as papermill waits: the next cell goes at once
        msg = kernel.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == running.msg_id:
            break
    reply = msg["content"]
    assert reply["status"] == "error", reply
    assert reply["ename"] == "KeyboardInterrupt", reply


def test_the_cell_sent_after_an_interrupted_cells_reply_runs(new_kernel: RunningKernel) -> None:
    interrupt_runaway(new_kernel)
    execution = new_kernel.run("after = 41 + 1\nafter")
    assert execution.status == "ok", execution.describe()
    assert execution.result() == "42"


def test_every_round_of_interrupt_then_next_cell_runs(fresh_kernel: RunningKernel) -> None:
    for n in range(ROUNDS):
        interrupt_runaway(fresh_kernel)
        execution = fresh_kernel.run(f"{n} * 2")
        assert execution.status == "ok", f"round {n + 1}: {execution.describe()}"
        assert execution.result() == str(n * 2)


def test_a_cell_queued_behind_a_failing_one_is_aborted(fresh_kernel: RunningKernel) -> None:
    failing = fresh_kernel.send("import time\ntime.sleep(1)\n1 / 0")
    queued = fresh_kernel.send("queued = 'ran'")
    assert fresh_kernel.collect(failing).reply["ename"] == "ZeroDivisionError"
    assert fresh_kernel.collect(queued).status == "aborted"
    after = fresh_kernel.run("'queued' in dir()")
    assert after.status == "ok", after.describe()
    assert after.result() == "False"


def test_stop_on_error_false_keeps_the_queued_cell(fresh_kernel: RunningKernel) -> None:
    failing = fresh_kernel.send("import time\ntime.sleep(1)\n1 / 0", stop_on_error=False)
    queued = fresh_kernel.send("queued = 'ran'\nqueued")
    assert fresh_kernel.collect(failing).status == "error"
    assert fresh_kernel.collect(queued).result() == "'ran'"


def test_an_interrupt_while_the_session_starts_ends_the_waiting_cell(tmp_path: Path) -> None:
    """An interrupt sent as soon as the kernel handles a cell, before the cell reaches the guest
    (the session still starting, or the kernel's own steps before the turn), ends the cell: it
    was lost, and the cell then ran on, a runaway nothing stopped. Wherever the interrupt
    lands, the reply is a KeyboardInterrupt, and the session works after it."""
    kernel = start_kernel(tmp_path / "k")
    try:
        running = kernel.send(RUNAWAY)
        deadline = time.monotonic() + 120
        while True:  # the cell's handler runs (before it SIGINT is ignored, as on ipykernel)
            msg = kernel.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            mine = msg["parent_header"].get("msg_id") == running.msg_id
            if mine and msg["msg_type"] == "execute_input":
                break
        kernel.km.interrupt_kernel()
        execution = kernel.collect(running, timeout=120)
        assert execution.status == "error", execution.describe()
        assert execution.reply["ename"] == "KeyboardInterrupt", execution.describe()
        after = kernel.run("41 + 1")
        assert after.status == "ok", after.describe()
        assert after.result() == "42"
    finally:
        kernel.shutdown()
