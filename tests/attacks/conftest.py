"""Fixtures for attack tests: a host folder beside the workspace that no guest may touch, and the
check that the host is still healthy after an attack.

The canary folder lies at `<tmp>/host`, next to the workspace at `<tmp>/workspace`, so from the
guest's /app it is `../host`: exactly where a `..` or a planted symlink would try to reach.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sandbox_kernel import BaseSandbox
from tests.repl.conftest import make_repl  # noqa: F401 - the REPL tests' fixture, for attacks too

SECRET_TEXT = "TOP-SECRET host data, never for a guest\n"


def open_descriptors() -> int:
    """How many descriptors this (host) process holds."""
    return len(os.listdir("/proc/self/fd"))


def _tree_state(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under `root`: (mode, size, content digest or link target), links not followed."""
    state: dict[str, tuple[int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                detail = os.readlink(path)
            elif path.is_file():
                detail = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                detail = ""
            state[path.relative_to(root).as_posix()] = (st.st_mode, st.st_size, detail)
    return state


@dataclass
class HostGuard:
    """A canary folder outside the workspace and the host's state before the attack."""

    folder: Path
    secret: Path
    before: dict[str, tuple[int, int, str]] = field(default_factory=dict)

    def assert_untouched(self) -> None:
        assert _tree_state(self.folder) == self.before, "a host file outside /app changed"
        assert self.secret.read_text() == SECRET_TEXT

    def assert_healthy(self, sandbox: BaseSandbox) -> None:
        """The very same sandbox still runs code, and the host's files are as they were."""
        result = sandbox.execute('print("ok")')
        assert result.success is True, (
            f"the sandbox did not recover: {result.error} {result.stderr}"
        )
        assert result.stdout == "ok\n"
        assert result.limit is None
        self.assert_untouched()


@pytest.fixture
def host(tmp_path: Path, workspace: Path) -> HostGuard:
    folder = tmp_path / "host"
    folder.mkdir()
    secret = folder / "secret.txt"
    secret.write_text(SECRET_TEXT)
    (folder / "inner").mkdir()
    (folder / "inner" / "keys.txt").write_text("more secrets\n")
    assert workspace.parent == tmp_path  # the guest reaches the canary as /app/../host
    guard = HostGuard(folder, secret)
    guard.before = _tree_state(folder)
    return guard
