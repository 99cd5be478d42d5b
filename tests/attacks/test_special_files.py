"""Attacks through special files: a named pipe (FIFO) in the workspace or in the notebook folder
mount, reached directly or through a link. Opening one blocks the host's open() until another
process opens the other end, where neither the cell's deadline nor an interrupt reaches (45 s
seen, until something on the host opened it). The guard refuses to open anything but files,
folders and links: the cell gets a PermissionError at once, nothing on the host waits, the
host-side magics that read workspace files refuse them too, and the next cell works.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.repl import REPLConfig, ReplSandbox

POLICY = ExecutionPolicy(fuel_budget=50_000_000_000, timeout_seconds=60)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    top = tmp_path_factory.mktemp("fifos")
    workspace, notebook = top / "workspace", top / "notebook"
    workspace.mkdir()
    notebook.mkdir()
    for folder in (workspace, notebook):
        os.mkfifo(folder / "pipe")
        os.symlink("pipe", folder / "link-to-pipe")
        (folder / "plain.txt").write_text("plain")
    return workspace, notebook


@pytest.fixture(scope="module")
def session(folders: tuple[Path, Path]) -> Iterator[ReplSandbox]:
    workspace, notebook = folders
    config = REPLConfig(
        policy=POLICY,
        workspace=workspace,
        notebook_dir=notebook,
    )
    with ReplSandbox(config) as repl:
        yield repl


@pytest.mark.parametrize(
    "path",
    [
        "/app/pipe",
        "/app/link-to-pipe",
        "/notebook/pipe",
        "/notebook/link-to-pipe",
        "pipe",  # the working folder is the notebook folder
    ],
)
@pytest.mark.parametrize("mode", ["r", "w", "rb", "a"])
def test_opening_a_fifo_is_refused_at_once(session: ReplSandbox, path: str, mode: str) -> None:
    done = session.execute(
        "try:\n"
        f"    open({path!r}, {mode!r})\n"
        "    print('opened')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
    )
    assert done.ok, done
    # The notebook folder is read-only: writing there may be refused for that reason first.
    # Its view never shows a FIFO at all (the layer links regular files and folders only).
    refusals = ("PermissionError", "OSError")
    if "/app/" not in path:
        refusals += ("FileNotFoundError",)
    assert done.stdout.strip() in refusals, done
    assert session.execute("open('/app/plain.txt').read()").result == {"text/plain": "'plain'"}


def test_the_folders_still_list_and_stat_their_fifos(session: ReplSandbox) -> None:
    """Refusing the open is all: listing a folder or asking what a name is never blocks."""
    done = session.execute(
        "import os, stat\n"
        "print(sorted(os.listdir('/app')))\n"
        "print(stat.S_ISREG(os.stat('/app/pipe').st_mode))\n"
        "print(os.path.exists('/notebook/pipe'))\n"
    )
    assert done.ok, done
    # The notebook folder's view leaves the FIFO out; the workspace lists it as it is.
    assert "'pipe'" in done.stdout and "False\nFalse" in done.stdout, done


def test_a_pandas_read_of_a_fifo_fails_plainly(session: ReplSandbox) -> None:
    done = session.execute("import pandas as pd\npd.read_csv('/app/pipe')")
    assert done.status == "error" and done.ename == "PermissionError", done
    assert session.execute("1 + 1").result == {"text/plain": "2"}


def test_nobody_opened_the_other_end(folders: tuple[Path, Path], session: ReplSandbox) -> None:
    """Had the guest's open reached the FIFO, a writer on the host would now find a reader."""
    workspace, _ = folders
    try:
        descriptor = os.open(workspace / "pipe", os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        assert exc.errno == 6  # ENXIO: no reader holds the pipe open
    else:
        os.close(descriptor)
        raise AssertionError("a reader holds the FIFO open")
    assert session.execute("'still here'").ok


def test_a_hung_open_cannot_outlive_an_interrupt(session: ReplSandbox) -> None:
    """Even many attempts in a loop end promptly on an interrupt, and the session stays."""
    threading.Timer(1.0, session.cancel).start()
    started = time.monotonic()
    done = session.execute(
        "while True:\n    try:\n        open('/app/pipe')\n    except OSError:\n        pass\n"
    )
    assert done.status == "cancelled", done
    assert time.monotonic() - started < 30
    assert session.execute("2 + 2").result == {"text/plain": "4"}
