"""The clock-only limit mode (`meter_fuel = false`): no fuel is counted, so the wall clock alone
must stop what fuel would have. A runaway Python loop, a runaway loop inside C code (a
catastrophic regular expression, a builtin summing a generator that never ends) and a
runaway comprehension each stop at the session's timeout, the session is rolled back to the
state before the cell, and the next cell works. A hang here is the failure (pytest-timeout).
"""

from __future__ import annotations

import pytest

from sandbox_kernel.repl import ExecutionStatus
from tests.repl.conftest import MakeRepl

RUNAWAYS = {
    "python-loop": "while True:\n    pass",
    "c-regex": "import re\nre.match(r'(a*)*b', 'a' * 64)",
    "c-builtin": "sum(1 for _ in iter(int, 1))",
    "comprehension": "[0 for _ in iter(int, 1) if False]",
}


@pytest.mark.parametrize("code", RUNAWAYS.values(), ids=RUNAWAYS.keys())
def test_the_clock_stops_what_fuel_would_have(make_repl: MakeRepl, code: str) -> None:
    repl = make_repl(policy={"meter_fuel": False, "timeout_seconds": 3})
    assert repl.execute("kept = [1, 2, 3]").ok
    stopped = repl.execute("kept.clear()\n" + code)
    assert stopped.status is ExecutionStatus.TIMEOUT, stopped
    assert stopped.rolled_back and stopped.fuel_consumed == 0
    assert repl.get_variable("kept") == [1, 2, 3]
    assert repl.execute("6 * 7").result == {"text/plain": "42"}


def test_fuel_is_not_counted_and_not_enforced(make_repl: MakeRepl) -> None:
    """A budget far too small for the cell: metered, it stops the cell; clock-only, it does
    not apply."""
    work = "total = 0\nfor i in range(200_000):\n    total += i\ntotal"
    metered = make_repl(policy={"fuel_budget": 10_000_000})
    assert metered.execute(work).status is ExecutionStatus.OUT_OF_FUEL
    clock = make_repl(policy={"fuel_budget": 10_000_000, "meter_fuel": False})
    done = clock.execute(work)
    assert done.ok and done.fuel_consumed == 0, done
    assert done.result == {"text/plain": str(sum(range(200_000)))}
