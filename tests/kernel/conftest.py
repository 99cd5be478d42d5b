"""Shared fixtures for the kernel tests: real `sandbox-python` kernels started through
jupyter_client, as Jupyter, papermill and nbval start them.

The kernel spec is installed into this interpreter's prefix once per test session (idempotent:
the spec is rewritten in place), so a fresh checkout needs no manual step. Every kernel starts
in a temporary folder with its own workspace (SANDBOX_KERNEL_WORKSPACE), an empty policy file
(SANDBOX_KERNEL_POLICY) and its own run log (SANDBOX_KERNEL_RUN_LOG), so tests see the
notebook defaults whatever the developer's ~/.config holds, and leave nothing in the
repository or in the developer's Jupyter data folder.

`kernel` is one kernel per test module, for tests that only add variables of their own (as
ipykernel's own tests share one); `fresh_kernel` is a kernel of the test's own, for tests that
restart, shut down or otherwise break state. tests/attacks/test_kernel_attacks.py imports the
helpers from here.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zmq
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

KERNEL_NAME = "sandbox-python"
STARTUP_TIMEOUT_SECONDS = 120.0  # the first session on a machine builds the warm image
CELL_TIMEOUT_SECONDS = 60.0
REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

SHUTDOWN_KNOWN_ISSUE = (
    "known issue: after a shutdown_request alone the kernel process sometimes stays alive "
    "(ipykernel tears iopub down while its control thread still publishes); clients that use "
    "KernelManager.shutdown_kernel are not affected (it ends the process)"
)
SHUTDOWN_HANG = (
    "after answering a shutdown_request the kernel process does not always exit "
    "by itself (exit codes {codes}; None = still running {timeout} s later, -6 = a libzmq "
    "abort). Its control thread hangs in ipykernel's process_control, flushing stdout or "
    "publishing 'idle' on iopub while IPKernelApp.close() tears the iopub thread down (it "
    "closes every thread's event pipe). jupyter_client hides it with SIGTERM after 2.5 s; a "
    "client that only sends shutdown_request leaves the process behind. ipykernel's own "
    "python3 kernel exited cleanly 20 times out of 20 on the same machine"
)

StdinAnswer = Callable[[dict[str, Any]], str]


@functools.cache
def install_kernel_spec() -> str:
    """`sandbox-kernel install --sys-prefix`, once per process; the command's output."""
    script = VENV_BIN / "sandbox-kernel"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "sandbox_kernel.cli"]
    done = subprocess.run(
        [*command, "install", "--sys-prefix"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"installing the kernel spec failed:\n{done.stdout}{done.stderr}"
    return done.stdout


def kernel_env(root: Path) -> dict[str, str]:
    """The environment for a kernel living in `root`: workspace `root`/workspace, an empty
    policy file (the kernel's notebook defaults), the run log at `root`/runs.jsonl (not in
    the developer's Jupyter data folder), everything else inherited."""
    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    policy = root / "policy.toml"
    if not policy.exists():
        policy.write_text("# empty: the kernel's notebook defaults\n")
    env = dict(os.environ)
    env["SANDBOX_KERNEL_WORKSPACE"] = str(workspace)
    env["SANDBOX_KERNEL_POLICY"] = str(policy)
    env["SANDBOX_KERNEL_RUN_LOG"] = str(root / "runs.jsonl")
    return env


@dataclass
class Output:
    """One iopub message of an execution, with the moment (time.monotonic) it arrived."""

    msg_type: str
    content: dict[str, Any]
    at: float


@dataclass
class Execution:
    """What one execute_request brought back."""

    msg_id: str
    sent_at: float
    reply: dict[str, Any] = field(default_factory=dict)  # the execute_reply's content
    replied_at: float = 0.0
    outputs: list[Output] = field(default_factory=list)  # iopub, busy/idle and input left out
    input_requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return str(self.reply.get("status"))

    def of_type(self, msg_type: str) -> list[Output]:
        return [out for out in self.outputs if out.msg_type == msg_type]

    def stream(self, name: str = "stdout") -> str:
        return "".join(
            out.content["text"] for out in self.of_type("stream") if out.content["name"] == name
        )

    def result(self, mime: str = "text/plain") -> str:
        results = self.of_type("execute_result")
        assert results, f"no execute_result: {self.describe()}"
        return str(results[-1].content["data"][mime])

    def error_text(self) -> str:
        """ename, evalue and traceback of the reply, as one string to search."""
        lines = [str(self.reply.get("ename")), str(self.reply.get("evalue"))]
        return "\n".join(lines + list(self.reply.get("traceback") or []))

    def describe(self) -> str:
        kinds = [(out.msg_type, str(out.content)[:300]) for out in self.outputs]
        return f"reply={self.reply!r} outputs={kinds!r}"


@dataclass
class RunningKernel:
    """A started kernel, its client and its host folders.

    Messages read while waiting for one execution that belong to another (a queued cell's
    reply, say) are kept for that execution, never dropped.
    """

    km: KernelManager
    kc: BlockingKernelClient
    root: Path
    _kept: dict[str, list[tuple[str, dict[str, Any], float]]] = field(default_factory=dict)

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def pid(self) -> int:
        """The kernel process's pid (a restart or a crash changes it)."""
        return int(self.km.provisioner.process.pid)  # type: ignore[union-attr]

    @property
    def run_log(self) -> Path:
        return self.root / "runs.jsonl"

    def send(self, code: str, **options: Any) -> Execution:
        options.setdefault("allow_stdin", False)
        started = time.monotonic()
        return Execution(self.kc.execute(code, **options), started)

    def run(
        self,
        code: str,
        timeout: float = CELL_TIMEOUT_SECONDS,
        stdin: StdinAnswer | None = None,
        **options: Any,
    ) -> Execution:
        if stdin is not None:
            options.setdefault("allow_stdin", True)
        return self.collect(self.send(code, **options), timeout, stdin)

    def run_ok(self, code: str, **options: Any) -> Execution:
        execution = self.run(code, **options)
        assert execution.status == "ok", f"{code!r} failed: {execution.describe()}"
        return execution

    def collect(
        self,
        execution: Execution,
        timeout: float = CELL_TIMEOUT_SECONDS,
        stdin: StdinAnswer | None = None,
    ) -> Execution:
        """Read the execution's iopub messages until idle, and its reply; input_requests are
        answered with `stdin`. An aborted execution's reply is enough (it has no iopub)."""
        deadline = time.monotonic() + timeout
        idle = False
        while not (execution.reply and (idle or execution.status == "aborted")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no reply within {timeout} s: {execution.describe()}")
            for channel, msg, at in self._next(execution.msg_id, stdin is not None):
                kind = msg["msg_type"]
                if channel == "shell":
                    execution.reply, execution.replied_at = msg["content"], at
                elif kind == "input_request":
                    execution.input_requests.append(msg["content"])
                    assert stdin is not None
                    self.kc.input(stdin(msg["content"]))
                elif kind == "status":
                    idle = idle or msg["content"]["execution_state"] == "idle"
                elif kind != "execute_input":
                    execution.outputs.append(Output(kind, msg["content"], at))
        return execution

    def reply(self, msg_id: str, timeout: float = CELL_TIMEOUT_SECONDS) -> dict[str, Any]:
        """The shell reply to any request (history, complete, ...): its content."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for channel, msg, _ in self._next(msg_id, with_stdin=False):
                if channel == "shell":
                    return dict(msg["content"])
        raise TimeoutError(f"no reply to {msg_id} within {timeout} s")

    def _next(self, msg_id: str, with_stdin: bool) -> list[tuple[str, dict[str, Any], float]]:
        """The messages for `msg_id` kept earlier, else the next ones to arrive for it."""
        kept = self._kept.pop(msg_id, [])
        if kept:
            return kept
        channels = {"iopub": self.kc.iopub_channel, "shell": self.kc.shell_channel}
        if with_stdin:
            channels["stdin"] = self.kc.stdin_channel
        poller = zmq.Poller()
        for channel in channels.values():
            poller.register(channel.socket, zmq.POLLIN)
        poller.poll(50)  # wait for the first message, then take all that are there
        mine = []
        for name, channel in channels.items():
            while channel.msg_ready():
                msg = channel.get_msg(timeout=0)
                item = (name, msg, time.monotonic())
                parent = msg["parent_header"].get("msg_id")
                if parent == msg_id:
                    mine.append(item)
                elif parent:
                    self._kept.setdefault(parent, []).append(item)
        return mine

    def shutdown_by_request(self, timeout: float = 10) -> tuple[int | None, float]:
        """Send a shutdown_request, as any client may, and wait for the process to end by
        itself (nobody signals it): its exit code (None if it is still running after
        `timeout`) and the seconds it took."""
        process = self.km.provisioner.process  # type: ignore[union-attr]
        started = time.monotonic()
        self.kc.shutdown()
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        return code, time.monotonic() - started

    def shutdown(self) -> None:
        self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=False)


def start_kernel(
    root: Path, extra_env: dict[str, str] | None = None, policy: str | None = None
) -> RunningKernel:
    """Start a kernel whose working folder is `root` (created), ready for requests; `policy`
    is the text of its policy file (default: empty, the notebook defaults)."""
    install_kernel_spec()
    root.mkdir(parents=True, exist_ok=True)
    if policy is not None:
        (root / "policy.toml").write_text(policy)
    km, kc = start_new_kernel(
        kernel_name=KERNEL_NAME,
        startup_timeout=STARTUP_TIMEOUT_SECONDS,
        cwd=str(root),
        env={**kernel_env(root), **(extra_env or {})},
    )
    return RunningKernel(km, kc, root)


# The line the sandbox adds after a cell that wrote files beside the notebook (issue 52): no
# ipykernel output has it, so tests that compare the two kernels' outputs leave it out.
WRITTEN_FILES_NOTE = re.compile(r"(?m)^\[sandbox\] this cell wrote .*\n?")


def without_written_files_note(text: str) -> str:
    return WRITTEN_FILES_NOTE.sub("", text)


BASELINE_KERNEL = "sandbox-baseline"  # ipykernel with the guest's package versions (bin/setup)


def start_ipykernel(root: Path, kernel_name: str = BASELINE_KERNEL) -> RunningKernel:
    """ipykernel itself, working in `root` (created), as the baseline a test compares with."""
    root.mkdir(parents=True, exist_ok=True)
    km, kc = start_new_kernel(
        kernel_name=kernel_name,
        startup_timeout=STARTUP_TIMEOUT_SECONDS,
        cwd=str(root),
        env=kernel_env(root),
    )
    return RunningKernel(km, kc, root)


@pytest.fixture(scope="module")
def ipykernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKernel]:
    """The baseline's ipykernel, one per test module, for the tests that compare with it."""
    running = start_ipykernel(tmp_path_factory.mktemp("ipykernel"))
    yield running
    running.shutdown()


def process_is_gone(pid: int) -> bool:
    """True when no process, not even an unreaped zombie, has this pid."""
    return not Path(f"/proc/{pid}").exists()


def processes_mentioning(text: str) -> list[int]:
    """Pids of the processes whose command line contains `text` (e.g. a connection file)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="session", autouse=True)
def kernel_spec() -> str:
    """The kernel spec, installed into this interpreter's prefix."""
    return install_kernel_spec()


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKernel]:
    running = start_kernel(tmp_path_factory.mktemp("kernel"))
    yield running
    running.shutdown()


@pytest.fixture
def fresh_kernel(tmp_path: Path) -> Iterator[RunningKernel]:
    running = start_kernel(tmp_path / "kernel")
    yield running
    running.shutdown()


@pytest.fixture
def jupyter_bin() -> Path:
    found = VENV_BIN / "jupyter"
    if not found.exists():
        which = shutil.which("jupyter")
        assert which, "the jupyter command is not installed"
        found = Path(which)
    return found
