"""The kernel under the notebook tools: papermill and nbval on notebooks/quickstart.ipynb, and
`jupyter console` typed into through a pseudo-terminal, as a person would use it.

papermill runs every cell (nbclient honours the `raises-exception` tag) but then raises
PapermillExecutionError for any error output, tagged or not; so the papermill test accepts that
error only when every error in the output notebook sits in a cell tagged `raises-exception`.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import papermill
import pytest
from papermill.exceptions import PapermillExecutionError

from tests.kernel.conftest import KERNEL_NAME, REPO, kernel_env, process_is_gone

QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
EXPECTED_ERROR = "raises-exception"
PROMPT = rb"In \[(\d+)\]: "


def unexpected_errors(notebook: nbformat.NotebookNode) -> list[str]:
    """Error outputs in cells not tagged raises-exception, and code cells that never ran."""
    problems = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        if cell.execution_count is None:
            problems.append(f"cell {index} did not run: {cell.source[:60]!r}")
        tags = cell.metadata.get("tags", [])
        for output in cell.outputs:
            if output.output_type == "error" and EXPECTED_ERROR not in tags:
                problems.append(f"cell {index}: {output.ename}: {output.evalue}")
    return problems


def notebook_env(root: Path) -> dict[str, str]:
    """The kernel environment, but with the policy and model of notebooks/config/policy.toml
    (the scripted model of the quickstart), named as bin/run-notebook names it."""
    env = kernel_env(root)
    env["SANDBOX_KERNEL_POLICY"] = str(QUICKSTART.parent / "config" / "policy.toml")
    return env


# -- papermill --------------------------------------------------------------------------------


@pytest.mark.slow
def test_papermill_runs_the_quickstart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in notebook_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    output = tmp_path / "quickstart.out.ipynb"
    try:
        papermill.execute_notebook(
            str(QUICKSTART),
            str(output),
            parameters={"n_rows": 7},
            cwd=str(QUICKSTART.parent),  # as Jupyter starts it
            progress_bar=False,
            start_timeout=120,
        )
    except PapermillExecutionError as error:
        assert error.ename == "SandboxLimitError", f"unexpected papermill error: {error}"
    notebook = nbformat.read(output, as_version=4)
    assert unexpected_errors(notebook) == []
    assert notebook.metadata.kernelspec.name == KERNEL_NAME

    text = "\n".join(
        output.get("text", "") + output.get("data", {}).get("text/plain", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    assert "7 squares add up to 91" in text  # the injected parameter reached the kernel
    assert "counter survived the rollback: False" in text
    assert "Revenue grew in the north, held flat in the south" in text  # the scripted model
    assert "north  'Quarterly report" in text  # llm_query_batched, in order
    assert """'["north", "south", "west"]'""" in text  # rlm_query's FINAL_VAR
    expected = [cell for cell in notebook.cells if EXPECTED_ERROR in cell.metadata.get("tags", [])]
    assert len(expected) == 1
    (error_output,) = [out for out in expected[0].outputs if out.output_type == "error"]
    assert "timed out after 2 s" in error_output.evalue
    assert "rolled back" in error_output.evalue
    assert (tmp_path / "workspace" / "sample.txt").is_file()


# -- nbval ------------------------------------------------------------------------------------


def run_nbval(
    notebook: str, cwd: Path, env: dict[str, str], *options: str
) -> subprocess.CompletedProcess[str]:
    """`pytest --nbval notebook` in a process of its own, from `cwd`, as a user runs it."""
    command = [
        sys.executable, "-m", "pytest", "--nbval", notebook, *options,
        "-p", "no:cacheprovider", "-q",
    ]  # fmt: skip
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200, check=False
    )


@pytest.mark.slow
def test_nbval_passes_on_the_quickstart(tmp_path: Path) -> None:
    env = notebook_env(tmp_path)
    litter = REPO / "notebooks" / "workspace"
    littered_before = litter.exists()
    done = run_nbval(str(QUICKSTART.relative_to(REPO)), REPO, env)
    assert done.returncode == 0, f"nbval failed:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    assert re.search(r"\b\d+ passed\b", done.stdout)
    assert litter.exists() == littered_before, "nbval's kernel made a workspace in notebooks/"


# -- jupyter console --------------------------------------------------------------------------


class Terminal:
    """A program on a pseudo-terminal that is its controlling terminal, so Ctrl-C typed into
    it becomes SIGINT, as in a real terminal."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        self.fd = master
        self.seen = b""

        def take_terminal() -> None:  # in the child, after setsid
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.process = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env={**env, "TERM": "dumb"},
            start_new_session=True,
            preexec_fn=take_terminal,  # runs between fork and exec: only this ioctl
        )
        os.close(slave)

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def expect(self, pattern: bytes, timeout: float = 30) -> bytes:
        """Everything read up to the first match of `pattern` (consumed)."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.seen)
            if found:
                before, self.seen = self.seen[: found.end()], self.seen[found.end() :]
                return before
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{pattern!r} not seen in {timeout} s; got {self.seen!r}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.2))
            if ready:
                try:
                    self.seen += os.read(self.fd, 65536)
                except OSError:  # the program ended and closed the terminal
                    if self.process.poll() is not None:
                        raise TimeoutError(f"ended before {pattern!r}: {self.seen!r}") from None

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        os.close(self.fd)


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.fixture
def console(tmp_path: Path, jupyter_bin: Path) -> Iterator[Terminal]:
    argv = [str(jupyter_bin), "console", "--kernel", KERNEL_NAME, "--simple-prompt"]
    terminal = Terminal(argv, tmp_path, kernel_env(tmp_path))
    try:
        terminal.expect(PROMPT, timeout=120)
        yield terminal
    finally:
        terminal.close()


@pytest.mark.slow
def test_console_session(console: Terminal) -> None:
    console.type("print(6*7)\n")
    assert b"\r\n42\r\n" in console.expect(PROMPT)

    console.type("while True: pass\n")
    console.expect(rb"while True: pass\r\n")
    time.sleep(1.5)  # the loop is running in the kernel
    console.type("\x03")  # Ctrl-C
    interrupted = console.expect(PROMPT, timeout=20)
    assert b"KeyboardInterrupt" in interrupted

    console.type("print('alive')\n")
    assert b"\r\nalive\r\n" in console.expect(PROMPT)

    console.type("%time total = sum(range(10))\n")  # IPython in the guest, in the console
    assert b"Wall time" in console.expect(PROMPT)

    kernels = children_of(console.process.pid)
    assert kernels, "the console started no kernel process"
    console.type("\x04")  # Ctrl-D
    console.expect(rb"exit \(\[y\]/n\)\? ")
    console.type("y\n")
    assert console.process.wait(timeout=30) == 0
    deadline = time.monotonic() + 10
    while not all(process_is_gone(pid) for pid in kernels) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(process_is_gone(pid) for pid in kernels), "the kernel outlived the console"


@pytest.mark.slow
def test_console_exit_command_leaves(console: Terminal) -> None:
    console.type("exit\n")
    try:
        answer = console.expect(PROMPT, timeout=15)
    except TimeoutError:  # no new prompt: the console is leaving
        answer = None
    assert answer is None, (
        "typing `exit` in jupyter console does not leave it; the kernel answers "
        f"{answer.decode(errors='replace')!r}. IPython's kernel answers `exit` and `quit` with "
        "the execute_reply payload {'source': 'ask_exit', 'keepkernel': False}, which the "
        "console obeys; SandboxKernel runs them in the guest, whose site.Quitter only prints"
    )
    assert console.process.wait(timeout=15) == 0
