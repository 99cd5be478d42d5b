"""A kernel's temporary folders (the session's scratch, the /data staging folder) live in one
private per-user folder, `$TMPDIR/sandbox-kernel-<uid>/kernel-<pid>-<start>/`
(sandbox_kernel/core/runtime_folder.py): a kernel shut down cleanly leaves nothing, and one
killed with `kill -9` leaves its folder only until the next kernel of the same user starts.
Real kernels through jupyter_client, each with its own TMPDIR.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tests.kernel.conftest import process_is_gone, start_kernel


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_killed_kernels_temporary_folders_are_gone_after_the_next_start(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {"TMPDIR": str(temp)}
    root = temp / f"sandbox-kernel-{os.geteuid()}"
    first = start_kernel(tmp_path / "first", env)
    try:
        first.run_ok("open('/tmp/scratch.txt', 'w').write('x')")
        pid = first.pid
        (folder,) = root.glob(f"kernel-{pid}-*")
        held = sorted(p.name.rsplit("-", 1)[0] for p in folder.glob("sandbox-kernel-*"))
        assert held == ["sandbox-kernel-data", "sandbox-kernel-repl"], held
        assert not list(temp.glob("sandbox-kernel-*-*")), "nothing loose in the temp folder"
        assert root.stat().st_mode & 0o777 == 0o700 and folder.stat().st_mode & 0o077 == 0
        os.kill(pid, signal.SIGKILL)
        _wait_for(lambda: process_is_gone(pid) or first.km.is_alive() is False, "kill -9")
        assert folder.is_dir(), "a killed kernel cannot clean up after itself"
    finally:
        first.shutdown()
    second = start_kernel(tmp_path / "second", env)
    try:
        second.run_ok("1")
        assert not folder.exists(), "the next kernel's start removed the killed kernel's folder"
        assert [p.name.split("-")[1] for p in root.iterdir()] == [str(second.pid)]
    finally:
        second.shutdown()
    _wait_for(lambda: not list(root.iterdir()), f"a clean shutdown leaves nothing: {root}")
