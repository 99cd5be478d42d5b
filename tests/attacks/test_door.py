"""Attacks on the door between a REPL guest and its host: huge requests, floods of calls, raw
malformed frames, hostile or failing callbacks. Each must end as a Python exception inside
the guest (or a bounded stop), never as a dead session or a hurt host: after every attack
the host process is fine, its files are untouched, and the same session runs the next cell
with its earlier state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel import ExecutionPolicy, ExecutionStatus, REPLConfig, ReplSandbox
from tests.attacks.conftest import HostGuard, open_descriptors
from tests.repl.conftest import wall_clock


class Door:
    """Makes REPL sessions on the attack workspace and checks the host after each attack."""

    def __init__(self, workspace: Path, host: HostGuard) -> None:
        self.workspace = workspace
        self.host = host
        self.sessions: list[ReplSandbox] = []
        self.fds = open_descriptors()
        self.threads = threading.active_count()

    def repl(self, policy: dict[str, Any] | None = None, **config: Any) -> ReplSandbox:
        """A session with `config`; a short `timeout_seconds` is the attack's own: the session is
        set up under the default wall clock first (a busy machine needs the room)."""
        fields = {"mount_host_dir": self.workspace, "fuel_budget": 50_000_000_000, **(policy or {})}
        short = config.pop("timeout_seconds", None)
        repl = ReplSandbox(REPLConfig(policy=ExecutionPolicy(**fields), **config))
        self.sessions.append(repl)
        repl.initialize()
        result = repl.execute("earlier = ['state', 'from', 'before']")
        assert result.ok, result.error
        if short is not None:
            repl.set_limits(timeout_seconds=short)
        return repl

    def assert_survived(self, repl: ReplSandbox) -> None:
        with wall_clock(repl, 30):
            result = repl.execute("print(' '.join(earlier))")
            assert result.ok, f"the session did not recover: {result.status} {result.error}"
            assert result.stdout == "state from before\n"
            assert repl.get_variable("earlier") == ["state", "from", "before"]
        assert open_descriptors() <= self.fds + 16, "the attack leaked host descriptors"
        time.sleep(0.05)  # a helper thread the host stopped waiting for may still be ending
        assert threading.active_count() <= self.threads + 12, "the attack left host threads"
        self.host.assert_untouched()


@pytest.fixture
def door(workspace: Path, host: HostGuard) -> Iterator[Door]:
    made = Door(workspace, host)
    yield made
    for repl in made.sessions:
        repl.destroy()


def _echo(prompt: str) -> str:
    return f"echo {len(prompt)}"


# --- size and count budgets ---------------------------------------------------------------

_CATCH_HUGE = (
    "try:\n"
    "    llm_query('x' * 3_000_000)\n"
    "except RuntimeError as exc:\n"
    "    refused = str(exc)\n"
    "print(refused)\n"
    "after_refusal = 'cell went on'"
)


def test_a_huge_prompt_is_refused_inside_the_guest(door: Door) -> None:
    prompts: list[str] = []
    repl = door.repl(max_bridge_bytes=1_000_000, on_llm_query=lambda p: prompts.append(p) or "")
    result = repl.execute(_CATCH_HUGE)
    assert "exceeded 1,000,000 bytes" in result.stdout, result.error
    assert prompts == [], "the oversized prompt reached the callback"
    door.assert_survived(repl)


def test_a_huge_prompt_not_caught_is_a_runtime_error(door: Door) -> None:
    repl = door.repl(max_bridge_bytes=1_000_000, on_llm_query=_echo)
    result = repl.execute("llm_query('x' * 3_000_000)")
    assert result.ename == "RuntimeError" and "exceeded" in (result.evalue or ""), (
        "the guest's RuntimeError about max_bridge_bytes never reaches the caller: "
        "the driver's 'done' request is refused by the same spent budget, so the cell is "
        f"reported as {result.error!r}"
    )
    door.assert_survived(repl)


def test_a_cell_that_caught_a_budget_refusal_keeps_its_outcome(door: Door) -> None:
    repl = door.repl(max_bridge_bytes=1_000_000, on_llm_query=_echo)
    result = repl.execute(_CATCH_HUGE)
    assert result.status is ExecutionStatus.OK and not result.rolled_back, (
        "once a cell exceeds max_bridge_bytes, the driver's own 'done' request is "
        "refused too, so a cell that caught the RuntimeError is reported as 'the cell driver "
        f"stopped answering' and rolled back ({result.status}: {result.error})"
    )
    assert repl.get_variable("after_refusal") == "cell went on"


_FLOOD = (
    "answered = 0\n"
    "try:\n"
    "    for i in range(1000):\n"
    "        llm_query('again')\n"
    "        answered += 1\n"
    "except RuntimeError as exc:\n"
    "    refused = str(exc)\n"
    "print(answered, refused)\n"
    "after_flood = 'cell went on'"
)


def test_a_flood_of_calls_is_cut_at_the_budget(door: Door) -> None:
    calls: list[str] = []
    repl = door.repl(max_bridge_calls=100, on_llm_query=lambda p: calls.append(p) or "ok")
    result = repl.execute(_FLOOD)
    answered, _, message = result.stdout.partition(" ")
    assert 95 <= int(answered) <= 100, result.stdout  # the driver's own requests count too
    assert len(calls) == int(answered)
    assert "too many host requests in one execution (100)" in message
    door.assert_survived(repl)
    again = repl.execute("llm_query('a fresh cell has a fresh budget')")
    assert again.ok, again.error


def test_a_cell_that_caught_a_call_refusal_keeps_its_outcome(door: Door) -> None:
    repl = door.repl(max_bridge_calls=100, on_llm_query=_echo)
    result = repl.execute(_FLOOD)
    assert result.status is ExecutionStatus.OK and not result.rolled_back, (
        "once a cell has used max_bridge_calls, the driver's own 'done' request is "
        "refused too, so the cell's outcome is lost and it is rolled back "
        f"({result.status}: {result.error})"
    )
    assert repl.get_variable("after_flood") == "cell went on"


# --- raw frames ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        b"not json",
        b'{"op": 5}',
        b'{"op":"nope"}',
        b"\xff\xfe",
        b"",
        b"[]",
        b'{"op":"__call__"}',
        b'{"op":"_wait_for"}',
        b'{"op":"done","cell":"zz"}',
        b'{"op":"done","cell":99,"reply":{"status":"bad"}}',
        b'{"op":"input","prompt":[1],"password":"x"}',
        b'{"op":"value"}',
        b'{"op":"hello","flag_magic":"zz"}',
        b'{"op":"sleep","seconds":"x"}',
        b'{"op":"sleep","seconds":NaN}',
        b'{"op":"display","data":[1]}',
        b'{"op":"llm_query","prompt":{"not":"str"}}',
        b'{"op":"context","extra":' + b"1" * 10_000 + b"}",
        b'{"op":"rlm_query","task":"t","has_ctx":true,"ctx":'
        + b"[" * 200_000
        + b"]" * 200_000
        + b"}",
    ],
    ids=[
        "not-json",
        "op-not-str",
        "unknown-op",
        "bad-utf8",
        "empty",
        "list",
        "dunder-op",
        "private-op",
        "done-bad-cell",
        "done-bad-reply",
        "input-bad-fields",
        "value-no-name",
        "hello-bad-hex",
        "sleep-str",
        "sleep-nan",
        "display-list",
        "prompt-dict",
        "long-number",
        "deeply-nested",
    ],
)
def test_a_malformed_frame_is_answered_or_raises(door: Door, frame: bytes) -> None:
    repl = door.repl(on_llm_query=_echo, on_display=lambda data, meta: None)
    code = (
        "import _host\n"
        "try:\n"
        f"    answer = _host.call({frame!r})\n"
        "except Exception as exc:\n"
        "    answer = 'raised ' + type(exc).__name__\n"
        "print(answer)"
    )
    result = repl.execute(code)
    assert result.ok, f"the frame ended the cell: {result.status} {result.error}"
    assert result.rolled_back is False
    door.assert_survived(repl)


def test_a_frame_that_is_not_bytes_raises(door: Door) -> None:
    repl = door.repl()
    result = repl.execute("import _host\n_host.call(12345)")
    assert result.status is ExecutionStatus.ERROR
    assert result.ename == "TypeError", result.error
    door.assert_survived(repl)


def test_a_sleep_past_the_deadline_is_bounded(door: Door) -> None:
    repl = door.repl(timeout_seconds=1)
    started = time.monotonic()
    result = repl.execute('import _host\n_host.call(b\'{"op":"sleep","seconds":1e300}\')')
    assert result.status is ExecutionStatus.TIMEOUT
    assert time.monotonic() - started < 15  # the deadline, with room; not the sleep
    door.assert_survived(repl)


# --- hostile and failing callbacks --------------------------------------------------------


def test_an_rlm_callback_that_raises_recursion_error(door: Door) -> None:
    def deep(task: str, ctx: Any) -> str:
        raise RecursionError("maximum recursion depth exceeded")

    repl = door.repl(on_rlm_query=deep)
    result = repl.execute("rlm_query('go deeper')")
    assert result.ename == "RuntimeError"
    assert "RecursionError" in (result.evalue or "")
    door.assert_survived(repl)


@pytest.mark.parametrize(
    "answer", [None, 7, b"bytes", ["list"]], ids=["none", "int", "bytes", "list"]
)
def test_a_callback_that_returns_a_non_str_is_a_type_error(door: Door, answer: object) -> None:
    repl = door.repl(on_rlm_query=lambda task, ctx: answer, on_input=lambda p, pw: answer)
    for code in ("rlm_query('t')", "input('?')"):
        result = repl.execute(code)
        assert result.ename == "TypeError", f"{code}: {result.error}"
    door.assert_survived(repl)


def test_a_stdout_callback_that_raises_on_every_line(door: Door) -> None:
    seen: list[str] = []

    def hostile(line: str) -> None:
        seen.append(line)
        raise RuntimeError("the frontend is gone")

    repl = door.repl(on_stdout=hostile, on_stderr=hostile)
    code = "import sys\nfor i in range(50):\n    print(i)\n    print(i, file=sys.stderr)"
    result = repl.execute(code)
    expected = "".join(f"{i}\n" for i in range(50))
    assert result.ok, result.error
    assert (result.stdout, result.stderr) == (expected, expected)
    assert len(seen) <= 2, "a callback that raised was called again"
    door.assert_survived(repl)


def test_a_stdout_callback_that_raises_on_a_last_partial_line(door: Door) -> None:
    def hostile(line: str) -> None:
        raise RuntimeError("the frontend is gone")

    repl = door.repl(on_stdout=hostile)
    try:
        result = repl.execute("print('no newline at the end', end='')")
    except RuntimeError as exc:
        pytest.fail(
            "an on_stdout callback that raises on the cell's last line (one "
            "without a newline) escapes from execute(): LineSplitter.flush() calls it outside "
            f"the stream's guard ({exc!r})"
        )
    assert result.ok and result.stdout == "no newline at the end"
    door.assert_survived(repl)


@pytest.fixture
def stall() -> Iterator[threading.Event]:
    """Set at the test's end: a callback waiting on it stops waiting (its 30 s are the point
    of the test, not a thread left behind)."""
    release = threading.Event()
    yield release
    release.set()


def test_a_callback_slower_than_the_cell_timeout(door: Door, stall: threading.Event) -> None:
    def stalls(prompt: str) -> str:
        stall.wait(30)
        return "too late"

    repl = door.repl(timeout_seconds=1, on_llm_query=stalls)
    started = time.monotonic()
    result = repl.execute("llm_query('are you there?')")
    elapsed = time.monotonic() - started
    assert result.status is ExecutionStatus.TIMEOUT
    assert result.rolled_back is True
    assert elapsed < 15, f"the host waited {elapsed:.1f} s for a 30 s callback past a 1 s deadline"
    door.assert_survived(repl)


def test_a_batched_callback_slower_than_the_cell_timeout(
    door: Door, stall: threading.Event
) -> None:
    repl = door.repl(timeout_seconds=1, on_llm_query=lambda p: stall.wait(30) and "late")
    started = time.monotonic()
    result = repl.execute("llm_query_batched(['a', 'b', 'c'])")
    assert result.status is ExecutionStatus.TIMEOUT
    assert time.monotonic() - started < 15  # not the callbacks' 30 s
    door.assert_survived(repl)


# --- the warm image's listing ---------------------------------------------------------------

_FORGED_LISTING = """
import array, sys
target = object()
before = sys.getrefcount(target)
addresses = array.array('I', [id(target)] * 4)
where, count = addresses.buffer_info()
refusals = []
for forged in (
    lambda: __sandbox_kernel__.request(
        'image', address=where, count=count, static=sys.getrefcount(None)
    ),
    __sandbox_kernel__.list_image,
):
    try:
        forged()
    except RuntimeError as exc:
        refusals.append(str(exc))
print(refusals, sys.getrefcount(target) == before, sys._is_immortal(target))
"""


def test_a_cell_cannot_have_the_host_write_its_listing(door: Door) -> None:
    """The host makes listed objects immortal only as it makes a warm image, in the turn
    that imports its modules (Driver.list_image): a cell's forged listing, or the driver's
    own call made again from a cell, is refused, and no count in the guest changes."""
    repl = door.repl()
    result = repl.execute(_FORGED_LISTING)
    assert result.ok, result.error
    assert result.stdout.count("unexpected image request") == 2, result.stdout
    assert result.stdout.rstrip().endswith("True False"), result.stdout
    door.assert_survived(repl)
