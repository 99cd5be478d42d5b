"""A real REPL daemon for tests: started as a user starts it, stopped after the module.

`running_daemon(folder)` starts `python -m sandbox_kernel.repl.daemon` in the background
through start_daemon (the CLI's own path) on a socket in `folder` and yields its socket path;
`daemon_client(socket, **config)` is a DaemonClientSandbox on it with the tests' big fuel.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sandbox_kernel.repl.daemon import DaemonSettings, daemon_status, start_daemon, stop_daemon
from sandbox_kernel.repl.daemon.client import DaemonClientSandbox
from tests.repl.conftest import repl_config


@contextlib.contextmanager
def running_daemon(folder: Path, pool: int = 2, max_sessions: int = 8) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "rlm" / "daemon.sock"
    status = start_daemon(DaemonSettings(socket=path, pool=pool, max_sessions=max_sessions))
    try:
        yield path
    finally:
        if not stop_daemon(path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(status["pid"], signal.SIGKILL)


def daemon_client(
    path: Path, workspace: Path, context: object = None, **config: Any
) -> DaemonClientSandbox:
    client = DaemonClientSandbox(
        repl_config(workspace, daemon_socket=path, backend="daemon", **config)
    )
    client.initialize(context)
    return client


@contextlib.contextmanager
def daemon_session(
    path: Path, workspace: Path, context: object = None, **config: Any
) -> Iterator[DaemonClientSandbox]:
    client = daemon_client(path, workspace, context, **config)
    try:
        yield client
    finally:
        client.destroy()


def wait_for(check: Callable[[], bool], seconds: float = 30.0, what: str = "a condition") -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds:g} s")
        time.sleep(0.05)


def pool_is_warm(path: Path, pool: int = 2) -> bool:
    status = daemon_status(path)
    return bool(status["warm_workers"] >= pool)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie awaiting its reaper counts as gone
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True
