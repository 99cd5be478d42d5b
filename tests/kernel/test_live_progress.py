"""Output that is not a whole line reaches the client while the cell runs, as on ipykernel: a
progress bar's `\\r` updates, `print(..., end='')`, tqdm's bars (without its monitor thread,
which the sandbox cannot start, and without the warning that said so). What the notebook keeps
in the end, the text of the streams, is ipykernel's.
"""

from __future__ import annotations

import pytest

from tests.kernel.conftest import Execution, RunningKernel

COUNTDOWN = (
    "import time\n"
    "for i in range(5):\n"
    "    print(f'\\r{i}', end='')\n"
    "    time.sleep(0.4)\n"
    "print(' done')"
)
PARTS = "import time\nfor part in ('a', 'b', 'c'):\n    print(part, end='')\n    time.sleep(0.4)\n"
TQDM = (  # the text bar, on stderr
    "import time\n"
    "from tqdm import tqdm\n"
    "for i in tqdm(range(4), mininterval=0):\n"
    "    time.sleep(0.4)\n"
)
TQDM_AUTO = TQDM.replace("from tqdm import", "from tqdm.auto import")  # the widget bar


def _spread(execution: Execution, name: str = "stdout") -> float:
    """Seconds between the first and the last stream message of `name` (0 for one message)."""
    times = [o.at for o in execution.of_type("stream") if o.content["name"] == name]
    return max(times) - min(times) if times else 0.0


@pytest.mark.parametrize("cell", [COUNTDOWN, PARTS], ids=["carriage-returns", "no-newline"])
def test_partial_lines_arrive_while_the_cell_runs(
    kernel: RunningKernel, ipykernel: RunningKernel, cell: str
) -> None:
    ours, theirs = kernel.run_ok(cell), ipykernel.run_ok(cell)
    assert ours.stream() == theirs.stream()  # what the notebook keeps
    # The cell sleeps 0.4 s between parts: its first part arrived well before its last, in a
    # message of its own (at the end, all would arrive at once).
    assert len(ours.of_type("stream")) >= 3, ours.describe()
    assert _spread(ours) >= 0.7, ours.describe()


def test_a_tqdm_bar_updates_while_the_cell_runs_without_a_warning(kernel: RunningKernel) -> None:
    execution = kernel.run_ok(TQDM)
    bars = execution.stream("stderr")
    assert "TqdmMonitorWarning" not in bars and "can't start new thread" not in bars, bars
    assert "4/4" in bars, bars
    updates = [o for o in execution.of_type("stream") if o.content["name"] == "stderr"]
    assert len(updates) >= 3, execution.describe()
    assert _spread(execution, "stderr") >= 0.7, execution.describe()


def test_a_tqdm_auto_widget_bar_updates_while_the_cell_runs(kernel: RunningKernel) -> None:
    """tqdm.auto in a notebook is a widget: its updates are comm messages, which arrive while
    the cell runs, as its text bar's lines do."""
    execution = kernel.run_ok(TQDM_AUTO)
    updates = [o for o in execution.of_type("comm_msg") if "value" in str(o.content)]
    assert len(updates) >= 3, execution.describe()
    assert max(o.at for o in updates) - min(o.at for o in updates) >= 0.7, execution.describe()
    assert "TqdmMonitorWarning" not in execution.stream("stderr")
