"""Attacks on the rollback image: a cell that rewrites its memory every way it can, then makes
the host stop it, must come back exactly as it was before that cell.

The image after each cell holds only the pages the write watch saw written (or the whole
memory, on a host without it). These cells try to change memory without being seen: writes
by the kernel on the guest's behalf (a file read into a buffer), memory grown and filled,
every page of a big object rewritten, then a hard stop (deadline, interrupt) that forces the
rollback. Nothing they did may survive it, and the session must go on.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel import ExecutionStatus, ReplSandbox
from tests.repl.conftest import interrupting, new_repl, plain, repl_config, run_ok
from tests.repl.conftest import stopped as stop

SIZE = 8_000_000


@pytest.fixture
def repl(workspace: Path) -> Iterator[ReplSandbox]:
    made = new_repl(repl_config(workspace, interrupt_grace_seconds=0.2))
    run_ok(made, f"blob = bytearray(b'a' * {SIZE})")  # grows the memory, patched in place
    run_ok(made, "kept = {'n': 1}")  # a small cell: its image is patched
    (workspace / "b.bin").write_bytes(b"b" * SIZE)
    yield made
    made.destroy()


def assert_as_before(repl: ReplSandbox) -> None:
    assert plain(repl.execute("bytes(set(blob)), len(blob), kept")) == (
        f"(b'a', {SIZE}, {{'n': 1}})"
    )


@pytest.mark.parametrize(
    "rewrite",
    [
        "blob[:] = b'z' * len(blob)",
        "open('/app/b.bin', 'rb').readinto(blob)",  # written by the kernel, not by the guest
        "more = bytearray(b'm' * 30_000_000); blob[::4096] = b'y' * len(blob[::4096])",
        "kept['n'] = 2; kept.update({i: i for i in range(50_000)})",
    ],
    ids=["every-page", "kernel-read", "grow-and-scatter", "heap-objects"],
)
def test_a_cell_stopped_by_its_deadline_leaves_nothing(repl: ReplSandbox, rewrite: str) -> None:
    stopped = stop(repl, f"{rewrite}\nwhile True:\n    pass")
    assert stopped.status is ExecutionStatus.TIMEOUT and stopped.rolled_back
    assert_as_before(repl)


def test_a_cell_stopped_by_a_hard_interrupt_leaves_nothing(repl: ReplSandbox) -> None:
    """sum() over a huge range never reaches a loop check: only the hard stop ends it."""
    with interrupting(repl):
        stopped = repl.execute("blob[:] = b'q' * len(blob)\nsum(range(10**13))")
    assert stopped.status is ExecutionStatus.CANCELLED and stopped.rolled_back
    assert_as_before(repl)


def test_rollbacks_in_a_row_each_restore_the_last_good_state(repl: ReplSandbox) -> None:
    for round_ in range(3):
        run_ok(repl, f"kept['n'] = {round_ + 10}")
        stopped = stop(repl, "blob[:] = b'x' * len(blob); kept['n'] = -1\nwhile True: pass")
        assert stopped.rolled_back
        assert plain(repl.execute("kept['n'], blob[:3]")) == f"({round_ + 10}, bytearray(b'aaa'))"


@pytest.mark.parametrize("taken", [True, False], ids=["take_image", "left-to-the-next-cell"])
def test_a_deferred_image_is_the_state_a_rollback_returns_to(
    repl: ReplSandbox, taken: bool
) -> None:
    """A kernel defers the image of a cell until its reply has gone (execute(defer_image=True),
    then take_image()). Whether or not take_image() comes, the next cell's rollback returns to
    the state after the deferred cell, not to the one before it."""
    done = repl.execute("kept['n'] = 5; blob[:4] = b'dddd'", defer_image=True)
    assert done.status is ExecutionStatus.OK, done
    if taken:
        repl.take_image()
    stopped = stop(repl, "blob[:] = b'x' * len(blob); kept['n'] = -1\nwhile True: pass")
    assert stopped.rolled_back
    assert plain(repl.execute("kept['n'], bytes(blob[:5])")) == "(5, b'dddda')"
    repl.take_image()  # nothing deferred: nothing to do
    assert plain(repl.execute("kept['n']")) == "5"


# Run in a process of its own: without the guard, the flag's write lands in released memory
# and the process dies of SIGSEGV.
_INTERRUPTS_DURING_ROLLBACKS = """
import sys, threading, time
from pathlib import Path
from sandbox_kernel import ExecutionStatus
from tests.repl.conftest import interrupting, new_repl, repl_config

repl = new_repl(repl_config(Path(sys.argv[1]), interrupt_grace_seconds=0.1))
repl.execute("kept = 1")
stop = threading.Event()

def hammer():  # the flag's write at any moment, as a cancel that passed its check just before
    while not stop.is_set():
        session = repl._session
        if session is not None:
            session.soft_interrupt()
        time.sleep(0)  # lets the cell's thread have the GIL between writes

thread = threading.Thread(target=hammer)
thread.start()
try:
    for _ in range(4):
        with interrupting(repl, 0.2):
            stopped = repl.execute("sum(range(10**13))")  # no loop check: the hard way
        assert stopped.status is ExecutionStatus.CANCELLED and stopped.rolled_back, stopped
finally:
    stop.set()
    thread.join()
session = repl._session
repl._join_capture()
session._release_store()  # as close() and a rollback do, before the next instance exists
print("refused after release:", session.soft_interrupt() is False)
"""


def test_interrupts_during_rollbacks_never_write_into_released_memory(workspace: Path) -> None:
    """A rollback releases the guest's instance and its memory, then makes a new one. A soft
    interrupt that landed in between (a cancel that had found the cell running just before
    it was stopped) wrote the flag into the released memory and killed the kernel. Flag writes
    hammered at rollbacks, and one after a release, must find no memory and do nothing."""
    ran = subprocess.run(
        [sys.executable, "-c", _INTERRUPTS_DURING_ROLLBACKS, str(workspace)],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, f"exit {ran.returncode}\n{ran.stdout}\n{ran.stderr[-3000:]}"
    assert "refused after release: True" in ran.stdout
