"""IPython's tracebacks in the guest (guest/shell.py): the lexer made once gives exactly what
stack_data's own per-traceback lexer gives, and a session's first error is not the one that
pays for IPython's imports (they are in the warm image)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.repl import REPLConfig, ReplSandbox

POLICY = ExecutionPolicy(fuel_budget=10**12, timeout_seconds=120)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplSandbox]:
    config = REPLConfig(ipython=True, policy=POLICY, workspace=tmp_path_factory.mktemp("tb"))
    with ReplSandbox(config) as repl:
        yield repl


def test_highlighting_is_stack_datas(session: ReplSandbox) -> None:
    done = session.execute(
        "import stack_data.core as core, stack_data.utils as utils\n"
        "from pygments.formatters import Terminal256Formatter\n"
        "formatter = Terminal256Formatter(style='default')\n"
        "code = 'def f(x):\\n    return x / 0  # note\\nf(1)\\n'\n"
        "same = [core._pygmented_with_ranges(formatter, code, r)\n"
        "        == utils._pygmented_with_ranges(formatter, code, r)\n"
        "        for r in ([(13, 25)], [], [(0, 3), (30, 40)])]\n"
        "same, core._pygmented_with_ranges is utils._pygmented_with_ranges"
    )
    assert done.result == {"text/plain": "([True, True, True], False)"}, done


def test_a_first_error_costs_what_later_ones_do(session: ReplSandbox) -> None:
    first = session.execute("1 / 0")
    later = session.execute("1 / 0")
    assert first.ename == later.ename == "ZeroDivisionError"
    assert "Traceback (most recent call last)" in "\n".join(first.traceback)  # IPython's
    # Before the warm-up, the first cost 790 M instructions against 170 M for the next.
    assert first.fuel_consumed < 3 * later.fuel_consumed, (first.fuel_consumed, later)


def test_a_helpers_error_ends_at_the_users_line(session: ReplSandbox) -> None:
    """The sandbox's own frames (llm_query's checks here) are cut from IPython's traceback, in
    chained exceptions too, as a built-in function's would be."""
    done = session.execute(
        "try:\n    llm_query(1)\nexcept TypeError as exc:\n    raise ValueError('again') from exc"
    )
    shown = _plain(done.traceback)
    assert done.ename == "ValueError"
    assert "llm_query(1)" in shown and "The above exception was the direct cause" in shown
    assert "sandbox" not in shown, shown


def test_the_colours_made_once_are_ipythons(session: ReplSandbox) -> None:
    """With the style and formatter made afresh for each traceback (IPython's own way), the
    traceback is the same, colour for colour."""
    done = session.execute(
        "import sys, stack_data, IPython.core.ultratb as ultratb\n"
        "from pygments.formatters.terminal256 import Terminal256Formatter\n"
        "def shown():\n"
        "    try:\n"
        "        {}['missing']\n"
        "    except KeyError:\n"
        "        return get_ipython().InteractiveTB.structured_traceback(*sys.exc_info())\n"
        "cached = shown()\n"
        "kept = stack_data.style_with_executing_node, ultratb.Terminal256Formatter\n"
        "stack_data.style_with_executing_node = kept[0].__wrapped__\n"
        "ultratb.Terminal256Formatter = Terminal256Formatter\n"
        "try:\n"
        "    fresh = shown()\n"
        "finally:\n"
        "    stack_data.style_with_executing_node, ultratb.Terminal256Formatter = kept\n"
        "cached == fresh, '\\x1b[' in ''.join(cached)"
    )
    assert done.result == {"text/plain": "(True, True)"}, done


def _plain(traceback: list[str] | None) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(traceback or []))


def test_an_error_is_formatted_once_and_kept_as_shown(session: ReplSandbox) -> None:
    """IPython 9 formats an error twice, to show it and to keep it for %notebook: the second
    is the first's lines, and the kept traceback is the one shown."""
    shown = session.execute("{}['missing']")
    assert shown.ename == "KeyError" and shown.traceback
    kept = session.execute(
        f"get_ipython().history_manager.exceptions[{shown.execution_count}]['traceback']"
        f" == {shown.traceback!r}"
    )
    assert kept.result == {"text/plain": "True"}, kept
    counted = session.execute(
        "import IPython.core.ultratb as ultratb\n"
        "calls = []\n"
        "original = ultratb.FormattedTB.structured_traceback\n"
        "def counting(self, *args, **kwargs):\n"
        "    calls.append(1)\n"
        "    return original(self, *args, **kwargs)\n"
        "ultratb.FormattedTB.structured_traceback = counting\n"
        "try:\n"
        "    get_ipython().run_cell('1 / 0', store_history=True)\n"
        "finally:\n"
        "    ultratb.FormattedTB.structured_traceback = original\n"
        "len(calls)"
    )
    assert counted.result == {"text/plain": "1"}, counted
