"""The seeds' Python Runtime and Core Models scenarios, each quoted, through the public API as
a new user would call it (real guests), plus the fuel split that lets budgets be set sensibly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sandbox_kernel import (
    ExecutionPolicy,
    JavaScriptSandbox,
    PythonSandbox,
    REPLConfig,
    RuntimeType,
    create_repl,
    create_sandbox,
)
from sandbox_kernel.core.results import LimitKind
from sandbox_kernel.repl.daemon.protocol import connect, read_frame, send_frame
from tests.repl.daemon_fixtures import running_daemon

TEN_THOUSAND_BYTES = "import sys\nsys.stdout.write('x' * 10_000)"


@pytest.fixture
def module_in_workspace(workspace: Path) -> Path:
    (workspace / "helper_mod.py").write_text("VALUE = 42\n")
    return workspace


# -- "execute(code, inject_setup=False)" -----------------------------------------------------


def test_execute_takes_inject_setup_per_call(module_in_workspace: Path) -> None:
    """Scenario: execute(code, inject_setup=False): the setup (/app on sys.path) is left out
    for that call; the constructor's value stays the default."""
    sandbox = PythonSandbox(ExecutionPolicy(), module_in_workspace)
    code = "import helper_mod\nprint(helper_mod.VALUE)"
    assert sandbox.execute(code).stdout == "42\n"
    bare = sandbox.execute(code, inject_setup=False)
    assert not bare.success and "ModuleNotFoundError" in bare.stderr
    assert sandbox.execute(code).stdout == "42\n"  # the default is unchanged
    off = PythonSandbox(ExecutionPolicy(), module_in_workspace, inject_setup=False)
    assert not off.execute(code).success
    assert off.execute(code, inject_setup=True).stdout == "42\n"


def test_inject_setup_per_call_through_create_sandbox(module_in_workspace: Path) -> None:
    sandbox = create_sandbox("python", workspace=module_in_workspace)
    code = "import helper_mod"
    assert sandbox.execute(code).success
    assert not sandbox.execute(code, inject_setup=False).success
    default_off = create_sandbox(
        RuntimeType.PYTHON, workspace=module_in_workspace, inject_setup=False
    )
    assert not default_off.execute(code).success
    assert default_off.execute(code, inject_setup=True).success


def test_inject_setup_misuse_is_a_clear_error(workspace: Path) -> None:
    with pytest.raises(TypeError, match="inject_setup must be a bool"):
        PythonSandbox(ExecutionPolicy(), workspace).execute("pass", inject_setup="no")  # type: ignore[arg-type]
    javascript = JavaScriptSandbox(ExecutionPolicy(), workspace)
    assert javascript.execute("console.log(1)", inject_setup=False).stdout == "1\n"
    with pytest.raises(ValueError, match="no setup to inject"):
        javascript.execute("console.log(1)", inject_setup=True)


# -- "stdout_max_bytes is 1000 ... length MUST be <= 1000 bytes" -----------------------------


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_the_cap_is_the_cap_notice_included(workspace: Path, stream: str) -> None:
    """Scenario: policy.stdout_max_bytes is 1000, code prints 10,000 bytes: result.stdout
    length MUST be <= 1000 bytes, and truncation MUST be indicated."""
    policy = ExecutionPolicy(stdout_max_bytes=1000, stderr_max_bytes=1000)
    result = PythonSandbox(policy, workspace).execute(TEN_THOUSAND_BYTES.replace("stdout", stream))
    text = getattr(result, stream)
    assert len(text.encode("utf-8")) <= 1000
    assert getattr(result, f"{stream}_truncated") is True
    assert text.endswith("this notice included]\n") and "bytes of " + stream + " omitted" in text


def test_the_repls_cap_is_the_cap_too(workspace: Path) -> None:
    with create_repl(
        REPLConfig(workspace=workspace, policy=ExecutionPolicy(stdout_max_bytes=1000))
    ) as repl:
        execution = repl.execute(TEN_THOUSAND_BYTES)
    assert len(execution.stdout.encode("utf-8")) <= 1000
    assert execution.truncated and "omitted" in execution.stdout


# -- "stderr MUST contain 'OutOfFuel' or equivalent" ------------------------------------------


def test_fuel_exhaustion_is_written_to_stderr(workspace: Path) -> None:
    """Scenario: code exhausts fuel budget: stderr MUST contain 'OutOfFuel' or equivalent."""
    result = PythonSandbox(ExecutionPolicy(fuel_budget=200_000_000), workspace).execute(
        "x = 0\nfor i in range(10**9):\n    x += i"
    )
    assert result.limit is LimitKind.FUEL and not result.success
    assert "OutOfFuel" in result.stderr
    assert result.error is not None and result.error in result.stderr  # error stays as it was


@pytest.mark.parametrize("budget", [200_000_000, 10**12], ids=["fuel", "wall-clock"])
def test_an_infinite_loop_says_why_on_stderr(workspace: Path, budget: int) -> None:
    """Scenario: infinite loop: result.stderr MUST contain 'OutOfFuel' or timeout message."""
    policy = ExecutionPolicy(fuel_budget=budget, timeout_seconds=2)
    result = PythonSandbox(policy, workspace).execute("while True:\n    pass")
    assert result.limit in (LimitKind.FUEL, LimitKind.TIMEOUT)
    expected = "OutOfFuel" if result.limit is LimitKind.FUEL else "Timeout: timed out"
    assert expected in result.stderr


def test_the_limit_line_stays_within_the_stderr_cap(workspace: Path) -> None:
    policy = ExecutionPolicy(fuel_budget=300_000_000, stderr_max_bytes=300)
    code = "import sys\nsys.stderr.write('e' * 5000)\nwhile True:\n    pass"
    result = PythonSandbox(policy, workspace).execute(code)
    assert len(result.stderr.encode()) <= 300
    assert "OutOfFuel" in result.stderr


# -- the start's fuel, apart from the user's code ---------------------------------------------


def test_fuel_of_the_start_and_of_the_code_are_apart(workspace: Path) -> None:
    sandbox = PythonSandbox(ExecutionPolicy(), workspace)
    alive = sandbox.execute("print('alive')")
    loop = sandbox.execute("x = sum(range(100_000))")
    for result in (alive, loop):
        assert 10_000_000 < result.startup_fuel < 60_000_000
        assert result.startup_fuel + result.user_fuel < result.fuel_consumed  # + shutdown
    assert alive.user_fuel < 5_000_000  # printing one line is cheap; the start is not
    assert loop.user_fuel > 20 * alive.user_fuel
    assert abs(loop.startup_fuel - alive.startup_fuel) < 1_000_000


def test_a_budget_too_small_for_the_interpreter_says_so(workspace: Path) -> None:
    result = PythonSandbox(ExecutionPolicy(fuel_budget=50_000_000), workspace).execute(
        "print('alive')"
    )
    assert result.stdout == "alive\n"  # the code ran ...
    assert result.limit is LimitKind.FUEL  # ... and the shutdown ran out
    assert result.error is not None and "shutdown" in result.error
    tiny = PythonSandbox(ExecutionPolicy(fuel_budget=5_000_000), workspace).execute("pass")
    assert tiny.error is not None and "start" in tiny.error and tiny.user_fuel == 0


def test_javascript_reports_no_start(workspace: Path) -> None:
    result = JavaScriptSandbox(ExecutionPolicy(), workspace).execute("console.log(1)")
    assert result.startup_fuel == 0 and result.user_fuel == result.fuel_consumed


# -- "REPLConfig.timeout ... in milliseconds", "maxOutputLength" (seeds/004) ------------------


def test_the_specifications_repl_names_set_the_policy(workspace: Path) -> None:
    """Scenario: "WHEN REPLConfig.timeout is set THEN that value SHALL be used as the timeout in
    milliseconds"; "WHEN stdout length > maxOutputLength THEN output SHALL be truncated with
    omission notice". The names are inputs: the policy stays the one owner, and reading a
    name back gives the policy's value."""
    config = REPLConfig(workspace=workspace, timeout=1500, max_output_length=1000)
    assert config.policy.timeout_seconds == 1.5
    assert config.policy.stdout_max_bytes == config.policy.stderr_max_bytes == 1000
    assert (config.timeout, config.timeout_ms, config.max_output_length) == (1500, 1500, 1000)
    assert REPLConfig(timeout_ms=2500).policy.timeout_seconds == 2.5  # the earlier name
    assert REPLConfig().timeout == 30_000  # the policy's default, in milliseconds
    config.timeout = 4000
    config.max_output_length = 2000
    assert config.policy.timeout_seconds == 4.0 and config.policy.stderr_max_bytes == 2000
    kept = REPLConfig(timeout=3000, policy=ExecutionPolicy(memory_bytes=64_000_000))
    assert kept.policy.memory_bytes == 64_000_000 and kept.policy.timeout_seconds == 3.0
    agreeing = REPLConfig(timeout=3000, policy=ExecutionPolicy(timeout_seconds=3))
    assert agreeing.timeout == 3000


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"timeout": 1000, "timeout_ms": 2000}, "timeout and timeout_ms disagree"),
        ({"timeout": 1000, "policy": ExecutionPolicy(timeout_seconds=5)}, "disagree"),
        ({"max_output_length": 10, "policy": {"stdout_max_bytes": 20}}, "disagree"),
        ({"timeout": -1}, "milliseconds"),
        ({"timeout": "soon"}, "milliseconds"),
        ({"timeout": float("nan")}, "milliseconds"),
        ({"max_output_length": True}, "positive int"),
        ({"max_output_length": 0}, "positive int"),
    ],
)
def test_the_specifications_names_refuse_conflicts(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        REPLConfig.model_validate(fields)


def test_the_repl_enforces_the_specifications_names(workspace: Path) -> None:
    """A timeout in milliseconds ends a runaway cell; max_output_length cuts stdout with the
    notice; the session is kept."""
    config = REPLConfig(workspace=workspace, timeout=2000, max_output_length=1000)
    with create_repl(config) as repl:
        repl.initialize()
        cut = repl.execute(TEN_THOUSAND_BYTES)
        assert cut.truncated and len(cut.stdout.encode()) <= 1000 + 200
        assert "omitted" in cut.stdout or "cut" in cut.stdout or "truncated" in cut.stdout
        assert repl.execute("x = 1").ok
        slow = repl.execute("import time\ntime.sleep(60)")
        assert slow.status.value == "timeout", slow
        assert slow.duration_ms < 30_000  # the 2000 ms limit, not the 30 s default
        assert repl.execute("print(x)").stdout == "1\n"


def test_the_daemons_open_takes_the_specifications_names(tmp_path: Path, workspace: Path) -> None:
    """The daemon's `open` request reads the names as REPLConfig does, a conflict refused."""
    with running_daemon(tmp_path / "d", pool=1) as socket_path:
        good = {"timeout": 2000, "max_output_length": 500, "workspace": str(workspace)}
        bad = {"timeout": 2000, "policy": {"timeout_seconds": 9}, "workspace": str(workspace)}
        answers = []
        for config in (good, bad):
            with connect(socket_path, 60) as sock:
                send_frame(sock, {"op": "open", "config": config, "callbacks": []})
                answers.append(read_frame(sock))
    assert answers[0] is not None and answers[0]["op"] == "ready", answers[0]
    assert answers[1] is not None and answers[1]["op"] == "error", answers[1]
    assert "disagree" in answers[1]["message"]


def test_the_specifications_session_scenarios(workspace: Path) -> None:
    """seeds/004 in Python's spelling: initialize(context) binds `context`; execute returns
    stdout, stderr, error and duration; get_variable gives a value back, None for a missing
    one; on_stdout and on_stderr hear each line; cancel() when idle is harmless; destroy()."""
    lines: list[tuple[str, str]] = []
    config = REPLConfig(
        workspace=workspace,
        timeout=20_000,
        on_stdout=lambda line: lines.append(("out", line)),
        on_stderr=lambda line: lines.append(("err", line)),
    )
    repl = create_repl(config)
    repl.initialize("the context")
    done = repl.execute("import sys\nprint(context)\nprint('e', file=sys.stderr)\nvalue = [1, 2]")
    assert (done.stdout, done.stderr, done.error) == ("the context\n", "e\n", None)
    assert done.duration_ms > 0
    failed = repl.execute("raise ValueError('bad')")
    assert failed.error is not None and "bad" in failed.error
    assert repl.get_variable("value") == [1, 2]
    assert repl.get_variable("missing") is None
    assert ("out", "the context\n") in lines and ("err", "e\n") in lines
    repl.cancel()
    assert repl.execute("value").result == {"text/plain": "[1, 2]"}
    repl.destroy()
