"""Cells that tamper with what the sandbox needs to run the next cell: the standard streams set
to None or closed, the helpers in builtins replaced, the driver's own module globals replaced.
The tampering cell succeeds, so its state is in the rollback image: without a repair, every
later cell failed with "the cell driver stopped answering" until a restart. Now the driver puts
back what it needs and says so, and a session that still cannot run cells is rebuilt with the
user told (SandboxSessionRebuilt), never left failing.

(ipykernel itself, with the same IPython, sends no execute_reply at all after the first of
these cells: IPython's run_cell tees sys.stdout, which is None.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.repl import REPLConfig, ReplSandbox
from tests.kernel.conftest import RunningKernel, start_kernel

POLICY = ExecutionPolicy(fuel_budget=50_000_000_000, timeout_seconds=60)


@pytest.fixture
def session() -> Iterator[ReplSandbox]:
    with ReplSandbox(REPLConfig(ipython=True, policy=POLICY)) as repl:
        yield repl


@pytest.mark.parametrize(
    "tampering",
    [
        "sys.stdout = sys.stderr = None\nbuiltins.print = builtins.display = builtins.input = None",
        "sys.stdout.close()\nsys.stderr.close()\nsys.__stdout__ = sys.__stderr__ = None",
        "sys.stdout = sys.stderr = 42",
        "builtins.display = builtins.input = 'not callable'",
        "import _reactor\n_reactor._run_turn = lambda text, name: None",
    ],
    ids=["none-and-builtins", "closed", "not-a-stream", "helpers", "turn-runner"],
)
def test_the_next_cell_works_after_tampering(session: ReplSandbox, tampering: str) -> None:
    done = session.execute(f"import sys, builtins\nkeep = 41\n{tampering}")
    assert done.ok, done
    assert "it was put back" in done.stderr, done
    after = session.execute("keep + 1")
    assert after.ok and after.result == {"text/plain": "42"}, after
    shown = session.execute("import sys\nsys.stdout.write('out\\n'); sys.stderr.write('err\\n');")
    assert shown.stdout == "out\n" and shown.stderr == "err\n", shown
    display_works = session.execute("display('shown'); input")
    assert display_works.ok, display_works
    assert session.rebuilds == 0 and session.rollbacks == 0


def test_a_stream_of_the_cells_own_is_kept(session: ReplSandbox) -> None:
    """A StringIO that captures is a stream: kept, as in ipykernel."""
    session.execute("import io, sys\nbuffer = io.StringIO()\nsys.stdout = buffer")
    session.execute("print('captured')")
    done = session.execute("sys.stdout = sys.__stdout__\nbuffer.getvalue()")
    assert done.result == {"text/plain": "'captured\\n'"}, done
    assert "put back" not in done.stderr


def test_a_session_that_cannot_run_cells_is_rebuilt_and_says_so(session: ReplSandbox) -> None:
    """A cell that breaks the driver's own code for the cells after it (the rollbacks return to
    its state): the first cell after it fails, the second rebuilds the session."""
    session.execute("keep = 41")
    poisoned = session.execute(
        "import sys\nsys.modules['sandbox_kernel_driver'].forget_turns = None"
    )
    assert poisoned.ok, poisoned
    first = session.execute("1 + 1")
    second = session.execute("1 + 1") if first.ename != "SandboxSessionRebuilt" else first
    assert second.ename == "SandboxSessionRebuilt", (first, second)
    assert "rebuilt from scratch" in (second.evalue or "")
    assert session.rebuilds == 1
    assert session.execute("2 + 2").result == {"text/plain": "4"}
    assert session.execute("keep").ename == "NameError"  # the user was told: variables gone


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[RunningKernel]:
    running = start_kernel(tmp_path / "kernel")
    yield running
    running.shutdown()


def test_the_kernel_answers_after_tampering(kernel: RunningKernel) -> None:
    kernel.run_ok(
        "import sys, builtins\nkeep = 41\nsys.stdout = sys.stderr = None\n"
        "builtins.print = builtins.display = builtins.input = None"
    )
    assert kernel.run_ok("keep + 1").result() == "42"
    assert kernel.run_ok("import sys; sys.stdout.write('still streams\\n')").stream() == (
        "still streams\n"
    )
