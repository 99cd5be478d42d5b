"""Attacks on a session's own machinery (issue 12): the door's bookkeeping, batched model
calls, the cell driver the rollback image holds, descriptors across a rollback, and the
workspace quota across executions. Real guests through ReplSandbox; after each attack the host
is unharmed and the session answers (or says plainly that it was rebuilt).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel import ExecutionPolicy, ExecutionStatus, REPLConfig, ReplSandbox
from tests.attacks.conftest import HostGuard
from tests.repl.conftest import stopped as stop
from tests.repl.conftest import wall_clock


@pytest.fixture
def make(workspace: Path, host: HostGuard) -> Iterator[Any]:
    made: list[ReplSandbox] = []

    def repl(policy: dict[str, Any] | None = None, **config: Any) -> ReplSandbox:
        fields = {"mount_host_dir": workspace, "fuel_budget": 50_000_000_000, **(policy or {})}
        session = ReplSandbox(REPLConfig(policy=ExecutionPolicy(**fields), **config))
        made.append(session)
        session.initialize(context="the context")
        assert session.execute("earlier = 'kept'").ok
        return session

    yield repl
    for session in made:
        session.destroy()
    host.assert_untouched()


FORGED = (
    "import _host, json\n"
    "answers = []\n"
    "for i in range({n}):\n"
    "    frame = {{'op': {op!r}, 'name': 'n%d' % i, 'cell': 10**6 + i, 'found': True,\n"
    "             'value': 'x' * 1000, 'reply': {{'status': 'ok'}}}}\n"
    "    answers.append(_host.call(json.dumps(frame).encode()))\n"
    "refused = sum(b'unexpected' in a for a in answers)"
)


# -- 2. the door's bookkeeping ----------------------------------------------------------------


@pytest.mark.parametrize("op", ["value", "done", "hello", "context"])
def test_forged_bookkeeping_is_refused_counted_and_never_kept(make: Any, op: str) -> None:
    repl = make()
    for _ in range(3):
        result = repl.execute(FORGED.format(n=3000, op=op))
        assert result.ok, result.error
        assert repl.get_variable("refused") >= 999  # refused while the budget lasted
        assert len(repl.bridge.values) == 0 and len(repl.bridge.replies) == 0
    flood = repl.execute(FORGED.format(n=1000, op=op) + "\nimport time\ntime.sleep(0.01)")
    assert flood.status is ExecutionStatus.ERROR
    assert "too many host requests" in (flood.evalue or "")  # bookkeeping spent the budget
    assert repl.execute("earlier").result == {"text/plain": "'kept'"}


# -- 5. batched model calls -------------------------------------------------------------------


def test_a_huge_batch_makes_no_call_past_the_budget(make: Any) -> None:
    calls: list[str] = []
    repl = make(on_llm_query=lambda prompt: calls.append(prompt) or "a")
    result = repl.execute("llm_query_batched(['q'] * 10**6)")
    assert result.status is ExecutionStatus.ERROR
    assert "would pass the limit" in (result.evalue or "")
    assert calls == []
    assert repl.execute("len(llm_query_batched(['q'] * 900))").result == {"text/plain": "900"}
    assert len(calls) == 900


def test_a_batch_stops_when_its_execution_ends(make: Any) -> None:
    lock = threading.Lock()
    calls = [0]

    def slow(prompt: str) -> str:
        with lock:
            calls[0] += 1
        time.sleep(0.05)
        return "a"

    repl = make(on_llm_query=slow, llm_concurrency=4)
    result = stop(repl, "llm_query_batched(['q'] * 900)", 1)
    assert result.status is ExecutionStatus.TIMEOUT
    time.sleep(0.3)
    with lock:
        after_the_cell = calls[0]
    time.sleep(1.0)
    assert calls[0] == after_the_cell, "model calls went on after the execution ended"
    assert after_the_cell < 200  # 1 s of 4 workers at 50 ms, not 900
    assert repl.execute("earlier").result == {"text/plain": "'kept'"}


# -- 9. the driver in the rollback image ------------------------------------------------------


@pytest.mark.parametrize(
    "tamper",
    [
        "import builtins\nbuiltins.__import__ = None",
        "__sandbox_kernel__.run_cell = lambda *a: None",
        "type(__sandbox_kernel__).run_cell = lambda *a: None",
        "import builtins\nbuiltins.compile = builtins.exec = None",
        "import linecache\nlinecache.cache = None",
        "del __sandbox_kernel__",
    ],
    ids=["import", "instance-method", "class-method", "compile-exec", "linecache", "del-name"],
)
def test_a_cell_cannot_break_the_driver_for_later_cells(make: Any, tamper: str) -> None:
    repl = make()
    tampered = repl.execute(tamper)
    assert "it was put back" in tampered.stderr
    assert repl.execute("import json\nearlier").result == {"text/plain": "'kept'"}
    assert stop(repl, "while True: pass").rolled_back  # a rollback restores a working driver
    assert repl.execute("earlier").result == {"text/plain": "'kept'"}


def test_a_session_that_cannot_run_cells_is_rebuilt_and_says_so(make: Any) -> None:
    repl = make()
    # The image's own turn machinery, which the driver does not keep: every later turn fails.
    assert repl.execute("import _reactor\n_reactor._turns = 'x'").ok
    broken = repl.execute("earlier")
    assert broken.ename == "SandboxSessionRebuilt"
    assert "rebuilt" in (broken.evalue or "") and "variables are gone" in (broken.evalue or "")
    assert repl.rebuilds == 1
    assert repl.execute("earlier").ename == "NameError"  # said plainly, and true
    assert repl.execute("context").result == {"text/plain": "'the context'"}
    assert repl.execute("1 + 1").result == {"text/plain": "2"}


# -- 4. the workspace quota holds for the session --------------------------------------------

QUOTA = 20_000_000


def used_bytes(folder: Path) -> int:
    return sum(
        entry.lstat().st_size + (4096 if entry.is_dir() else 0) for entry in folder.rglob("*")
    )


def test_the_quota_holds_across_executions(make: Any, workspace: Path) -> None:
    repl = make({"workspace_max_bytes": QUOTA})
    results = [
        repl.execute(f"open('/app/big{i}.bin', 'wb').write(b'x' * 6_000_000)") for i in range(4)
    ]
    assert [r.ok for r in results] == [True, True, True, False]
    assert "Errno 19" in (results[3].evalue or "") or "quota" in (results[3].evalue or "")
    assert used_bytes(workspace) <= QUOTA


def test_folders_and_links_count_against_the_quota(make: Any, workspace: Path) -> None:
    repl = make({"workspace_max_bytes": QUOTA})
    result = repl.execute(
        "import os\nmade = 0\ntry:\n    for i in range(20_000):\n"
        "        os.mkdir(f'/app/d{i}')\n        made += 1\nexcept OSError as e:\n"
        "    error = str(e)\nmade"
    )
    made = int(result.result["text/plain"])  # type: ignore[index]
    assert made <= QUOTA // 4096, f"{made} folders under a {QUOTA:,}-byte quota"
    links = repl.execute(
        "import os\nlinks = 0\ntry:\n    for i in range(20_000):\n"
        "        os.symlink('d0', f'/app/l{i}')\n        links += 1\n"
        "except OSError:\n    pass\nlinks"
    )
    assert links.result == {"text/plain": "0"}  # the quota is spent already


def test_scratch_counts_and_a_rollback_does_not_reset_the_quota(make: Any) -> None:
    repl = make({"workspace_max_bytes": QUOTA})
    assert repl.execute("open('/tmp/a.bin', 'wb').write(b'x' * 12_000_000)").ok
    assert stop(repl, "while True: pass").rolled_back
    more = repl.execute("open('/app/b.bin', 'wb').write(b'x' * 12_000_000)")
    assert not more.ok, "the quota forgot /tmp, or reset at the rollback"


def test_removing_files_gives_the_quota_back(make: Any) -> None:
    repl = make({"workspace_max_bytes": QUOTA})
    for _ in range(5):
        result = repl.execute(
            "import os\nopen('/app/churn.bin', 'wb').write(b'x' * 15_000_000)\n"
            "os.remove('/app/churn.bin')"
        )
        assert result.ok, result.error
    assert repl.execute("earlier").result == {"text/plain": "'kept'"}


def test_files_removed_on_the_host_give_the_quota_back(make: Any, workspace: Path) -> None:
    """A file browser's delete or an `rm` tells the guard nothing: the quota follows the disk."""
    repl = make({"workspace_max_bytes": QUOTA})
    for round_ in range(3):
        wrote = repl.execute(
            f"import os\nos.makedirs('/app/made{round_}/a/b')\n"
            f"open('/app/made{round_}/big.bin', 'wb').write(b'x' * 15_000_000)"
        )
        assert wrote.ok, (round_, wrote.error)
        shutil.rmtree(workspace / f"made{round_}")  # on the host, between cells
    assert repl.execute("earlier").result == {"text/plain": "'kept'"}


def test_the_disk_measure_never_lets_the_guest_past_the_quota(make: Any, workspace: Path) -> None:
    """Measuring again only ever counts what is there: a full workspace stays full."""
    repl = make({"workspace_max_bytes": QUOTA})
    assert repl.execute("open('/app/a.bin', 'wb').write(b'x' * 15_000_000)").ok
    for _ in range(3):
        refused = repl.execute("open('/app/b.bin', 'wb').write(b'x' * 15_000_000)")
        assert not refused.ok
    assert used_bytes(workspace) <= QUOTA


# -- 11. descriptors across a rollback --------------------------------------------------------


def test_files_opened_earlier_survive_a_rollback(make: Any) -> None:
    repl = make()
    assert repl.execute(
        "open('/app/data.txt', 'w').write('one\\ntwo\\nthree\\n')\n"
        "reader = open('/app/data.txt')\nfirst = reader.readline()\n"
        "log = open('/app/log.txt', 'a')\nlog.write('a\\n'); log.flush()"
    ).ok
    assert stop(repl, "while True: pass").rolled_back
    after = repl.execute("log.write('b\\n'); log.flush()\nreader.readline()")
    assert after.ok, after.error
    assert after.result == {"text/plain": "'two\\n'"}  # the cursor came back too
    assert repl.execute("open('/app/log.txt').read()").result == {"text/plain": "'a\\nb\\n'"}


def test_figures_with_text_still_render_after_a_rollback(make: Any) -> None:
    """matplotlib keeps its font files open: before, every later figure was dropped."""
    repl = make({"memory_bytes": 1_000_000_000})
    first = repl.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.title('one');")
    assert first.ok and len(first.displays) == 1
    assert stop(repl, "while True: pass").rolled_back
    again = repl.execute("plt.plot([2, 1]); plt.title('two');")
    assert again.ok, again.error
    assert len(again.displays) == 1 and "image/png" in again.displays[0]["data"]
    assert "Exception ignored" not in again.stderr and "Bad file descriptor" not in again.stderr


def test_a_file_removed_before_the_rollback_stays_closed(make: Any, workspace: Path) -> None:
    repl = make()
    assert repl.execute("open('/app/gone.txt', 'w').write('x')\nkeep = open('/app/gone.txt')").ok
    (workspace / "gone.txt").unlink()
    assert stop(repl, "while True: pass").rolled_back
    read = repl.execute("keep.read()")
    assert read.ename == "OSError" and "Bad file descriptor" in (read.evalue or "")
    assert repl.execute("earlier").result == {"text/plain": "'kept'"}


# -- 7. host calls into the guest keep the time limit -----------------------------------------

SLOW_REPR = (
    "import time\n"
    "class Slow:\n"
    "    def __repr__(self):\n        time.sleep(30); return 'slow'\n"
    "    def __dir__(self):\n        time.sleep(30); return []\n"
    "    def __iter__(self):\n        time.sleep(30); return iter(())\n"
    "slow = [Slow()]"
)


@pytest.mark.parametrize("call", ["get_variable", "complete", "inspect", "evaluate"])
def test_host_calls_on_slow_objects_keep_the_time_limit(make: Any, call: str) -> None:
    repl = make()
    assert repl.execute(SLOW_REPR).ok
    started = time.monotonic()
    with wall_clock(repl, 3):
        if call == "get_variable":
            answer: Any = repl.get_variable("slow")
        elif call == "complete":
            answer = repl.complete("slow[0].", 8)
        elif call == "inspect":
            answer = repl.inspect("slow", 4)
        else:
            answer = repl.evaluate({"e": "slow"})
    # Well under the 30 s the object sleeps: the 3 s limit, and room for a busy machine.
    assert time.monotonic() - started < 3 + 15, f"{call} ignored the 3 s limit"
    if call == "get_variable":
        assert answer is None  # stopped: nothing, not a hang
    elif call == "evaluate":
        assert answer["e"]["status"] == "error"
    elif call == "complete":
        assert answer.get("matches", []) == []
    assert repl.execute("earlier").result == {"text/plain": "'kept'"}


def test_loading_a_context_through_a_tampered_json_is_bounded(make: Any) -> None:
    repl = make()
    assert repl.execute("import json\njson.loads = lambda *a, **k: [0 for _ in iter(int, 1)]").ok
    started = time.monotonic()
    with wall_clock(repl, 3), pytest.raises(Exception, match="context"):
        repl.initialize(context={"a": 1})  # a dict travels as JSON
    assert time.monotonic() - started < 3 + 15  # the limit, not the endless loop
    assert repl.execute("1 + 1").result == {"text/plain": "2"}
