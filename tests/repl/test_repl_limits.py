"""Per-cell limits and the rollback that keeps the session: fuel, wall clock, traps, memory,
and output caps. A hard stop rolls back to the state before the cell; a MemoryError the guest
raises itself needs no rollback.
"""

from __future__ import annotations

import time

import pytest

from sandbox_kernel import ExecutionStatus, ReplSandbox
from tests.repl.conftest import MakeRepl, plain, run_ok
from tests.repl.conftest import stopped as stop


def _assert_session_kept(repl: ReplSandbox) -> None:
    """The variable from before the failed cell is intact and a new cell runs."""
    assert repl.get_variable("earlier") == [1, 2, 3]
    assert plain(run_ok(repl, "sum(earlier)")) == "6"
    run_ok(repl, "earlier_too = earlier + [4]")
    assert repl.get_variable("earlier_too") == [1, 2, 3, 4]


# --- fuel ---------------------------------------------------------------------------------


def test_running_out_of_fuel_rolls_back(make_repl: MakeRepl) -> None:
    repl = make_repl(policy={"fuel_budget": 3_000_000_000})
    run_ok(repl, "earlier = [1, 2, 3]")
    result = repl.execute("doomed = 1\nearlier.append(99)\nwhile True:\n    pass")
    assert result.status is ExecutionStatus.OUT_OF_FUEL
    assert result.rolled_back is True
    assert result.fuel_consumed == 3_000_000_000
    assert "fuel" in (result.error or "") and "rolled back" in (result.error or "")
    assert repl.get_variable("doomed") is None  # the cell's own changes are gone
    _assert_session_kept(repl)


def test_fuel_is_fresh_for_every_cell(make_repl: MakeRepl) -> None:
    repl = make_repl(policy={"fuel_budget": 3_000_000_000})
    for _ in range(3):  # each spends over a third of a budget: a shared one would run out
        result = run_ok(repl, "total = 0\nfor i in range(300_000):\n    total += i")
        assert result.fuel_consumed > 300_000_000
    assert repl.execute("while True:\n    pass").status is ExecutionStatus.OUT_OF_FUEL
    assert repl.get_variable("total") == sum(range(300_000))


# --- wall clock ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    ["while True:\n    pass", "import time\ntime.sleep(5)", "x = 0\nwhile True:\n    x += 1"],
    ids=["spin", "sleep", "count"],
)
def test_a_timeout_rolls_back(make_repl: MakeRepl, code: str) -> None:
    repl = make_repl()
    run_ok(repl, "earlier = [1, 2, 3]")
    started = time.monotonic()
    result = stop(repl, "earlier.clear()\n" + code, 1)
    elapsed = time.monotonic() - started
    assert result.status is ExecutionStatus.TIMEOUT
    assert result.rolled_back is True
    assert "timed out after 1 s" in (result.error or "")
    assert elapsed < 15, f"a 1 s timeout took {elapsed:.1f} s"  # not the 5 s sleep, or for ever
    _assert_session_kept(repl)


def test_output_before_a_timeout_is_kept(make_repl: MakeRepl) -> None:
    repl = make_repl()
    result = stop(repl, "print('got this far')\nwhile True:\n    pass", 1)
    assert result.status is ExecutionStatus.TIMEOUT
    assert result.stdout == "got this far\n"


# --- traps and memory ---------------------------------------------------------------------


def test_deep_recursion_does_not_lose_the_session(make_repl: MakeRepl) -> None:
    # Either the guest's C stack or its memory gives out (a trap, rolled back), or Python
    # raises first (MemoryError / RecursionError, nothing to roll back): the session lives.
    repl = make_repl(policy={"memory_bytes": 64_000_000})
    run_ok(repl, "earlier = [1, 2, 3]")
    code = "import sys\nsys.setrecursionlimit(10**6)\ndef down(n):\n    return down(n + 1)\ndown(0)"
    result = repl.execute(code)
    assert result.status in (ExecutionStatus.MEMORY, ExecutionStatus.ERROR)
    if result.rolled_back:
        assert "rolled back" in (result.error or "")
    else:
        assert result.ename in ("MemoryError", "RecursionError")
    _assert_session_kept(repl)
    assert plain(run_ok(repl, "def up(n):\n    return n if n == 0 else up(n - 1)\nup(500)")) == "0"


def test_a_memory_error_inside_needs_no_rollback(make_repl: MakeRepl) -> None:
    # bytearray(10**10) is an OverflowError on wasm32 (not an index-sized int); 10**9 fits.
    repl = make_repl()
    run_ok(repl, "earlier = [1, 2, 3]")
    result = repl.execute("before_alloc = 'kept'\nhuge = bytearray(10**9)")
    assert result.status is ExecutionStatus.MEMORY
    assert result.ename == "MemoryError"
    assert result.rolled_back is False
    assert any("bytearray(10**9)" in line for line in result.traceback)
    assert repl.get_variable("before_alloc") == "kept"
    assert repl.get_variable("huge") is None
    _assert_session_kept(repl)


def test_a_caught_memory_error_is_ok(make_repl: MakeRepl) -> None:
    repl = make_repl()
    code = "try:\n    bytearray(10**9)\nexcept MemoryError:\n    survived = True\nsurvived"
    assert plain(run_ok(repl, code)) == "True"


def test_memory_grows_up_to_the_limit(make_repl: MakeRepl) -> None:
    repl = make_repl(policy={"memory_bytes": 256_000_000})
    run_ok(repl, "blocks = [bytearray(10_000_000) for _ in range(10)]")  # ~100 MB is fine
    assert plain(run_ok(repl, "sum(len(b) for b in blocks)")) == "100000000"
    result = repl.execute("more = [bytearray(10_000_000) for _ in range(30)]")
    assert result.status is ExecutionStatus.MEMORY
    run_ok(repl, "del blocks")
    run_ok(repl, "again = bytearray(50_000_000)")


# --- output -------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_past_the_cap_is_cut_with_a_notice(make_repl: MakeRepl, stream: str) -> None:
    repl = make_repl(policy={"stdout_max_bytes": 1000, "stderr_max_bytes": 1000})
    result = run_ok(repl, f"import sys\nfor i in range(2000):\n    print(i, file=sys.{stream})")
    text = getattr(result, stream)
    assert result.truncated is True
    assert "omitted" in text
    assert text.startswith("0\n1\n2\n")
    assert "1999" not in text
    assert len(text.encode()) <= 1000  # the cap is the cap, notice included
    other = "stderr" if stream == "stdout" else "stdout"
    assert getattr(result, other) == ""


def test_output_cap_is_per_execution(make_repl: MakeRepl) -> None:
    repl = make_repl(policy={"stdout_max_bytes": 1000, "stderr_max_bytes": 1000})
    assert run_ok(repl, "print('x' * 5000)").truncated is True
    small = run_ok(repl, "print('short')")
    assert small.truncated is False
    assert small.stdout == "short\n"


def test_a_long_line_is_cut_too(make_repl: MakeRepl) -> None:
    repl = make_repl(policy={"stdout_max_bytes": 1000, "stderr_max_bytes": 1000})
    result = run_ok(repl, "print('y' * 10**6)")
    assert result.truncated is True
    first = result.stdout.split("\n")[0]
    assert first == "y" * len(first) and len(first) > 800
    assert "omitted" in result.stdout
    assert len(result.stdout.encode()) <= 1000
