"""NativeReplSandbox: the unsandboxed backend, with real child processes (no WebAssembly).

Each test starts its own child (about 70 ms); cancels and timeouts are real signals and kills.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel import ExecutionPolicy
from sandbox_kernel.core.errors import SandboxExecutionError
from sandbox_kernel.repl import REPLConfig, create_repl
from sandbox_kernel.repl.models import ExecutionStatus
from sandbox_kernel.repl.native import NativeReplSandbox

Factory = Callable[..., NativeReplSandbox]


@pytest.fixture
def make(workspace: Path) -> Iterator[Factory]:
    """Sessions on `workspace` with REPLConfig fields given by keyword; all destroyed after."""
    made: list[NativeReplSandbox] = []

    def factory(**fields: Any) -> NativeReplSandbox:
        fields.setdefault("policy", ExecutionPolicy(timeout_seconds=10))
        session = NativeReplSandbox(REPLConfig(backend="native", workspace=workspace, **fields))
        made.append(session)
        return session

    yield factory
    for session in made:
        session.destroy()


@pytest.fixture
def repl(make: Factory) -> NativeReplSandbox:
    session = make()
    session.initialize()
    return session


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _cancel_after(session: NativeReplSandbox, seconds: float) -> threading.Thread:
    def cancel() -> None:
        time.sleep(seconds)
        session.cancel()

    thread = threading.Thread(target=cancel)
    thread.start()
    return thread


# -- the basics ----------------------------------------------------------------------------


def test_create_repl_gives_the_native_backend_labelled_unsafe(workspace: Path) -> None:
    session = create_repl(REPLConfig(backend="native", workspace=workspace))
    assert isinstance(session, NativeReplSandbox)
    assert session.sandboxed is False
    assert session.rollbacks == 0
    assert "UNSAFE" in (NativeReplSandbox.__doc__ or "")


def test_state_persists_across_executions(repl: NativeReplSandbox) -> None:
    assert repl.execute("x = 40").ok
    assert repl.execute("def f(y):\n    return x + y").ok
    result = repl.execute("f(2)")
    assert result.status is ExecutionStatus.OK
    assert result.result == {"text/plain": "42"}
    assert result.execution_count == 3
    assert result.fuel_consumed == 0


@pytest.mark.parametrize(
    ("code", "bundle"),
    [
        ("1 + 1", {"text/plain": "2"}),
        ("'text'", {"text/plain": "'text'"}),
        ("[1, 2]", {"text/plain": "[1, 2]"}),
        ("1 + 1;", None),
        ("x = 3", None),
        ("None", None),
    ],
    ids=["int", "str", "list", "semicolon", "statement", "none"],
)
def test_the_last_expression_is_the_result_bundle(
    repl: NativeReplSandbox, code: str, bundle: dict[str, Any] | None
) -> None:
    result = repl.execute(code)
    assert result.ok
    assert result.result == bundle


def test_a_rich_repr_gives_its_mime_type(repl: NativeReplSandbox) -> None:
    code = "class H:\n    def _repr_html_(self):\n        return '<b>hi</b>'\nH()"
    result = repl.execute(code)
    assert result.result is not None
    assert result.result["text/html"] == "<b>hi</b>"


def test_an_exception_is_an_error_with_a_traceback_naming_the_cell(
    repl: NativeReplSandbox,
) -> None:
    repl.execute("a = 1")
    result = repl.execute("def g():\n    return 1 / 0\ng()")
    assert result.status is ExecutionStatus.ERROR
    assert result.ename == "ZeroDivisionError"
    assert result.error == "ZeroDivisionError: division by zero"
    text = "\n".join(result.traceback)
    assert '"<cell-2>", line 3' in text
    assert '"<cell-2>", line 2, in g' in text
    assert "child.py" not in text and "driver.py" not in text
    assert repl.get_variable("a") == 1  # an error keeps the session


def test_a_syntax_error_is_an_error(repl: NativeReplSandbox) -> None:
    result = repl.execute("def (")
    assert result.status is ExecutionStatus.ERROR
    assert result.ename == "SyntaxError"


# -- output --------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", ["stdout", "stderr"], ids=["stdout", "stderr"])
def test_print_streams_each_line_in_order(make: Factory, stream: str) -> None:
    lines: list[str] = []
    repl = make(**{f"on_{stream}": lines.append})
    code = f"import sys\nfor i in range(50):\n    print('line', i, file=sys.{stream})\n"
    code += f"print('no newline', end='', file=sys.{stream})"
    result = repl.execute(code)
    assert result.ok
    expected = [f"line {i}\n" for i in range(50)] + ["no newline"]
    assert lines == expected
    assert getattr(result, stream) == "".join(expected)


def test_output_goes_to_the_execution_that_printed_it(repl: NativeReplSandbox) -> None:
    first = repl.execute("print('one')")
    second = repl.execute("import sys; sys.stderr.write('two\\n'); print('three')")
    assert (first.stdout, first.stderr) == ("one\n", "")
    assert (second.stdout, second.stderr) == ("three\n", "two\n")


def test_stdout_and_displays_keep_their_order(make: Factory) -> None:
    events: list[str] = []
    repl = make(
        on_stdout=lambda line: events.append(f"out:{line.strip()}"),
        on_display=lambda data, metadata: events.append(f"display:{data['text/plain']}"),
    )
    result = repl.execute("print('a')\ndisplay(1)\nprint('b')\ndisplay(2)")
    assert result.ok
    assert events == ["out:a", "display:1", "out:b", "display:2"]
    assert [d["data"]["text/plain"] for d in result.displays] == ["1", "2"]


def test_output_past_the_cap_is_cut_with_the_notice(make: Factory) -> None:
    repl = make(policy=ExecutionPolicy(timeout_seconds=10, stdout_max_bytes=100))
    result = repl.execute("print('x' * 1000)")
    assert result.ok
    assert result.truncated
    assert len(result.stdout.encode()) <= 100  # the cap is the cap, notice included
    assert result.stdout.startswith("x" * 50)
    assert result.stdout.endswith("[sandbox: stdout cut at 100 bytes]\n")


def test_utf8_split_across_reads_streams_whole(make: Factory) -> None:
    lines: list[str] = []
    repl = make(on_stdout=lines.append)
    result = repl.execute(
        "import sys\nfor _ in range(3):\n    sys.stdout.write('é' * 70000 + '\\n')"
    )
    assert result.ok
    assert lines == ["é" * 70000 + "\n"] * 3


# -- interrupts, timeouts, crashes ---------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    ["while True:\n    pass", "import time\ntime.sleep(100)"],
    ids=["busy-loop", "sleep-through-the-door"],
)
def test_cancel_is_soft_and_keeps_the_state(make: Factory, code: str) -> None:
    repl = make(interrupt_grace_seconds=5)
    repl.execute("kept = 'yes'")
    pid = repl.pid
    thread = _cancel_after(repl, 0.3)
    started = time.monotonic()
    result = repl.execute(code)
    thread.join()
    assert time.monotonic() - started < 2
    assert result.status is ExecutionStatus.CANCELLED
    assert result.ename == "KeyboardInterrupt"
    assert result.rolled_back is False
    assert repl.pid == pid
    assert repl.restarts == 0
    assert repl.get_variable("kept") == "yes"


def test_a_cell_that_catches_the_interrupt_carries_on(make: Factory) -> None:
    repl = make(interrupt_grace_seconds=5)
    thread = _cancel_after(repl, 0.3)
    code = (
        "import time\n"
        "try:\n"
        "    time.sleep(100)\n"
        "except KeyboardInterrupt:\n"
        "    caught = True\n"
        "total = 0\n"
        "for i in range(100_000):\n"
        "    total += i\n"
        "(caught, total)"
    )
    result = repl.execute(code)
    thread.join()
    assert result.status is ExecutionStatus.OK  # one cancel, one KeyboardInterrupt
    assert result.result == {"text/plain": "(True, 4999950000)"}


def test_cancel_while_idle_does_nothing(repl: NativeReplSandbox) -> None:
    assert repl.cancel() is False
    assert repl.execute("1").result == {"text/plain": "1"}


@pytest.mark.parametrize(
    "code",
    [
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
        "sum(range(10**12))",  # one C call: no bytecode boundary for the KeyboardInterrupt
    ],
    ids=["sigint-ignored", "c-loop"],
)
def test_a_cell_that_ignores_sigint_is_killed_and_the_session_restarts(
    make: Factory, code: str
) -> None:
    repl = make(interrupt_grace_seconds=0.5)
    repl.execute("lost = 1")
    pid = repl.pid
    assert pid is not None
    thread = _cancel_after(repl, 0.3)
    started = time.monotonic()
    result = repl.execute(code)
    assert time.monotonic() - started < 2
    thread.join()
    assert result.status is ExecutionStatus.CANCELLED
    assert result.rolled_back is False
    assert result.evalue is not None
    assert "restarted" in result.evalue and "state was lost" in result.evalue
    assert _gone(pid)
    assert repl.pid != pid
    assert repl.get_variable("lost") is None
    assert repl.execute("2 * 21").result == {"text/plain": "42"}


def test_a_timeout_restarts_the_session(make: Factory) -> None:
    repl = make(policy=ExecutionPolicy(timeout_seconds=1))
    repl.execute("lost = 1")
    started = time.monotonic()
    result = repl.execute("while True:\n    pass")
    assert 1 <= time.monotonic() - started < 3
    assert result.status is ExecutionStatus.TIMEOUT
    assert result.evalue is not None and "timed out after 1 s" in result.evalue
    assert repl.get_variable("lost") is None
    assert repl.execute("'usable'").result == {"text/plain": "'usable'"}


def test_a_sleep_past_the_deadline_times_out(make: Factory) -> None:
    repl = make(policy=ExecutionPolicy(timeout_seconds=0.5))
    result = repl.execute("import time\ntime.sleep(60)")
    assert result.status is ExecutionStatus.TIMEOUT
    assert repl.execute("1").ok


@pytest.mark.parametrize(
    ("code", "text"),
    [
        ("import os\nos._exit(3)", "exit code 3"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),
    ],
    ids=["exit", "killed"],
)
def test_a_child_that_dies_is_replaced(make: Factory, code: str, text: str) -> None:
    repl = make()
    repl.execute("print('before')")
    result = repl.execute(f"print('last words')\n{code}")
    assert result.status is ExecutionStatus.ERROR
    assert result.evalue is not None and text in result.evalue
    assert "last words" in result.stdout
    assert repl.execute("'fresh'").result == {"text/plain": "'fresh'"}


# -- bridges -------------------------------------------------------------------------------


def test_llm_query_reaches_the_python_callback(make: Factory) -> None:
    prompts: list[str] = []

    def answer(prompt: str) -> str:
        prompts.append(prompt)
        return prompt.upper()

    repl = make(on_llm_query=answer)
    result = repl.execute("llm_query('hello'), llm_query_batched(['a', 'b'])")
    assert result.result == {"text/plain": "('HELLO', ['A', 'B'])"}
    assert sorted(prompts) == ["a", "b", "hello"]


def test_llm_query_from_cell_threads(make: Factory) -> None:
    repl = make(on_llm_query=lambda prompt: f"<{prompt}>")
    code = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "with ThreadPoolExecutor(4) as pool:\n"
        "    answers = list(pool.map(llm_query, [str(i) for i in range(20)]))\n"
        "answers == [f'<{i}>' for i in range(20)]"
    )
    assert repl.execute(code).result == {"text/plain": "True"}


def test_a_sleeping_cell_thread_does_not_hold_the_door(make: Factory) -> None:
    repl = make(on_llm_query=lambda prompt: "answer")
    code = (
        "import threading, time\n"
        "sleeper = threading.Thread(target=time.sleep, args=(3,), daemon=True)\n"
        "sleeper.start()\n"
        "llm_query('q')"
    )
    started = time.monotonic()
    result = repl.execute(code)
    assert result.result == {"text/plain": "'answer'"}
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(
    ("on_input", "status", "expected"),
    [
        (lambda prompt, password: f"{prompt}typed", ExecutionStatus.OK, "'name? typed'"),
        (None, ExecutionStatus.ERROR, None),
    ],
    ids=["with-on-input", "without-on-input"],
)
def test_input(make: Factory, on_input: Any, status: ExecutionStatus, expected: str | None) -> None:
    repl = make(on_input=on_input)
    result = repl.execute("input('name? ')")
    assert result.status is status
    if expected is None:
        assert result.ename == "EOFError"
    else:
        assert result.result == {"text/plain": expected}


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("v = 7", 7),
        ("v = [1, 'a', None, 2.5]", [1, "a", None, 2.5]),
        ("v = {'k': (1, 2)}", {"k": [1, 2]}),
        ("v = b'hi'", {"__bytes__": "aGk="}),
        ("pass", None),
    ],
    ids=["int", "list", "dict", "bytes", "missing"],
)
def test_get_variable(repl: NativeReplSandbox, code: str, value: Any) -> None:
    assert repl.execute(code).ok
    assert repl.get_variable("v") == value


def test_get_variable_refuses_a_non_name(repl: NativeReplSandbox) -> None:
    with pytest.raises(ValueError, match="not a variable name"):
        repl.get_variable("a; import os")


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ("a long document", "'a long document'"),
        (b"\x00bytes", "b'\\x00bytes'"),
        ({"k": [1, 2]}, "{'k': [1, 2]}"),
        (None, "None"),
    ],
    ids=["str", "bytes", "json", "none"],
)
def test_context_from_initialize(make: Factory, context: object, expected: str) -> None:
    repl = make()
    repl.initialize(context=context)
    assert repl.execute("repr(context)").result == {"text/plain": repr(expected)}


def test_the_context_survives_a_restart(make: Factory) -> None:
    repl = make(policy=ExecutionPolicy(timeout_seconds=0.5))
    repl.initialize(context="kept")
    assert repl.execute("while True:\n    pass").status is ExecutionStatus.TIMEOUT
    assert repl.execute("context").result == {"text/plain": "'kept'"}


# -- the process ---------------------------------------------------------------------------


def test_the_child_runs_in_the_workspace_with_a_clean_main(
    repl: NativeReplSandbox, workspace: Path
) -> None:
    result = repl.execute("import os, sys\n(os.getcwd(), sys.argv, sorted(globals()))")
    assert result.result is not None
    cwd, argv, names = eval(result.result["text/plain"])
    assert Path(cwd) == workspace.resolve()
    assert argv == [""]
    assert "main" not in names and "Channel" not in names


def test_the_api_key_does_not_reach_the_child(
    make: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_KERNEL_LLM_API_KEY", "sk-secret")
    monkeypatch.setenv("SANDBOX_KERNEL_LLM_BASE_URL", "http://example.invalid")
    repl = make()
    code = (
        "import os\nsorted(k for k in os.environ if 'SANDBOX' in k or 'sk-secret' in os.environ[k])"
    )
    assert repl.execute(code).result == {"text/plain": "[]"}
    assert repl.execute("'PATH' in os.environ").result == {"text/plain": "True"}


def test_destroy_leaves_no_child_process(make: Factory) -> None:
    repl = make()
    result = repl.execute("import subprocess\nsubprocess.Popen(['sleep', '60']).pid")
    assert result.result is not None
    grandchild = int(result.result["text/plain"])
    pid = repl.pid
    assert pid is not None
    repl.destroy()
    assert repl.pid is None
    assert _gone(pid)
    deadline = time.monotonic() + 5
    while not _gone_or_zombie(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)  # SIGKILL'd with the whole session; init reaps it
    assert _gone_or_zombie(grandchild)
    with pytest.raises(SandboxExecutionError, match="destroyed"):
        repl.execute("1")


def _gone_or_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_the_context_manager_starts_and_destroys(make: Factory) -> None:
    with make() as repl:
        pid = repl.pid
        assert repl.execute("1").ok
    assert pid is not None and _gone(pid)


def test_the_unsafe_warning_is_logged_once(make: Factory, caplog: pytest.LogCaptureFixture) -> None:
    repl = make(policy=ExecutionPolicy(timeout_seconds=0.3))
    with caplog.at_level(logging.WARNING, logger="sandbox_kernel"):
        repl.initialize()
        repl.execute("while True:\n    pass")  # a restart does not warn again
    unsafe = [r for r in caplog.records if "NO sandbox" in r.getMessage()]
    assert len(unsafe) == 1
