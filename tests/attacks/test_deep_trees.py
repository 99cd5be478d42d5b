"""Attacks with a folder tree deeper than the host's recursion limit.

A guest makes a chain of 1,500 nested folders in its /tmp with one loop. Python 3.11's
`shutil.rmtree` recursed once per level and raised RecursionError (no OSError): a session's
end failed, a one-shot run raised from deep in the host, and the per-user runtime folder's
pruner made every later kernel of the user fail to start. The host removes such a tree without
recursion (core/scratch.py), following no link in it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_kernel import ExecutionPolicy, PythonSandbox
from sandbox_kernel.core import runtime_folder
from sandbox_kernel.core.scratch import ScratchFolder, remove_tree
from tests.repl.conftest import new_repl, repl_config, run_ok

DEPTH = 1_500
DEEP_CELL = (
    "import os\n"
    "os.chdir('/tmp')\n"
    f"for _ in range({DEPTH}):\n"
    "    os.mkdir('a')\n"
    "    os.chdir('a')\n"
    "open('bottom.txt', 'w').write('x')\n"
    "os.chdir('/tmp')\n"
)


def deep_chain(root: Path, depth: int = DEPTH) -> None:
    """`root`/a/a/.../a (`depth` levels), made by descriptors (a path that long is too long)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("a", dir_fd=fd)
            inner = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    finally:
        os.close(fd)


def test_the_standard_removal_fails_on_such_a_tree(tmp_path: Path) -> None:
    """Control: the tree is a real trap for the host's Python (in a process of its own: the
    RecursionError leaves the iterators of every level unclosed)."""
    deep_chain(tmp_path / "deep")
    if sys.version_info >= (3, 13):  # rmtree is iterative there
        pytest.skip("shutil.rmtree no longer recurses on this Python")
    done = subprocess.run(
        [sys.executable, "-c", "import shutil, sys; shutil.rmtree(sys.argv[1])", tmp_path / "deep"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "RecursionError" in done.stderr, done.stderr[-500:]
    assert remove_tree(tmp_path / "deep")  # what pytest's own clean-up could not do


def test_remove_tree_removes_any_depth_and_follows_no_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the user's")
    deep_chain(tmp_path / "deep")
    (tmp_path / "deep" / "link").symlink_to(outside)
    (tmp_path / "deep" / "a" / "file-link").symlink_to(outside / "keep.txt")
    assert remove_tree(tmp_path / "deep")
    assert not (tmp_path / "deep").exists()
    assert (outside / "keep.txt").read_text() == "the user's"


def test_a_link_as_the_tree_itself_is_removed_not_entered(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the user's")
    (tmp_path / "link").symlink_to(outside)
    assert remove_tree(tmp_path / "link")
    assert not (tmp_path / "link").is_symlink()
    assert (outside / "keep.txt").read_text() == "the user's"


def test_a_scratch_folder_the_guest_deepened_is_removed(tmp_path: Path) -> None:
    scratch = ScratchFolder("deep-", tmp_path)
    deep_chain(Path(scratch.name))
    scratch.cleanup()
    assert not Path(scratch.name).exists()


def test_a_session_whose_tmp_is_deep_ends_cleanly(workspace: Path) -> None:
    repl = new_repl(repl_config(workspace))
    scratch = repl._scratch
    assert scratch is not None
    run_ok(repl, DEEP_CELL)
    run_ok(repl, "after = 1")
    repl.destroy()  # raised RecursionError
    assert not Path(scratch.name).exists()


def test_a_one_shot_run_that_deepens_its_tmp_returns_a_result(workspace: Path) -> None:
    sandbox = PythonSandbox(ExecutionPolicy(mount_host_dir=workspace, timeout_seconds=60))
    result = sandbox.execute(DEEP_CELL + "print('made')\n")
    assert result.success, result
    assert "made" in result.stdout


def test_a_dead_kernels_deep_folder_never_stops_the_next_start(tmp_path: Path) -> None:
    """A kernel killed with a deep /tmp leaves its folder; the next kernel's pruning removes it
    (before, RecursionError made every later start fail)."""
    root = runtime_folder.user_runtime_root(tmp_path)
    dead = root / "kernel-999999-1"  # a pid that is not alive
    dead.mkdir()
    (dead / runtime_folder.RECORD).write_text("999999 1\n")
    deep_chain(dead / "sandbox-kernel-repl-x")
    assert runtime_folder.prune_abandoned(root) == ["kernel-999999-1"]
    assert not dead.exists()
