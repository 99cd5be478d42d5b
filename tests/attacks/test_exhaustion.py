"""Attacks on the host's time, memory and output: every limit stops the guest and the host lives.

Each runaway must end with the right LimitKind (or a clean Python exception where the guest
catches the limit itself), within a bound, and the same sandbox must run again afterwards.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sandbox_kernel import ExecutionPolicy, LimitKind, PythonSandbox, SandboxLogger
from tests.attacks.conftest import HostGuard

_RECURSE = "def f(n):\n    return f(n + 1)\nf(0)"


def _sandbox(
    workspace: Path, logger: SandboxLogger | None = None, **policy: object
) -> PythonSandbox:
    return PythonSandbox(ExecutionPolicy(**{"timeout_seconds": 10, **policy}), workspace, logger)


# --- instructions and wall clock ----------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "while True:\n    pass",
        "x = 0\nwhile True:\n    x += 1",
        "sum(i * i for i in range(10**12))",
        "import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')",
    ],
    ids=["spin", "count", "generator", "regex-backtracking"],
)
def test_a_runaway_loop_runs_out_of_fuel(
    workspace: Path, host: HostGuard, logger: SandboxLogger, code: str
) -> None:
    # Starting and stopping the interpreter costs ~75M instructions; 300M leaves room for a
    # trivial program, so the limit is what stops the loop (the health check proves it).
    sandbox = _sandbox(workspace, logger, fuel_budget=300_000_000)
    result = sandbox.execute(code)
    assert result.limit is LimitKind.FUEL
    assert result.success is False
    assert result.exit_code is None
    assert result.fuel_consumed == 300_000_000
    assert result.error is not None and "fuel" in result.error
    assert "300,000,000" in result.error
    assert any(e.get("kind") == "fuel_exhaustion" for e in logger.events)
    host.assert_healthy(sandbox)


def test_a_runaway_loop_with_fuel_to_spare_times_out(workspace: Path, host: HostGuard) -> None:
    sandbox = _sandbox(workspace, fuel_budget=10**15, timeout_seconds=1)
    started = time.monotonic()
    result = sandbox.execute("while True:\n    pass")
    elapsed = time.monotonic() - started
    assert result.limit is LimitKind.TIMEOUT
    assert result.success is False
    assert result.exit_code is None
    assert result.error is not None and "timed out" in result.error
    assert elapsed < 10
    host.assert_healthy(sandbox)


@pytest.mark.parametrize(
    "code",
    [
        "import time\ntime.sleep(3600)",
        "import time\nwhile True:\n    time.sleep(0.001)",
        "import select\nselect.select([], [], [], 3600)",
    ],
    ids=["sleep", "many-sleeps", "select"],
)
def test_a_long_sleep_ends_at_the_deadline(workspace: Path, host: HostGuard, code: str) -> None:
    sandbox = _sandbox(workspace, timeout_seconds=2)
    result = sandbox.execute(code)
    assert result.limit is LimitKind.TIMEOUT, result.stderr
    assert result.success is False
    assert 1500 <= result.duration_ms <= 6000
    host.assert_healthy(sandbox)


# --- memory -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "x = bytearray(10**9)",
        "x = 'a' * 10**9",
        "x = [0] * (10**9 // 8)",
    ],
    ids=["bytearray", "str", "list"],
)
def test_a_huge_allocation_is_a_memory_error(workspace: Path, host: HostGuard, code: str) -> None:
    sandbox = _sandbox(workspace, memory_bytes=64_000_000)
    result = sandbox.execute(code)
    assert result.limit is LimitKind.MEMORY
    assert result.success is False
    assert "MemoryError" in result.stderr
    assert result.memory_used_bytes <= 64_000_000
    assert result.error is not None and "memory" in result.error
    host.assert_healthy(sandbox)


def test_creeping_allocation_is_reported_as_memory(workspace: Path, host: HostGuard) -> None:
    sandbox = _sandbox(workspace, memory_bytes=64_000_000)
    result = sandbox.execute("chunks = []\nwhile True:\n    chunks.append(bytearray(1_000_000))")
    assert result.success is False
    assert "MemoryError" in result.stderr
    assert result.limit is LimitKind.MEMORY, (
        "PythonSandbox._classify calls a run MEMORY only when stderr's last line "
        "starts with 'MemoryError'; a guest whose memory is exhausted while it prints the "
        "traceback ends in CPython's object dump and 'lost sys.stderr', so the limit is lost. "
        f"limit={result.limit} memory_used_bytes={result.memory_used_bytes:,} "
        f"stderr tail={result.stderr[-200:]!r}"
    )
    host.assert_healthy(sandbox)


def test_a_memory_error_can_be_caught_by_the_guest(workspace: Path, host: HostGuard) -> None:
    sandbox = _sandbox(workspace, memory_bytes=64_000_000)
    code = "try:\n    x = bytearray(10**9)\nexcept MemoryError:\n    print('caught')"
    result = sandbox.execute(code)
    assert result.stdout == "caught\n"
    assert result.success is True
    assert result.limit is None
    host.assert_healthy(sandbox)


# --- recursion ----------------------------------------------------------------------------


def test_deep_recursion_is_a_recursion_error(py: PythonSandbox, host: HostGuard) -> None:
    result = py.execute(_RECURSE)
    assert result.success is False
    assert result.exit_code == 1
    assert "RecursionError: maximum recursion depth exceeded" in result.stderr
    host.assert_healthy(py)


def test_unbounded_recursion_ends_and_the_host_survives(workspace: Path, host: HostGuard) -> None:
    sandbox = _sandbox(workspace, memory_bytes=64_000_000)
    started = time.monotonic()
    result = sandbox.execute("import sys\nsys.setrecursionlimit(10**6)\n" + _RECURSE)
    assert time.monotonic() - started < 10
    assert result.success is False
    ended_by_limit = result.limit in (LimitKind.MEMORY, LimitKind.TRAP)
    ended_in_python = "RecursionError" in result.stderr or "MemoryError" in result.stderr
    assert ended_by_limit or ended_in_python, (result.limit, result.error, result.stderr[-500:])
    host.assert_healthy(sandbox)


def test_a_crash_names_its_cause(workspace: Path) -> None:
    sandbox = _sandbox(workspace, memory_bytes=64_000_000)
    result = sandbox.execute("import sys\nsys.setrecursionlimit(10**6)\n" + _RECURSE)
    if result.limit is not LimitKind.TRAP:
        pytest.skip(f"this guest ended by {result.limit}, not a trap")
    assert result.error is not None
    assert "stack" in result.error.lower(), (
        "a trap's error keeps only the first line of wasmtime's message, "
        "'error while executing at wasm backtrace:', and drops the cause that follows "
        f"'Caused by:' (here 'wasm trap: call stack exhausted'). error={result.error!r}"
    )


# --- output floods ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "for _ in range(100):\n    print('x' * 1_000_000)",
        "import sys\nfor _ in range(100_000):\n    sys.stdout.write('y' * 1000 + '\\n')",
        "import os\nfor _ in range(100):\n    os.write(1, b'z' * 1_000_000)",
    ],
    ids=["print", "many-writes", "raw-fd"],
)
def test_a_stdout_flood_is_truncated(workspace: Path, host: HostGuard, code: str) -> None:
    sandbox = _sandbox(workspace, stdout_max_bytes=1024)
    started = time.monotonic()
    result = sandbox.execute(code)
    assert time.monotonic() - started < 15
    assert result.exit_code == 0, result.stderr
    assert result.limit is None, result.error  # a flood is cut, not stopped
    assert result.stdout_truncated is True
    assert len(result.stdout.encode()) <= 1024  # the notice is inside the cap
    assert "bytes of stdout omitted" in result.stdout
    host.assert_healthy(sandbox)


@pytest.mark.parametrize(
    "code",
    [
        "raise ValueError('e' * 5_000_000)",
        "import sys\nfor _ in range(50):\n    sys.stderr.write('e' * 1_000_000)",
        "import sys\nfor i in range(20_000):\n    print('line', i, file=sys.stderr)",
    ],
    ids=["huge-exception", "stderr-writes", "stderr-prints"],
)
def test_a_stderr_flood_is_truncated(workspace: Path, host: HostGuard, code: str) -> None:
    sandbox = _sandbox(workspace, stderr_max_bytes=1024)
    result = sandbox.execute(code)
    assert result.limit is None, result.error  # a flood is cut, not stopped
    assert result.stderr_truncated is True, result.error
    assert result.stdout_truncated is False
    assert len(result.stderr.encode()) <= 1024
    assert "bytes of stderr omitted" in result.stderr
    host.assert_healthy(sandbox)
