"""cancel(): the soft stage (KeyboardInterrupt at the next safe point, state kept as in IPython),
the hard stage (after interrupt_grace_seconds, with rollback), storms of cancels, and cancels
while nothing runs. abandon(): a cancel for good, which also stops a call on its way to the
guest.

execute() runs on the test's thread; cancel() comes from a timer thread, as a kernel's
interrupt would.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox_kernel import CodeExecution, ExecutionStatus, ReplSandbox, SandboxAbandoned
from tests.repl.conftest import MakeRepl, plain, repl_config, run_ok

GRACE_SECONDS = 0.5


@dataclass
class Cancelled:
    result: CodeExecution
    total_seconds: float  # from execute() to its return
    after_cancel_seconds: float  # from the first cancel() to the return
    accepted: list[bool]


def execute_and_cancel(repl: ReplSandbox, code: str, *, times: int = 1) -> Cancelled:
    """Run `code`, calling cancel() `times` times in a row 0.3 s after it starts."""
    accepted: list[bool] = []
    fired: list[float] = []

    def fire() -> None:
        fired.append(time.monotonic())
        accepted.extend(repl.cancel() for _ in range(times))

    timer = threading.Timer(0.3, fire)
    started = time.monotonic()
    timer.start()
    try:
        result = repl.execute(code)
    finally:
        timer.cancel()
        timer.join()
    ended = time.monotonic()
    assert fired, f"the cell ended before cancel(): {result.status} {result.error}"
    return Cancelled(result, ended - started, ended - fired[0], accepted)


@pytest.fixture
def repl(make_repl: MakeRepl) -> ReplSandbox:
    session = make_repl(interrupt_grace_seconds=GRACE_SECONDS)
    run_ok(session, "earlier = 'from an earlier cell'")
    run_ok(session, "def spin_forever():\n    while True:\n        pass")
    return session


# --- soft -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "while True:\n    pass",
        "import time\ntime.sleep(100)",
        "spin_forever()",
        "for i in range(10**12):\n    pass",
        "total = 0\nwhile True:\n    total += 1",
    ],
    ids=["while", "sleep", "function-from-earlier-cell", "for", "busy-count"],
)
def test_a_soft_cancel_stops_the_cell_and_keeps_state(repl: ReplSandbox, code: str) -> None:
    run = execute_and_cancel(repl, "before_loop = 'assigned'\n" + code)
    assert run.accepted == [True]
    assert run.result.status is ExecutionStatus.CANCELLED
    assert run.result.ename == "KeyboardInterrupt"
    assert run.result.rolled_back is False
    assert run.after_cancel_seconds < 1.0
    assert run.total_seconds < 2.0
    assert repl.get_variable("before_loop") == "assigned"
    assert repl.get_variable("earlier") == "from an earlier cell"
    assert plain(run_ok(repl, "earlier.upper()")) == "'FROM AN EARLIER CELL'"


def test_the_traceback_of_a_cancel_names_the_user_line(repl: ReplSandbox) -> None:
    run = execute_and_cancel(repl, "x = 1\nspin_forever()")
    text = "\n".join(run.result.traceback)
    assert f'File "<cell-{run.result.execution_count}>", line 2, in <module>' in text
    assert "in spin_forever" in text
    assert text.endswith("KeyboardInterrupt")


def test_a_cell_can_catch_the_interrupt_and_carry_on(repl: ReplSandbox) -> None:
    code = (
        "import time\n"
        "try:\n"
        "    while True:\n"
        "        pass\n"
        "except KeyboardInterrupt:\n"
        "    caught = True\n"
        "after = 'ran'"
    )
    run = execute_and_cancel(repl, code)
    assert run.result.status is ExecutionStatus.OK
    assert (repl.get_variable("caught"), repl.get_variable("after")) == (True, "ran")


def test_a_cancel_while_waiting_for_a_callback_is_soft(make_repl: MakeRepl) -> None:
    def slow(prompt: str) -> str:
        time.sleep(5)
        return "too late"

    repl = make_repl(on_llm_query=slow, interrupt_grace_seconds=GRACE_SECONDS)
    run = execute_and_cancel(repl, "asked = 'yes'\nllm_query('hello')")
    assert run.result.status is ExecutionStatus.CANCELLED
    assert run.result.rolled_back is False
    assert run.after_cancel_seconds < 1.0
    assert repl.get_variable("asked") == "yes"


# --- hard -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    ["sum(range(10**11))", "import re\nre.match('(a+)+$', 'a' * 40 + 'b')"],
    ids=["sum", "regex-backtracking"],
)
def test_a_c_level_call_ends_by_the_hard_path(repl: ReplSandbox, code: str) -> None:
    run = execute_and_cancel(repl, "lost = 'assigned in the stopped cell'\n" + code)
    assert run.result.status is ExecutionStatus.CANCELLED
    assert run.result.rolled_back is True
    assert "rolled back" in (run.result.error or "")
    assert GRACE_SECONDS - 0.05 < run.after_cancel_seconds < GRACE_SECONDS + 1.0
    assert run.total_seconds < 2.0
    assert repl.get_variable("lost") is None  # the stopped cell's state is gone ...
    assert repl.get_variable("earlier") == "from an earlier cell"  # ... earlier state is not
    assert plain(run_ok(repl, "spin_forever.__name__")) == "'spin_forever'"


def test_soft_cancel_still_works_after_a_hard_stop(repl: ReplSandbox) -> None:
    hard = execute_and_cancel(repl, "sum(range(10**11))")
    assert hard.result.rolled_back is True
    soft = execute_and_cancel(repl, "again = 1\nspin_forever()")
    assert soft.result.status is ExecutionStatus.CANCELLED
    assert soft.result.rolled_back is False
    assert soft.after_cancel_seconds < 1.0
    assert repl.get_variable("again") == 1


# --- storms and idle ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "rolled_back"),
    [("spin_forever()", False), ("sum(range(10**11))", True)],
    ids=["soft", "hard"],
)
def test_an_interrupt_storm_does_no_harm(repl: ReplSandbox, code: str, rolled_back: bool) -> None:
    run = execute_and_cancel(repl, code, times=50)
    assert run.accepted[0] is True
    assert run.result.status is ExecutionStatus.CANCELLED
    assert run.result.rolled_back is rolled_back
    assert run.total_seconds < 2.0
    # The storm's escalation timers fire during the next cell, which runs past the grace
    # period: they must leave it alone.
    started = time.monotonic()
    nxt = run_ok(repl, "import time\ntime.sleep(1)\nafter_storm = earlier")
    assert time.monotonic() - started >= 1.0
    assert nxt.rolled_back is False
    assert repl.get_variable("after_storm") == "from an earlier cell"


def test_cancel_while_idle_returns_false_and_does_nothing(repl: ReplSandbox) -> None:
    assert repl.cancel() is False
    assert [repl.cancel() for _ in range(10)] == [False] * 10
    time.sleep(GRACE_SECONDS + 0.2)  # an escalation, had one been armed, would fire now
    result = run_ok(repl, "import time\ntime.sleep(0.8)\nidle_ok = True")
    assert result.status is ExecutionStatus.OK
    assert repl.get_variable("idle_ok") is True


def test_cancel_before_initialize_returns_false(workspace: Path) -> None:
    assert ReplSandbox(repl_config(workspace)).cancel() is False


def test_a_cancel_does_not_leak_into_the_next_cell(repl: ReplSandbox) -> None:
    run = execute_and_cancel(repl, "spin_forever()")
    assert run.result.status is ExecutionStatus.CANCELLED
    result = run_ok(repl, "n = 0\nfor i in range(100_000):\n    n += 1\nn")
    assert plain(result) == "100000"


# --- abandon --------------------------------------------------------------------------------


def test_abandon_stops_the_running_cell_and_refuses_every_later_call(repl: ReplSandbox) -> None:
    timer = threading.Timer(0.3, repl.abandon)
    timer.start()
    result = repl.execute("spin_forever()")
    timer.join()
    assert result.status is ExecutionStatus.CANCELLED
    with pytest.raises(SandboxAbandoned):
        repl.execute("after = 1")
    with pytest.raises(SandboxAbandoned):
        repl.get_variable("earlier")
    with pytest.raises(SandboxAbandoned):
        repl.complete("ear", 3)


def test_abandon_stops_a_call_still_on_its_way_to_the_guest(make_repl: MakeRepl) -> None:
    """The agent server's race: its client left while a step waited for the session (behind
    the previous step's rollback image). A cancel then finds nothing running and is lost, and
    the step ran to its timeout, holding a worker; abandon() stops it before it starts."""
    repl = make_repl(interrupt_grace_seconds=GRACE_SECONDS, policy={"timeout_seconds": 300})
    run_ok(repl, "def spin_forever():\n    while True:\n        pass")
    outcome: list[object] = []

    def step() -> None:
        try:
            outcome.append(repl.execute("spin_forever()"))
        except SandboxAbandoned as exc:
            outcome.append(exc)

    worker = threading.Thread(target=step)
    with repl._lock:  # held as the rollback image's copy holds it: the step waits here
        worker.start()
        time.sleep(0.3)
        assert worker.is_alive() and not outcome
        assert repl.cancel() is False  # nothing runs yet: a cancel alone is lost
        repl.abandon()
    worker.join(timeout=30)
    stopped = not worker.is_alive()
    if not stopped:  # a lost cancel: the cell spins to its timeout
        repl.cancel()
        worker.join()
    assert stopped, "abandon() was lost: the cell ran on"
    assert len(outcome) == 1 and isinstance(outcome[0], SandboxAbandoned), outcome
