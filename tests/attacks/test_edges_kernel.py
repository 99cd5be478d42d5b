"""Attacks on the host-side paths around the guest, through a real kernel (issue 12): stdin,
completion and inspection, user_expressions, magics, and the size of what a cell can make
the kernel send or log. Each must end in a clear answer, and the kernel must live on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernel.conftest import RunningKernel, start_kernel

SLEEPY = (
    "class Sleepy:\n"
    "    def __getattr__(self, name):\n"
    "        import time; time.sleep(30)\n"
    "    def __repr__(self):\n"
    "        import time; time.sleep(30); return 'Sleepy()'\n"
    "    def __dir__(self):\n"
    "        import time; time.sleep(30); return []\n"
    "class Loops:\n"
    "    def __repr__(self):\n"
    "        while True: pass\n"
    "    def __dir__(self):\n"
    "        while True: pass\n"
    "class Raises:\n"
    "    def __dir__(self):\n"
    "        raise RuntimeError('no dir for you')\n"
    "    def __repr__(self):\n"
    "        raise RuntimeError('no repr for you')\n"
    "sleepy, loops, raises = Sleepy(), Loops(), Raises()\n"
    "kept = 'kept'"
)


@pytest.fixture
def own_kernel(tmp_path: Path) -> Iterator[RunningKernel]:
    running = start_kernel(tmp_path / "edges", policy="[policy]\ntimeout_seconds = 3\n")
    yield running
    running.shutdown()


# -- 1. stdin ---------------------------------------------------------------------------------


def test_interrupted_inputs_never_kill_the_kernel_or_steal_answers(
    own_kernel: RunningKernel,
) -> None:
    pid = own_kernel.pid
    for round_number in range(4):
        execution = own_kernel.send("x = input('never answered? ')", allow_stdin=True)
        request = own_kernel.kc.stdin_channel.get_msg(timeout=30)
        assert request["msg_type"] == "input_request"
        own_kernel.km.interrupt_kernel()
        own_kernel.collect(execution)
        assert execution.status == "error", (round_number, execution.describe())
        assert execution.reply["ename"] == "KeyboardInterrupt"
    answered = own_kernel.run("answer = input('name? ')\nanswer", stdin=lambda _: "Ada")
    assert answered.status == "ok", answered.describe()
    assert answered.result() == "'Ada'"
    assert [r["prompt"] for r in answered.input_requests] == ["name? "]
    assert own_kernel.km.is_alive() and own_kernel.pid == pid


def test_a_late_answer_to_an_abandoned_prompt_is_not_taken(own_kernel: RunningKernel) -> None:
    execution = own_kernel.send("x = input('first? ')", allow_stdin=True)
    own_kernel.kc.stdin_channel.get_msg(timeout=30)
    own_kernel.km.interrupt_kernel()
    own_kernel.collect(execution)
    own_kernel.kc.input("stale answer")  # the user typed into the old box after all
    time.sleep(0.2)
    answered = own_kernel.run("input('second? ')", stdin=lambda _: "fresh answer")
    assert answered.result() == "'fresh answer'"


# -- 3, 7. completion, inspection and get_variable under the policy's limits ----------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("sleepy.x", "complete"),
        ("sleepy.", "complete"),
        ("loops.", "complete"),
        ("raises.", "complete"),
        ("sleepy", "inspect"),
        ("loops", "inspect"),
        ("raises", "inspect"),
    ],
    ids=lambda value: str(value).replace(".", "-dot"),
)
def test_introspection_of_hostile_objects_answers_within_the_limit(
    own_kernel: RunningKernel, code: str, kind: str
) -> None:
    own_kernel.run_ok(SLEEPY)
    started = time.monotonic()
    if kind == "complete":
        reply = own_kernel.reply(own_kernel.kc.complete(code, len(code)), timeout=20)
        assert reply["status"] == "ok" and isinstance(reply["matches"], list)
    else:
        reply = own_kernel.reply(own_kernel.kc.inspect(code, len(code)), timeout=20)
        assert reply["status"] == "ok"
    assert time.monotonic() - started < 3 + 3, "the policy's 3 s limit did not hold"
    assert own_kernel.run_ok("kept").result() == "'kept'"  # the session and its state live on


def test_an_interrupt_ends_a_slow_completion(own_kernel: RunningKernel) -> None:
    own_kernel.run_ok(SLEEPY)
    own_kernel.run_ok("%policy timeout_seconds=60")
    started = time.monotonic()
    msg_id = own_kernel.kc.complete("sleepy.", 7)
    time.sleep(0.5)
    own_kernel.km.interrupt_kernel()
    reply = own_kernel.reply(msg_id, timeout=20)
    assert reply["status"] == "ok"
    assert time.monotonic() - started < 5
    assert own_kernel.run_ok("kept").result() == "'kept'"


# -- 10. user_expressions ---------------------------------------------------------------------


def test_user_expressions_are_bounded_and_stop_on_interrupt(own_kernel: RunningKernel) -> None:
    own_kernel.run_ok("import time\nnap = lambda: time.sleep(10) or 'woke'")
    own_kernel.run_ok("%policy timeout_seconds=60")
    expressions = {f"e{i}": "nap()" for i in range(4)}
    started = time.monotonic()
    execution = own_kernel.send("pass", user_expressions=expressions)
    time.sleep(1.0)
    own_kernel.km.interrupt_kernel()
    own_kernel.collect(execution, timeout=30)
    assert time.monotonic() - started < 5, "user_expressions ran on after the interrupt"
    results = execution.reply["user_expressions"]
    assert set(results) == set(expressions)
    assert all(r["status"] == "error" for r in results.values())
    assert own_kernel.run_ok("1 + 1").result() == "2"


# -- 8. magics always answer ------------------------------------------------------------------


@pytest.mark.parametrize(
    "setup",
    [
        "import os\nos.symlink('loop', '/app/loop')",
        "import os\nos.symlink('../' * 12 + 'etc/passwd', '/app/outside')",
        "import os\nos.mkdir('/app/folder')",
    ],
    ids=["symlink-loop", "symlink-outside", "folder"],
)
def test_context_magic_on_hostile_paths_answers(own_kernel: RunningKernel, setup: str) -> None:
    own_kernel.run_ok(setup)
    name = setup.split("'/app/")[1].split("'")[0]
    execution = own_kernel.run(f"%context {name}", timeout=20)
    assert execution.status == "error", execution.describe()
    assert execution.reply["ename"] == "UsageError"
    assert "root:" not in execution.describe()
    assert own_kernel.run_ok("1 + 1").result() == "2"


# -- 6. what a cell makes the kernel send and log is capped ----------------------------------


def test_a_huge_exception_is_capped_on_the_wire_and_in_the_log(own_kernel: RunningKernel) -> None:
    execution = own_kernel.run("raise ValueError('e' * 20_000_000)", timeout=60)
    assert execution.status == "error"
    wire = json.dumps(execution.reply) + json.dumps([o.content for o in execution.outputs])
    assert len(wire) < 3_000_000, f"{len(wire):,} bytes on the wire for one error"
    assert "omitted" in execution.reply["evalue"]
    line = own_kernel.run_log.read_text().splitlines()[-1]
    assert len(line) < 100_000, f"a run-log line of {len(line):,} bytes"
    assert own_kernel.run_ok("1 + 1").result() == "2"


def test_context_magic_with_the_guest_memory_full_answers(tmp_path: Path) -> None:
    running = start_kernel(tmp_path / "full", policy="[policy]\nmemory_bytes = 400_000_000\n")
    try:
        (running.workspace / "big.txt").write_text("x" * 50_000_000)
        running.run_ok(
            "hoard = []\ntry:\n    while True:\n        hoard.append(bytearray(4_000_000))\n"
            "except MemoryError:\n    pass\nlen(hoard) > 10"
        )
        execution = running.run("%context big.txt", timeout=60)
        assert execution.status == "error", execution.describe()
        assert execution.reply["ename"] == "UsageError"
        running.run_ok("hoard.clear()")
        assert running.run_ok("%context big.txt").stream().startswith("context: 50,000,000")
        assert running.run_ok("len(context)").result() == "50000000"
    finally:
        running.shutdown()
