"""JavaScriptSandbox: the one-shot contract over the real QuickJS-NG guest, attacks included."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_kernel import (
    ExecutionPolicy,
    GuestImageNotFound,
    JavaScriptSandbox,
    LimitKind,
    RuntimeType,
    SandboxResult,
    create_sandbox,
)


def test_console_log_and_result_fields(js: JavaScriptSandbox, workspace: Path) -> None:
    result = js.execute("console.log([1, 2, 3].map(x => x * x).join(' '))")
    assert result.success, result.stderr
    assert result.stdout == "1 4 9\n"
    assert result.exit_code == 0
    assert result.runtime is RuntimeType.JAVASCRIPT
    assert 0 < result.fuel_consumed < js.policy.fuel_budget
    assert result.memory_used_bytes > 0
    assert result.duration_ms > 0
    assert result.workspace_path == workspace.resolve()


@pytest.mark.parametrize(
    ("code", "first_line"),
    [
        ("throw new Error('boom')", "Error: boom"),
        ("let = = 3;", "SyntaxError"),
        ("null.x", "TypeError"),
    ],
    ids=["throw", "syntax-error", "type-error"],
)
def test_uncaught_errors_go_to_stderr(js: JavaScriptSandbox, code: str, first_line: str) -> None:
    result = js.execute(code)
    assert not result.success
    assert result.exit_code == 1
    assert result.stderr.startswith(first_line)
    assert "/app/user_code.js:1" in result.stderr
    assert result.error is not None and first_line in result.error


def test_std_exit_code(js: JavaScriptSandbox) -> None:
    result = js.execute("console.log('bye'); std.exit(4)")
    assert (result.exit_code, result.success, result.stdout) == (4, False, "bye\n")


def test_file_deltas(js: JavaScriptSandbox, workspace: Path) -> None:
    (workspace / "old.txt").write_text("old")
    result = js.execute(
        "std.writeFile('/app/new.txt', 'new');"
        "os.mkdir('/app/sub', 0o755); std.writeFile('/app/sub/x.txt', 'x');"
        "const f = std.open('/app/old.txt', 'a'); f.puts('er'); f.close();"
    )
    assert result.success, result.stderr
    assert result.files_created == ["new.txt", "sub/x.txt"]
    assert result.files_modified == ["old.txt"]
    assert (workspace / "old.txt").read_text() == "older"


def test_module_imports_work(js: JavaScriptSandbox) -> None:
    result = js.execute("import * as os from 'qjs:os'; console.log(os.platform)")
    assert result.stdout == "wasi\n"


def test_validate_code_parses_without_running(js: JavaScriptSandbox, workspace: Path) -> None:
    assert js.validate_code("std.writeFile('/app/ran.txt', 'x'); while (true) {}")
    assert js.validate_code("import * as std from 'qjs:std'; await 1;")
    assert not js.validate_code("let = = 3")
    assert not js.validate_code(123)  # type: ignore[arg-type]
    assert not (workspace / "ran.txt").exists()


def test_json_round_trip_of_a_real_result(js: JavaScriptSandbox) -> None:
    result = js.execute("console.log('hi'); std.writeFile('/app/a.txt', 'a')")
    assert SandboxResult.model_validate_json(result.model_dump_json()) == result


def test_factory_and_missing_binary(workspace: Path, tmp_path: Path) -> None:
    assert isinstance(create_sandbox("javascript", workspace=workspace), JavaScriptSandbox)
    missing = tmp_path / "nope.wasm"
    with pytest.raises(FileNotFoundError, match=r"nope\.wasm") as caught:
        JavaScriptSandbox(workspace=workspace, wasm_binary_path=missing)
    assert isinstance(caught.value, GuestImageNotFound)


# Attacks: each ends clearly, and the same sandbox runs normally afterwards.


def _healthy(js: JavaScriptSandbox) -> None:
    after = js.execute("console.log('ok')")
    assert after.success and after.stdout == "ok\n"


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "/app/../etc/passwd", "/app/../../../../etc/passwd", "/proc/self/environ"],
    ids=["absolute", "dotdot", "deep-dotdot", "proc"],
)
def test_host_files_unreachable(js: JavaScriptSandbox, path: str) -> None:
    result = js.execute(f"console.log(std.loadFile({path!r}))")
    assert result.stdout == "null\n"
    _healthy(js)


def test_runaway_loop_runs_out_of_fuel(workspace: Path) -> None:
    sandbox = JavaScriptSandbox(ExecutionPolicy(fuel_budget=50_000_000), workspace)
    result = sandbox.execute("while (true) {}")
    assert (result.success, result.limit) == (False, LimitKind.FUEL)
    assert result.fuel_consumed == 50_000_000
    _healthy(sandbox)


@pytest.mark.slow
def test_sleep_past_the_deadline_times_out(workspace: Path) -> None:
    sandbox = JavaScriptSandbox(ExecutionPolicy(timeout_seconds=1), workspace)
    result = sandbox.execute("os.sleep(3600 * 1000); console.log('woke')")
    assert (result.success, result.limit, result.stdout) == (False, LimitKind.TIMEOUT, "")
    assert result.duration_ms < 10_000
    _healthy(sandbox)


def test_memory_cap_gives_out_of_memory(workspace: Path) -> None:
    sandbox = JavaScriptSandbox(ExecutionPolicy(memory_bytes=32_000_000), workspace)
    result = sandbox.execute("const a = []; for (;;) a.push(new Array(1e5).fill(1));")
    assert (result.success, result.limit) == (False, LimitKind.MEMORY)
    assert "out of memory" in result.stderr
    _healthy(sandbox)


def test_deep_recursion_is_a_clear_trap(js: JavaScriptSandbox) -> None:
    result = js.execute("function f(n) { return f(n + 1) + 1 } f(0)")
    assert (result.success, result.limit) == (False, LimitKind.TRAP)
    assert result.error is not None and "stack overflow" in result.error
    _healthy(js)


def test_output_flood_is_cut(workspace: Path) -> None:
    sandbox = JavaScriptSandbox(ExecutionPolicy(stdout_max_bytes=1024), workspace)
    result = sandbox.execute("for (let i = 0; i < 100000; i++) console.log('spam', i)")
    assert result.success and result.stdout_truncated
    assert "bytes of stdout omitted" in result.stdout
    assert len(result.stdout.encode()) <= 1024  # the notice is inside the cap


def test_read_only_data_mount(tmp_path: Path, workspace: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("input")
    sandbox = JavaScriptSandbox(ExecutionPolicy(mount_data_dir=data), workspace)
    result = sandbox.execute(
        "console.log(std.loadFile('/data/in.txt'));console.log(std.open('/data/out.txt', 'w'))"
    )
    assert result.stdout == "input\nnull\n"
    assert sorted(p.name for p in data.iterdir()) == ["in.txt"]


def test_no_host_environment(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_KERNEL_LLM_API_KEY", "sk-do-not-leak")
    sandbox = JavaScriptSandbox(ExecutionPolicy(env={"VISIBLE": "yes"}), workspace)
    result = sandbox.execute("console.log(JSON.stringify(std.getenviron()))")
    assert "sk-do-not-leak" not in result.stdout
    assert '"VISIBLE":"yes"' in result.stdout
