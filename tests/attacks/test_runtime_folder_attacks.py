"""Attacks on the per-user runtime folder's cleanup (sandbox_kernel/core/runtime_folder.py): a
starting kernel removes the folders of dead kernels of its user, so whatever else sits in the
per-user folder must survive it. Planted: a link named like a kernel's folder (pointing at a
folder with a matching record), a folder of a live process, a folder of a process whose pid was
reused, another user's folder, a record that is a link or does not match, a file with a
kernel folder's name, a dead kernel's folder holding a link out. Only the dead kernels' folders
go; nothing outside the per-user folder is touched. A property test mixes these at random.

The per-user folder itself: refused when it is a link or another user's (a fallback folder of
the temp folder's own is used), made private when it is the user's own but open.

Runs as root (another user's folder needs chown), as the suite does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_kernel.core import runtime_folder
from sandbox_kernel.core.runtime_folder import (
    RECORD,
    RuntimeFolderRefused,
    kernel_folder,
    private_temp_folder,
    process_start,
    prune_abandoned,
    user_runtime_root,
)

NOBODY = 65534


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[int, int]]:
    """A live process and its start time."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    start = process_start(process.pid)
    assert start is not None, "no /proc: the cleanup can prove nothing here"
    try:
        yield process.pid, start
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def dead_pids() -> list[int]:
    """Pids of processes that have ended (and were reaped)."""
    pids = []
    for _ in range(12):
        process = subprocess.Popen(["true"])
        process.wait()
        pids.append(process.pid)
    return pids


def _folder(root: Path, pid: int, start: int, record: str | None = None) -> Path:
    folder = root / f"kernel-{pid}-{start}"
    folder.mkdir(mode=0o700)
    (folder / RECORD).write_text(record if record is not None else f"{pid} {start}\n")
    (folder / "sandbox-kernel-repl-x").mkdir()
    (folder / "sandbox-kernel-repl-x" / "left.txt").write_text("left behind")
    return folder


def _precious(tmp_path: Path) -> tuple[Path, Path]:
    """A folder outside the per-user folder that looks like a dead kernel's, with a file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    return outside, outside / "precious.txt"


def _fresh_root(base: Path) -> Path:
    runtime_folder._mine.clear()  # each test's base is new; the cache is per (pid, base)
    base.mkdir(exist_ok=True)
    return user_runtime_root(base)


def test_only_dead_kernels_folders_are_removed_at_the_next_start(
    tmp_path: Path, live: tuple[int, int], dead_pids: list[int]
) -> None:
    assert os.geteuid() == 0, "another user's folder needs chown: run the suite as root"
    root = _fresh_root(tmp_path / "base")
    live_pid, live_start = live
    outside, precious = _precious(tmp_path)
    d = iter(dead_pids)

    dead = _folder(root, next(d), 4242)
    reused = _folder(root, live_pid, live_start + 1)  # that pid is another process now
    alive = _folder(root, live_pid, live_start)
    linked_pid = next(d)
    (outside / RECORD).write_text(f"{linked_pid} 7\n")
    link = root / f"kernel-{linked_pid}-7"
    link.symlink_to(outside)
    others = _folder(root, next(d), 8)
    for path in (others, others / RECORD):
        os.chown(path, NOBODY, NOBODY)
    mismatched = _folder(root, next(d), 9, record=f"{live_pid} {live_start}\n")
    record_link_pid = next(d)
    record_link = root / f"kernel-{record_link_pid}-10"
    record_link.mkdir()
    (record_link / RECORD).symlink_to(outside / RECORD)
    as_file = root / f"kernel-{next(d)}-11"
    as_file.write_text("a file")
    leaky = _folder(root, next(d), 12)
    (leaky / "out").symlink_to(outside)
    (leaky / "out-file").symlink_to(precious)
    unrecorded = root / f"kernel-{next(d)}-13"
    unrecorded.mkdir()
    fifo_pid = next(d)
    fifo = root / f"kernel-{fifo_pid}-14"
    fifo.mkdir()
    os.mkfifo(fifo / RECORD)

    half_removed = root / f".removing-{next(d)}-15-{'a' * 16}"  # its pruner died meanwhile
    half_removed.mkdir()
    being_removed = root / f".removing-{live_pid}-{live_start}-{'b' * 16}"  # still at work
    being_removed.mkdir()
    claimed_link = root / f".removing-{next(d)}-16-{'c' * 16}"
    claimed_link.symlink_to(outside)

    mine = kernel_folder(tmp_path / "base")  # a kernel starts

    assert not dead.exists() and not reused.exists() and not leaky.exists()
    assert alive.is_dir() and (alive / "sandbox-kernel-repl-x" / "left.txt").is_file()
    assert link.is_symlink() and precious.read_text() == "keep me" and (outside / RECORD).exists()
    assert others.is_dir() and mismatched.is_dir() and record_link.is_dir()
    assert as_file.is_file() and unrecorded.is_dir() and fifo.is_dir()
    assert not half_removed.exists() and being_removed.is_dir() and claimed_link.is_symlink()
    assert mine.parent == root and (mine / RECORD).read_text().split()[0] == str(os.getpid())
    assert sorted(p.name for p in outside.iterdir()) == [RECORD, "precious.txt"]


def test_a_per_user_folder_that_is_a_link_or_anothers_is_refused(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "another user's folder needs chown: run the suite as root"
    uid = os.geteuid()
    linked = tmp_path / "linked"
    linked.mkdir()
    target = tmp_path / "attacker"
    target.mkdir(mode=0o777)
    (linked / f"sandbox-kernel-{uid}").symlink_to(target)
    with pytest.raises(RuntimeFolderRefused):
        user_runtime_root(linked)
    owned = tmp_path / "owned"
    owned.mkdir()
    (owned / f"sandbox-kernel-{uid}").mkdir(mode=0o777)
    os.chown(owned / f"sandbox-kernel-{uid}", NOBODY, NOBODY)
    with pytest.raises(RuntimeFolderRefused):
        user_runtime_root(owned)
    runtime_folder._mine.clear()
    fallback = private_temp_folder("sandbox-kernel-repl-", base=linked)
    try:  # the kernel still starts, in a private folder of the temp folder's own
        assert not Path(fallback.name).resolve().is_relative_to(target)
        assert Path(fallback.name).parent == Path(tempfile.gettempdir())
        assert Path(fallback.name).stat().st_mode & 0o077 == 0
    finally:
        fallback.cleanup()
    assert list(target.iterdir()) == []


def test_an_open_per_user_folder_of_ones_own_is_made_private(tmp_path: Path) -> None:
    folder = tmp_path / f"sandbox-kernel-{os.geteuid()}"
    folder.mkdir()
    folder.chmod(0o777)
    assert user_runtime_root(tmp_path) == folder
    assert folder.stat().st_mode & 0o777 == 0o700


KINDS = ("dead", "alive", "reused", "link", "others", "mismatch", "file", "record-link", "none")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=8))
def test_pruning_removes_exactly_the_dead_kernels_folders(
    kinds: list[str], live: tuple[int, int], dead_pids: list[int]
) -> None:
    live_pid, live_start = live
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        root = _fresh_root(base / "base")
        outside, precious = _precious(base)
        expected_gone, planted = set(), []
        for index, kind in enumerate(kinds):
            pid = dead_pids[index % len(dead_pids)]
            start = 1000 + index  # distinct names even for the same pid
            name = f"kernel-{pid}-{start}"
            if kind == "dead":
                _folder(root, pid, start)
                (root / name / "out").symlink_to(outside)
                expected_gone.add(name)
            elif kind == "alive":
                name = f"kernel-{live_pid}-{live_start}"
                if (root / name).exists():
                    continue
                _folder(root, live_pid, live_start)
            elif kind == "reused":
                name = f"kernel-{live_pid}-{live_start + 1 + index}"
                _folder(root, live_pid, live_start + 1 + index)
                expected_gone.add(name)
            elif kind == "link":
                (outside / RECORD).write_text(f"{pid} {start}\n")
                (root / name).symlink_to(outside)
            elif kind == "others":
                folder = _folder(root, pid, start)
                os.chown(folder, NOBODY, NOBODY)
            elif kind == "mismatch":
                _folder(root, pid, start, record=f"{pid} {start + 1}\n")
            elif kind == "file":
                (root / name).write_text(f"{pid} {start}\n")
            elif kind == "record-link":
                (root / name).mkdir()
                (root / name / RECORD).symlink_to(precious)
            else:
                (root / f"not-a-kernel-{index}").mkdir()
                name = f"not-a-kernel-{index}"
            planted.append(name)
        removed = set(prune_abandoned(root))
        assert removed == expected_gone
        left = {entry.name for entry in root.iterdir()}
        assert left == set(planted) - expected_gone
        assert precious.read_text() == "keep me"
