"""The kernel as jupyter_client drives it: streaming, interrupts, restarts, shutdown, stdin,
limits, magics, the run log and rich output.

Most tests share one kernel per module (`kernel`) and only add variables of their own; tests
that restart, shut down or count executions get a kernel of their own (`fresh_kernel`).
"""

from __future__ import annotations

import base64
import json
import queue
import re
import time
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from tests.kernel.conftest import (
    KERNEL_NAME,
    SHUTDOWN_HANG,
    SHUTDOWN_KNOWN_ISSUE,
    STARTUP_TIMEOUT_SECONDS,
    RunningKernel,
    install_kernel_spec,
    kernel_env,
    process_is_gone,
    processes_mentioning,
    start_kernel,
)

ROLLED_BACK = "rolled back"


# -- output while a cell runs -----------------------------------------------------------------


def test_output_streams_before_the_cell_ends(kernel: RunningKernel) -> None:
    code = "print('before', flush=True)\nimport time\ntime.sleep(2)\nprint('after')"
    execution = kernel.run(code)
    assert execution.status == "ok", execution.describe()
    streams = execution.of_type("stream")
    assert [out.content["text"] for out in streams] == ["before\n", "after\n"]
    before, after = streams
    assert execution.replied_at - before.at > 1.0, "'before' arrived only when the cell ended"
    assert after.at - before.at > 1.0
    assert before.at - execution.sent_at < 1.5


def test_stdout_and_stderr_keep_their_names(kernel: RunningKernel) -> None:
    execution = kernel.run_ok("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert execution.stream("stdout") == "out\n"
    assert execution.stream("stderr") == "err\n"


# -- interrupts -------------------------------------------------------------------------------


def test_interrupt_stops_a_busy_loop_and_keeps_its_state(kernel: RunningKernel) -> None:
    running = kernel.send("n = 0\nwhile True: n += 1")
    time.sleep(1)
    kernel.km.interrupt_kernel()
    execution = kernel.collect(running, timeout=30)
    assert execution.status == "error", execution.describe()
    assert execution.reply["ename"] == "KeyboardInterrupt"
    assert [out.msg_type for out in execution.outputs] == ["error"]
    assert kernel.run_ok("n > 0").result() == "True"


def test_interrupt_ends_a_long_sleep(kernel: RunningKernel) -> None:
    running = kernel.send("import time\nslept = 'no'\ntime.sleep(100)\nslept = 'yes'")
    time.sleep(1)
    kernel.km.interrupt_kernel()
    execution = kernel.collect(running, timeout=30)
    assert execution.reply["ename"] == "KeyboardInterrupt", execution.describe()
    assert execution.replied_at - execution.sent_at < 10
    assert kernel.run_ok("slept").result() == "'no'"


@pytest.mark.slow
def test_interrupt_of_a_cell_without_safe_points_rolls_back(kernel: RunningKernel) -> None:
    kernel.run_ok("before_hard_stop = 'kept'")
    running = kernel.send("before_hard_stop = 'changed'\nsum(range(10**11))")
    time.sleep(1)
    kernel.km.interrupt_kernel()
    execution = kernel.collect(running, timeout=30)
    assert execution.reply["ename"] == "KeyboardInterrupt", execution.describe()
    assert ROLLED_BACK in execution.error_text()
    assert kernel.run_ok("before_hard_stop").result() == "'kept'"


def test_exception_without_a_message_has_an_empty_evalue(kernel: RunningKernel) -> None:
    execution = kernel.run("raise ValueError")
    assert execution.reply["ename"] == "ValueError"
    assert execution.reply["evalue"] == "", (
        f"a bare `raise ValueError` answers evalue {execution.reply['evalue']!r}; "
        "IPython answers '' (frontends print 'ename: evalue', so the name would show twice): "
        "messages.error_content must fall back to execution.error only when evalue is None"
    )


# -- lifecycle --------------------------------------------------------------------------------


def test_a_cell_sent_before_any_kernel_info_starts_the_session(tmp_path: Path) -> None:
    """The session starts after the kernel's first kernel_info reply (kernel.py,
    _start_session), so that its imports do not compete with the reply; a client that sends a
    cell at once, and one that asks to shut down at once, are answered all the same."""
    install_kernel_spec()
    for request in ("execute", "shutdown"):
        root = tmp_path / request
        root.mkdir()
        manager = KernelManager(kernel_name=KERNEL_NAME)
        manager.start_kernel(cwd=str(root), env=kernel_env(root))
        client = manager.client()
        client.start_channels()
        try:
            if request == "execute":
                reply = client.execute("6 * 7", reply=True, timeout=STARTUP_TIMEOUT_SECONDS)
                assert reply["content"]["status"] == "ok", reply["content"]
            else:
                client.shutdown()  # on the control channel, answered there
                reply = client.control_channel.get_msg(timeout=STARTUP_TIMEOUT_SECONDS)
                assert reply["msg_type"] == "shutdown_reply"
                assert reply["content"]["status"] == "ok"
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)


def test_restart_gives_a_fresh_session(fresh_kernel: RunningKernel) -> None:
    fresh_kernel.run_ok("marker = 'before restart'")
    fresh_kernel.km.restart_kernel(now=False)
    fresh_kernel.kc.wait_for_ready(timeout=120)
    gone = fresh_kernel.run("marker")
    assert gone.status == "error"
    assert gone.reply["ename"] == "NameError"
    assert fresh_kernel.run_ok("print(6 * 7)").stream() == "42\n"


def test_shutdown_ends_the_process(fresh_kernel: RunningKernel) -> None:
    fresh_kernel.run_ok("x = 1")
    km = fresh_kernel.km
    pid = km.provisioner.process.pid  # type: ignore[union-attr]
    connection_file = km.connection_file
    started = time.monotonic()
    km.shutdown_kernel(now=False)
    assert time.monotonic() - started < 10
    assert not km.is_alive()
    assert process_is_gone(pid)
    assert processes_mentioning(connection_file) == [], "a process of the kernel outlived it"


@pytest.mark.slow
@pytest.mark.xfail(
    strict=False,
    reason=SHUTDOWN_KNOWN_ISSUE,
)
def test_shutdown_request_alone_ends_the_process(tmp_path: Path) -> None:
    codes: list[int | None] = []
    for attempt in range(5):
        running = start_kernel(tmp_path / f"kernel-{attempt}")
        try:
            running.run_ok("x = 1")
            code, _ = running.shutdown_by_request(timeout=5)
            codes.append(code)
        finally:
            running.shutdown()
    assert codes == [0] * len(codes), SHUTDOWN_HANG.format(codes=codes, timeout=5)


def test_two_kernels_at_once_keep_their_own_state(
    kernel: RunningKernel, fresh_kernel: RunningKernel
) -> None:
    kernel.run_ok("whoami = 'first'")
    fresh_kernel.run_ok("whoami = 'second'")
    assert kernel.run_ok("whoami").result() == "'first'"
    assert fresh_kernel.run_ok("whoami").result() == "'second'"
    kernel.run_ok("open('/app/mine.txt', 'w').write('first')")
    assert (kernel.workspace / "mine.txt").read_text() == "first"
    assert not (fresh_kernel.workspace / "mine.txt").exists()


def test_kernel_info_waits_for_the_clients_iopub(tmp_path: Path) -> None:
    """A client's iopub connects apart from its shell; the kernel_info reply waits for it, so
    the first cell's 'busy' and 'idle' reach a client that runs it at once (jupyter console
    does, and waited forever for an 'idle' dropped before its subscription). A client that
    never subscribes still gets its reply."""
    install_kernel_spec()
    root = tmp_path / "kernel"
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.start_kernel(cwd=str(tmp_path), env=kernel_env(root))
    client = km.client()
    try:
        client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
        client.comm_info()  # answered without waiting: the kernel is up and serving its shell
        assert client.get_shell_msg(timeout=STARTUP_TIMEOUT_SECONDS)["msg_type"] == (
            "comm_info_reply"
        )
        asked = client.kernel_info()
        with pytest.raises(queue.Empty):  # nobody listens on iopub yet
            client.get_shell_msg(timeout=1.0)

        client.iopub_channel.start()
        reply = client.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == asked
        ran = client.execute("print(6*7)")
        states = []
        while "idle" not in states:
            message = client.get_iopub_msg(timeout=30)
            if message["parent_header"].get("msg_id") == ran and message["msg_type"] == "status":
                states.append(message["content"]["execution_state"])
        assert states == ["busy", "idle"]
        assert client.get_shell_msg(timeout=30)["parent_header"]["msg_id"] == ran

        client.iopub_channel.stop()  # the last subscriber leaves: a reply waits, and comes
        asked = client.kernel_info()
        assert client.get_shell_msg(timeout=30)["parent_header"]["msg_id"] == asked
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


# -- execute_request options ------------------------------------------------------------------


def test_silent_sends_nothing_and_keeps_the_count(kernel: RunningKernel) -> None:
    count = kernel.run_ok("1").reply["execution_count"]
    silent = kernel.run("print('hidden')\nsilently_set = 7\nsilently_set", silent=True)
    assert silent.status == "ok", silent.describe()
    assert silent.outputs == [], "a silent execution published output"
    assert silent.reply["execution_count"] == count
    after = kernel.run_ok("silently_set")
    assert after.reply["execution_count"] == count + 1
    assert after.result() == "7"


def test_store_history(kernel: RunningKernel) -> None:
    kernel.run_ok("kept_in_history = 1", store_history=True)
    kernel.run_ok("left_out_of_history = 2", store_history=False)
    msg_id = kernel.kc.history(hist_access_type="tail", n=50, output=False, raw=True)
    history = kernel.reply(msg_id)["history"]
    sources = [entry[2] for entry in history]
    assert "kept_in_history = 1" in sources
    assert "left_out_of_history = 2" not in sources


def test_user_expressions(kernel: RunningKernel) -> None:
    execution = kernel.run_ok(
        "base = 21", user_expressions={"double": "base * 2", "broken": "1 / 0"}
    )
    expressions = execution.reply["user_expressions"]
    assert expressions["double"] == {"status": "ok", "data": {"text/plain": "42"}, "metadata": {}}
    assert expressions["broken"]["status"] == "error"
    assert expressions["broken"]["ename"] == "ZeroDivisionError"


def test_stop_on_error_aborts_the_queue(kernel: RunningKernel) -> None:
    failing = kernel.send("import time\ntime.sleep(0.5)\n1 / 0")
    queued = kernel.send("ran_after_error = True")
    assert kernel.collect(failing).reply["ename"] == "ZeroDivisionError"
    assert kernel.collect(queued).status == "aborted"
    assert kernel.run("ran_after_error").reply.get("ename") == "NameError"


def test_stop_on_error_false_runs_the_queue(kernel: RunningKernel) -> None:
    failing = kernel.send("import time\ntime.sleep(0.5)\n1 / 0", stop_on_error=False)
    queued = kernel.send("ran_anyway = True")
    assert kernel.collect(failing).reply["ename"] == "ZeroDivisionError"
    assert kernel.collect(queued).status == "ok"
    assert kernel.run_ok("ran_anyway").result() == "True"


# -- stdin ------------------------------------------------------------------------------------


def test_input_with_stdin_asks_the_client(kernel: RunningKernel) -> None:
    execution = kernel.run(
        "answer = input('name? ')\nprint('got', answer)", stdin=lambda request: "Ada"
    )
    assert execution.input_requests, (
        "input() with allow_stdin=True sent no input_request; the cell failed "
        f"with {execution.reply.get('ename')}: {execution.reply.get('evalue')}. "
        "SandboxKernel.do_execute never sets self._allow_stdin = allow_stdin, so ipykernel's "
        "raw_input() always raises StdinNotImplementedError"
    )
    assert execution.input_requests[0]["prompt"] == "name? "
    assert execution.input_requests[0]["password"] is False
    assert execution.status == "ok", execution.describe()
    assert execution.stream() == "got Ada\n"


def test_input_without_stdin_is_a_clear_error(kernel: RunningKernel) -> None:
    execution = kernel.run("input('name? ')", allow_stdin=False)
    assert execution.status == "error"
    assert execution.input_requests == []
    assert "input" in execution.error_text()
    assert execution.reply["ename"] in ("EOFError", "StdinNotImplementedError"), (
        f"input() without stdin raised {execution.reply['ename']} "
        f"({execution.reply['evalue']!r}); cells that guard with `except EOFError` (the "
        "builtin's behaviour with no stdin) cannot catch it. The bridge wraps every on_input "
        "failure as RuntimeError('input failed: ...')"
    )
    assert kernel.run_ok("print('alive')").stream() == "alive\n"


# -- limits -----------------------------------------------------------------------------------


def test_timeout_rolls_back_and_keeps_earlier_state(kernel: RunningKernel) -> None:
    kernel.run_ok("survivor = 'still here'")
    policy = kernel.run_ok("%policy timeout_seconds=1")
    assert "timeout_seconds: 1.0" in policy.stream()
    try:
        execution = kernel.run("survivor = 'overwritten'\nwhile True: pass")
        assert execution.status == "error", execution.describe()
        assert execution.replied_at - execution.sent_at < 15
        text = execution.error_text()
        assert "timed out" in text
        assert ROLLED_BACK in text
        assert [out.msg_type for out in execution.outputs] == ["error"]
    finally:
        kernel.run_ok("%policy timeout_seconds=600")
    assert kernel.run_ok("survivor").result() == "'still here'"


# -- magics -----------------------------------------------------------------------------------


def test_policy_magic_shows_the_limits(kernel: RunningKernel) -> None:
    text = kernel.run_ok("%policy").stream()
    for key in ("fuel_budget:", "memory_bytes:", "timeout_seconds: 600.0", "guest_mount_path:"):
        assert key in text


def test_policy_magic_refuses_unknown_keys(kernel: RunningKernel) -> None:
    refused = kernel.run("%policy memory_bytes=1")
    assert refused.status == "error"
    assert refused.reply["ename"] == "UsageError"
    assert "KEY one of" in refused.error_text()
    assert "timeout_seconds: 600.0" in kernel.run_ok("%policy").stream()


def test_sandbox_magic_reports_usage(kernel: RunningKernel) -> None:
    kernel.run_ok("1 + 1")
    text = kernel.run_ok("%sandbox").stream()
    for key in ("image:", "executions:", "rollbacks:", "fuel used:", "memory:"):
        assert key in text, text
    assert re.search(r"rollback image: (pages written|whole memory) copied after each ", text)


def test_who_magic_lists_variables(kernel: RunningKernel) -> None:
    kernel.run_ok("listed_variable = 1\nimport json")
    names = kernel.run_ok("%who").stream().split()
    assert "listed_variable" in names
    assert "json" in names  # IPython's %who (in the guest) lists modules too


def test_context_magic_loads_a_workspace_file(kernel: RunningKernel) -> None:
    (kernel.workspace / "notes.txt").write_text("hay hay needle hay\n")
    loaded = kernel.run_ok("%context notes.txt")
    assert loaded.stream() == "context: 19 characters\n"
    assert kernel.run_ok("context").result() == repr("hay hay needle hay\n")
    hits = kernel.run_ok("search_context('needle')[0]['start']").result()
    assert hits == "8"
    kernel.run_ok("%context /app/notes.txt")
    assert kernel.run_ok("len(context)").result() == "19"


def test_context_magic_refuses_files_outside_the_workspace(kernel: RunningKernel) -> None:
    (kernel.root / "outside.txt").write_text("host secret")
    refused = kernel.run("%context ../outside.txt")
    assert refused.status == "error"
    assert "not a file in the workspace" in refused.error_text()
    assert "host secret" not in kernel.run("print(context)").stream()


def test_failing_magic_is_an_error_reply(kernel: RunningKernel) -> None:
    execution = kernel.run("%context no-such-file.txt")
    assert "not a file in the workspace" in execution.stream() + execution.error_text()
    assert execution.status == "error", (
        "a magic that fails (here %context of a missing file) answers status "
        "'ok' and prints its complaint on stdout, so papermill, nbval and nbclient run on "
        "with `context` unset; IPython answers a failed magic with an error (UsageError)"
    )
    assert execution.reply["ename"] == "UsageError"


# -- the run log ------------------------------------------------------------------------------


def test_run_log_has_one_line_per_execution(fresh_kernel: RunningKernel) -> None:
    cells = ["logged = 1", "1 / 0", "print(logged)"]
    for code in cells:
        fresh_kernel.run(code)
    entries = [json.loads(line) for line in fresh_kernel.run_log.read_text().splitlines()]
    assert [entry["code"] for entry in entries] == cells
    assert [entry["status"] for entry in entries] == ["ok", "error", "ok"]
    assert all(entry["ts"] and entry["duration_ms"] >= 0 for entry in entries)


# -- rich output ------------------------------------------------------------------------------


@pytest.mark.slow
def test_matplotlib_figure_is_a_png(kernel: RunningKernel) -> None:
    execution = kernel.run_ok(
        "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.title('squares');"
    )
    displays = execution.of_type("display_data")
    assert len(displays) == 1, execution.describe()
    data = displays[0].content["data"]
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert data["text/plain"].startswith("<Figure size")
    assert execution.of_type("execute_result") == []


def test_dataframe_is_an_html_table(kernel: RunningKernel) -> None:
    execution = kernel.run_ok("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    assert "<table" in execution.result("text/html")
    assert execution.result("text/plain").split() == ["a", "b", "0", "1", "x", "1", "2", "y"]


def test_the_streams_cap_is_the_cap_notice_included(fresh_kernel: RunningKernel) -> None:
    """As the library's: a 10,000-byte print under a 1,000-byte cap arrives as at most 1,000
    bytes, the notice saying it was cut among them; the next cell is whole again."""
    fresh_kernel.run_ok("%policy stdout_max_bytes=1000")
    execution = fresh_kernel.run_ok("import sys\nsys.stdout.write('x' * 10_000)")
    streamed = execution.stream("stdout")
    assert len(streamed.encode()) <= 1000
    assert streamed.endswith("this notice included]\n")
    assert execution.stream("stderr") == ""
    assert fresh_kernel.run_ok("print('whole')").stream() == "whole\n"


def test_a_run_log_that_cannot_be_written_is_said_and_cells_go_on(tmp_path: Path) -> None:
    """The run log's line is written after the reply, before the idle status: when it cannot
    be (its folder is a link, refused), the cell's output says so and the next cell runs."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "elsewhere")
    running = start_kernel(
        tmp_path / "own", extra_env={"SANDBOX_KERNEL_RUN_LOG": str(tmp_path / "linked" / "l")}
    )
    try:
        execution = running.run("x = 6 * 7")
        assert execution.status == "ok", execution.describe()
        assert "the run log could not be written" in execution.stream("stderr")
        assert running.run_ok("x").result() == "42"
        assert list((tmp_path / "elsewhere").iterdir()) == []
    finally:
        running.shutdown()
