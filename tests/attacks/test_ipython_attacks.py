"""Attacks through IPython inside the guest: its pager, display ids, clear_output, payloads and
the shell itself. Each attack ends with a clear outcome, the kernel alive and the next cell
working.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernel.conftest import RunningKernel, start_kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKernel]:
    running = start_kernel(tmp_path_factory.mktemp("ipython-attacks"))
    yield running
    running.shutdown()


def _alive(kernel: RunningKernel) -> None:
    assert kernel.km.is_alive()
    assert kernel.run_ok("6 * 7").result() == "42"


def test_help_page_cannot_carry_script(kernel: RunningKernel) -> None:
    """A docstring is the guest's text: `obj?` pages it through the firewall."""
    execution = kernel.run_ok(
        "def evil():\n    '<script>alert(1)</script><img src=x onerror=alert(2)>'\n"
        "from IPython.core.payloadpage import page\n"
        "page({'text/html': '<script>alert(3)</script><b>ok</b>', 'text/plain': 'p'})"
    )
    [page] = execution.reply["payload"]
    assert "<script" not in page["data"]["text/html"]
    assert "<b>ok</b>" in page["data"]["text/html"]
    _alive(kernel)


def test_forged_payloads_are_dropped(kernel: RunningKernel) -> None:
    execution = kernel.run_ok(
        "pm = get_ipython().payload_manager\n"
        "pm.write_payload({'source': 'edit_magic', 'filename': '/etc/passwd'})\n"
        "pm.write_payload({'source': 'set_next_input', 'text': 'x' * 20_000_000})"
    )
    payload = execution.reply["payload"]
    assert [p["source"] for p in payload] == ["set_next_input"]
    assert len(payload[0]["text"]) <= 10_000_000  # capped at display_max_bytes
    assert "payload 'edit_magic'" in execution.stream("stderr")
    _alive(kernel)


def test_display_ids_are_short_strings(kernel: RunningKernel) -> None:
    execution = kernel.run_ok(
        "publish = get_ipython().display_pub.publish\n"
        "publish({'text/plain': 'a'}, transient={'display_id': 'x' * 10_000})\n"
        "publish({'text/plain': 'b'}, transient={'display_id': {'no': 1}}, update=True)"
    )
    shown = execution.of_type("display_data")
    assert [o.content["transient"] for o in shown] == [{}, {}]  # an update without an id shows
    assert not execution.of_type("update_display_data")
    _alive(kernel)


def test_a_clear_output_flood_is_bounded(kernel: RunningKernel) -> None:
    execution = kernel.run(
        "from IPython.display import clear_output\nfor _ in range(100_000):\n    clear_output()"
    )
    assert execution.status == "error", execution.describe()
    assert "too many host requests" in execution.error_text()
    assert len(execution.of_type("clear_output")) <= 1_000
    _alive(kernel)


@pytest.mark.parametrize(
    "sabotage",
    [
        "get_ipython().run_cell = None",
        "type(get_ipython()).run_cell = lambda *a, **k: None",
        "import IPython.core.interactiveshell as m\nm.InteractiveShell.run_cell_async = None",
        "get_ipython().displayhook.shell = None",
        "get_ipython().history_manager.shell = None",
    ],
)
def test_a_taken_apart_shell_comes_back(tmp_path: Path, sabotage: str) -> None:
    running = start_kernel(tmp_path / "kernel")
    try:
        running.run_ok("kept = 'mine'")
        running.run(sabotage)
        running.run("1 + 1")  # may fail once; the shell is then started again, and says so
        assert running.run_ok("kept").result() == "'mine'"
        assert running.run_ok("2 + 2").result() == "4"
    finally:
        running.shutdown()


def test_an_interrupted_cell_that_took_the_shell_apart_is_mended_before_the_next(
    tmp_path: Path,
) -> None:
    """The shell's check after a failed cell runs before the next cell: the interrupt's reply
    comes first, and the next cell still finds a working shell, its variables kept."""
    running = start_kernel(tmp_path / "kernel")
    try:
        running.run_ok("kept = 'mine'")
        cell = running.send(
            "get_ipython().history_manager._trait_values['shell'] = None\nwhile True:\n    pass"
        )
        time.sleep(1)
        running.km.interrupt_kernel()
        interrupted = running.collect(cell, timeout=30)
        assert interrupted.reply["ename"] == "KeyboardInterrupt", interrupted.describe()
        after = running.run_ok("kept")
        assert after.result() == "'mine'"
        assert "started again" in after.stream("stderr"), after.describe()
        assert running.run_ok("2 + 2").result() == "4"
    finally:
        running.shutdown()


def test_processes_stay_refused_when_asked_around_ipython(kernel: RunningKernel) -> None:
    # The shell's own entry points run the sandbox's commands (Python), and `id` is none.
    for code in ("get_ipython().system('id')", "get_ipython().getoutput('id')"):
        execution = kernel.run_ok(f"answer = {code}\nanswer, _exit_code")
        shown = execution.result() + execution.stream() + execution.stream("stderr")
        assert "id: not found" in shown and "127" in shown and "uid=" not in shown, shown
    for code in (
        "get_ipython().run_cell_magic('bash', '', 'id')",
        "import subprocess\nsubprocess.run(['id'])",
        "import os\nos.system('id')",
    ):
        execution = kernel.run(code)
        assert execution.status == "error" or "-1" in str(execution.reply), execution.describe()
    _alive(kernel)


def test_the_event_loop_cannot_wait_forever(kernel: RunningKernel) -> None:
    """A future nobody completes: IPython's loop has no sockets to wake it, so the wait is an
    error at once, not a hang."""
    execution = kernel.run("import asyncio\nawait asyncio.get_event_loop().create_future()")
    assert execution.status == "error", execution.describe()
    assert "wait forever" in execution.error_text()
    _alive(kernel)
