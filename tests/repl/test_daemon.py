"""The daemon backend as a user meets it: a real daemon process, its warm workers, a
DaemonClientSandbox with ReplSandbox's interface and behaviour, and create_repl's choice."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from sandbox_kernel import REPLConfig, ReplSandbox, create_repl
from sandbox_kernel.repl.daemon import daemon_status
from sandbox_kernel.repl.daemon.client import DaemonClientSandbox
from sandbox_kernel.repl.models import ExecutionStatus
from tests.repl.daemon_fixtures import (
    daemon_client,
    daemon_session,
    pool_is_warm,
    wait_for,
)


def test_a_session_through_the_daemon_keeps_state_context_and_files(
    daemon: Path, workspace: Path
) -> None:
    for context in ("a long text", b"\x00\xffbytes", {"rows": [1, 2, 3]}):
        with daemon_session(daemon, workspace, context) as repl:
            assert repl.execute("type(context).__name__").result == {
                "text/plain": repr(type(context).__name__)
            }
            if not isinstance(context, bytes):  # get_variable's values are JSON's
                assert repl.get_variable("context") == context
            assert repl.execute("len(context)").result == {"text/plain": str(len(context))}
    with daemon_session(daemon, workspace) as repl:
        assert repl.execute("x = 41\nopen('note.txt', 'w').write('kept')").ok
        assert repl.execute("x + 1").result == {"text/plain": "42"}
        assert repl.get_variable("x") == 41
        assert repl.get_variable("missing") is None
        assert repl.usage()["executions"] == 2
        failed = repl.execute("1/0")
        assert failed.status is ExecutionStatus.ERROR and failed.ename == "ZeroDivisionError"
        assert repl.worker_pid is not None
    assert (workspace / "note.txt").read_text() == "kept"
    wait_for(lambda: daemon_status(daemon)["sessions"] == 0, what="the session's end")


def test_stdout_streams_while_the_cell_runs_and_in_order(daemon: Path, workspace: Path) -> None:
    heard: list[tuple[str, float]] = []
    repl = daemon_client(
        daemon, workspace, on_stdout=lambda line: heard.append((line, time.monotonic()))
    )
    try:
        started = time.monotonic()
        result = repl.execute("import time\nfor i in range(3):\n    print(i)\n    time.sleep(0.3)")
        ended = time.monotonic()
    finally:
        repl.destroy()
    assert [line for line, _ in heard] == ["0\n", "1\n", "2\n"]
    assert heard[0][1] - started < (ended - started) / 2  # the first line came early
    assert result.stdout == "0\n1\n2\n"


def test_the_clients_callbacks_answer_llm_query_rlm_query_and_input(
    daemon: Path, workspace: Path
) -> None:
    def model(prompt: str) -> str:
        time.sleep(0.2)
        return f"answer to {prompt}"

    def failing(prompt: str) -> str:
        raise RuntimeError("the model is down")

    repl = daemon_client(
        daemon,
        workspace,
        on_llm_query=model,
        on_rlm_query=lambda task, ctx: f"{task}:{ctx}",
        on_input=lambda prompt, password: "typed",
    )
    try:
        assert repl.execute("llm_query('q')").result == {"text/plain": "'answer to q'"}
        started = time.monotonic()
        batch = repl.execute("llm_query_batched([str(i) for i in range(8)])")
        assert batch.ok and time.monotonic() - started < 8 * 0.2  # answered concurrently
        assert repl.execute("rlm_query('t', [1])").result == {"text/plain": "'t:[1]'"}
        assert repl.execute("input('name? ')").result == {"text/plain": "'typed'"}
    finally:
        repl.destroy()
    repl = daemon_client(daemon, workspace, on_llm_query=failing)
    try:
        raised = repl.execute("llm_query('q')")
        assert raised.status is ExecutionStatus.ERROR and "the model is down" in str(raised.evalue)
        assert repl.execute("1 + 1").ok
    finally:
        repl.destroy()


def test_cancel_is_soft_then_hard_with_rollback(daemon: Path, workspace: Path) -> None:
    repl = daemon_client(daemon, workspace, interrupt_grace_seconds=0.5)
    try:
        assert repl.execute("kept = 'yes'").ok
        threading.Timer(0.5, repl.cancel).start()
        soft = repl.execute("import time\ntime.sleep(30)")
        assert soft.status is ExecutionStatus.CANCELLED and soft.ename == "KeyboardInterrupt"
        assert not soft.rolled_back
        threading.Timer(0.5, repl.cancel).start()
        hard = repl.execute("kept = 'no'\nsum(range(10**11))")  # C code: no safe point
        assert hard.status is ExecutionStatus.CANCELLED and hard.rolled_back
        assert repl.get_variable("kept") == "yes"
        assert not repl.cancel()  # nothing runs
        timed = daemon_client(daemon, workspace, policy={"timeout_seconds": 0.5})
        try:
            assert timed.execute("while True: pass").status is ExecutionStatus.TIMEOUT
            assert timed.execute("2").result == {"text/plain": "2"}
        finally:
            timed.destroy()
    finally:
        repl.destroy()


def test_auto_picks_the_daemon_only_when_it_answers(
    daemon: Path, workspace: Path, tmp_path: Path
) -> None:
    answering = create_repl(REPLConfig(backend="auto", daemon_socket=daemon, workspace=workspace))
    assert isinstance(answering, DaemonClientSandbox)
    answering.destroy()
    silent = tmp_path / "none.sock"
    fallback = create_repl(REPLConfig(backend="auto", daemon_socket=silent, workspace=workspace))
    assert isinstance(fallback, ReplSandbox)
    fallback.destroy()
    named = create_repl(REPLConfig(backend="wasm", daemon_socket=daemon, workspace=workspace))
    assert isinstance(named, ReplSandbox)  # an explicit name always wins
    named.destroy()


def test_the_pool_is_refilled_and_sessions_are_separate_processes(
    daemon: Path, workspace: Path
) -> None:
    wait_for(lambda: pool_is_warm(daemon), what="a warm pool")
    first = daemon_client(daemon, workspace)
    second = daemon_client(daemon, workspace)
    try:
        assert first.worker_pid != second.worker_pid
        assert first.execute("secret = 1").ok
        assert second.get_variable("secret") is None
        wait_for(lambda: pool_is_warm(daemon), what="the pool refilled")
        assert daemon_status(daemon)["sessions"] == 2
    finally:
        first.destroy()
        second.destroy()


def test_the_command_line_starts_reports_and_stops_a_daemon(tmp_path: Path) -> None:
    path = tmp_path / "cli" / "daemon.sock"
    command = [sys.executable, "-m", "sandbox_kernel.cli", "daemon"]
    where = ["--socket", str(path)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *args, *where], capture_output=True, text=True, timeout=120
        )

    started = run("start", "--pool", "1")
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["warm_workers"] == 1
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert json.loads(run("start").stdout)["pid"] == json.loads(started.stdout)["pid"]  # once
    assert json.loads(run("status").stdout)["socket"] == str(path)
    assert run("stop").returncode == 0 and not path.exists()
    stopped = run("status")
    assert stopped.returncode == 1 and "no daemon answers" in stopped.stderr
