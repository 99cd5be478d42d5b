"""Attacks on the host-side work of the notebook folder's overlay (issue 47, items 5, 6, 8, 9):
the host brings the layer up to date from a folder that the guest, another program or a
stranger who can write the folder may change while it works.

- A link the guest planted in the layer is never written through (5).
- A folder swapped for a link to an outside folder and back, by a real racing renamer
  (renameat2 RENAME_EXCHANGE), never gets an outside file into the layer nor its bytes to the
  guest (6).
- Jupyter's connection and runtime files are never shown; the scan is bounded and says what
  it left out (8).
- A name that is not UTF-8 is left out with a notice and never breaks the folder; a file that
  comes and goes while the kernel starts never fails the start or a cell (9).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.host import overlay_sync
from sandbox_kernel.host.overlay import prepare_overlay
from sandbox_kernel.repl import REPLConfig, ReplSandbox

POLICY = ExecutionPolicy(fuel_budget=50_000_000_000, timeout_seconds=60)
MARKER = "OUTSIDE-SECRET"
RENAME_EXCHANGE = 2
AT_FDCWD = -100
RACE_SECONDS = 6.0
READ_ALL = (
    "import os\nfound = []\n"
    "for top, dirs, files in os.walk('/notebook'):\n"
    "    for name in files:\n"
    "        try:\n"
    "            found.append(open(os.path.join(top, name), 'rb').read().decode('latin-1'))\n"
    "        except OSError:\n            pass\n"
    "print('|'.join(found))"
)


def _session(folder: Path, workspace: Path) -> ReplSandbox:
    config = REPLConfig(
        policy=POLICY, workspace=workspace, notebook_dir=folder, notebook_overlay=True
    )
    return ReplSandbox(config)


def _run(repl: ReplSandbox, code: str) -> str:
    done = repl.execute(code)
    assert done.ok, f"{done.status} {done.error}\n{done.stderr}"
    return done.stdout


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under `root`, links not followed: (mode, bytes or link target)."""
    state: dict[str, tuple[int, bytes]] = {}
    for top, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(top, name)
            st = path.lstat()
            if path.is_symlink():
                detail = os.readlink(path).encode()
            elif path.is_file():
                detail = path.read_bytes()
            else:
                detail = b""
            state[str(path.relative_to(root))] = (st.st_mode, detail)
    return state


# -- 5: a link the guest planted ----------------------------------------------------------


def test_a_link_the_guest_planted_is_never_written_through(tmp_path: Path) -> None:
    """The guest replaces /notebook/sub by a link climbing out of the layer; the user then
    adds sub/new.csv and sub/deeper/x.csv: the refresh before the next cell must not create
    them (or any folder) at the link's target."""
    folder = tmp_path / "nb"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.csv").write_text("a\n")
    victim = tmp_path / "victim"
    victim.mkdir()
    with _session(folder, tmp_path / "ws") as repl:
        _run(
            repl,
            "import os, shutil\nshutil.rmtree('/notebook/sub')\n"
            "os.symlink('../../../victim', '/notebook/sub')\nprint(os.readlink('sub'))",
        )
        (folder / "sub" / "new.csv").write_text("new\n")
        (folder / "sub" / "deeper").mkdir()
        (folder / "sub" / "deeper" / "x.csv").write_text("x\n")
        (folder / "top.csv").write_text("top\n")  # and the refresh still shows the rest
        assert _run(repl, "print(open('top.csv').read(), end='')") == "top\n"
        assert list(victim.iterdir()) == [], "the host wrote through the guest's link"
        assert _run(repl, "print(os.path.islink('sub'))") == "True\n"
    assert list(victim.iterdir()) == []


# -- 6: a racing renamer ------------------------------------------------------------------


def _renameat2() -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    libc = ctypes.CDLL(None, use_errno=True)
    exchange = libc.renameat2  # glibc 2.28 and later; a missing one fails the test plainly
    exchange.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    exchange.argtypes += [ctypes.c_uint]
    return exchange


@contextlib.contextmanager
def swapping(first: Path, second: Path) -> Iterator[list[int]]:
    """A thread exchanging `first` and `second` (renameat2 RENAME_EXCHANGE) as fast as it
    can, until the block ends; yields the count of exchanges done."""
    exchange = _renameat2()
    done = [0]
    stop = threading.Event()

    def swap() -> None:
        a, b = bytes(first), bytes(second)
        while not stop.is_set():
            if exchange(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
                raise OSError(ctypes.get_errno(), "renameat2")
            done[0] += 1

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join(10)
        if done[0] % 2:  # leave the names as they were
            exchange(AT_FDCWD, bytes(first), AT_FDCWD, bytes(second), RENAME_EXCHANGE)


def _raced_folder(tmp_path: Path) -> tuple[Path, Path]:
    """A notebook folder whose `box/` is a folder of many files and whose `swap` is a link to
    an outside folder holding files of the same names with MARKER in them."""
    folder, outside = tmp_path / "nb", tmp_path / "outside"
    (folder / "box").mkdir(parents=True)
    outside.mkdir()
    for index in range(200):
        (folder / "box" / f"f{index:03}.csv").write_text("inside\n")
        (outside / f"f{index:03}.csv").write_text(f"{MARKER}\n")
    os.symlink(outside, folder / "swap")
    return folder, outside


def test_a_racing_renamer_never_gets_an_outside_file_into_the_layer(tmp_path: Path) -> None:
    folder, outside = _raced_folder(tmp_path)
    secrets = {(st.st_dev, st.st_ino) for st in (p.stat() for p in outside.iterdir())}
    before = _tree(outside)
    deadline = time.monotonic() + RACE_SECONDS
    with swapping(folder / "box", folder / "swap") as done:
        while time.monotonic() < deadline:
            shutil.rmtree(folder / ".sandbox-kernel", ignore_errors=True)
            layer = prepare_overlay(folder).layer
            for top, _, files in os.walk(layer):
                for name in files:
                    st = os.lstat(Path(top, name))
                    assert (st.st_dev, st.st_ino) not in secrets, f"linked {top}/{name}"
    assert done[0] > 100, "the renamer did not run"
    assert _tree(outside) == before


def test_the_guest_never_reads_an_outside_file_while_the_folder_is_raced(
    tmp_path: Path,
) -> None:
    """End to end: the refresh before each cell races the renamer; no cell reads MARKER."""
    folder, outside = _raced_folder(tmp_path)
    before = _tree(outside)
    with _session(folder, tmp_path / "ws") as repl:
        deadline = time.monotonic() + RACE_SECONDS * 2
        cells = 0
        with swapping(folder / "box", folder / "swap"):
            while time.monotonic() < deadline or cells < 3:
                shown = _run(repl, READ_ALL)
                assert MARKER not in shown
                cells += 1
    assert _tree(outside) == before


# -- 8: what is shown, and what it costs ---------------------------------------------------

RUNTIME_FILES = (
    "kernel-1f2e3d.json",
    "kernel-v2-4242abc.json",
    "jpserver-4242.json",
    "jpserver-4242-open.html",
    "nbserver-77.json",
    "jupyter_cookie_secret",
    "ipc.sock",
)


def test_connection_and_runtime_files_are_never_shown(tmp_path: Path) -> None:
    folder = tmp_path / "nb"
    (folder / "runtime").mkdir(parents=True)
    for name in RUNTIME_FILES:
        (folder / name).write_text('{"key": "hmac-secret"}')
        (folder / "runtime" / name).write_text('{"key": "hmac-secret"}')
    (folder / "data.csv").write_text("a\n")
    with _session(folder, tmp_path / "ws") as repl:
        shown = _run(repl, READ_ALL + "\nprint(sorted(os.listdir('.')))")
    assert "hmac-secret" not in shown, shown
    assert "data.csv" in shown


def test_the_scan_is_bounded_and_says_what_it_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder far bigger than the bound links at most the bound, nearest first; a deep
    tree stops at the depth bound; both are named in a notice."""
    folder = tmp_path / "nb"
    deep = folder.joinpath(*(f"d{level}" for level in range(overlay_sync.MAX_DEPTH + 3)))
    deep.mkdir(parents=True)
    (deep / "bottom.csv").write_text("deep\n")
    (folder / "near.csv").write_text("near\n")
    overlay = prepare_overlay(folder)
    assert (overlay.layer / "near.csv").exists()
    assert not any(p.name == "bottom.csv" for p in overlay.layer.rglob("*"))
    assert any("deeper than" in note for note in overlay.notes), overlay.notes
    monkeypatch.setattr(overlay_sync, "MAX_ENTRIES", 50)
    for index in range(20):
        (folder / f"many{index}").mkdir()
        for leaf in range(20):
            (folder / f"many{index}" / f"{leaf}.csv").write_text("x\n")
    overlay = prepare_overlay(folder)
    entries = sum(1 for _ in overlay.layer.rglob("*"))
    assert entries <= 50, entries
    assert (overlay.layer / "near.csv").exists(), "the nearest entries are shown first"
    assert any("over 50 entries" in note and "not shown" in note for note in overlay.notes)
    record = (folder / ".sandbox-kernel" / "state.json").stat().st_size
    assert record < 50 * 200, record


# -- 9: odd names and churn ----------------------------------------------------------------


def test_a_name_that_is_not_utf8_is_left_out_and_named(tmp_path: Path) -> None:
    folder = tmp_path / "nb"
    folder.mkdir()
    odd = os.fsencode(folder) + b"/caf\xe9-latin1.csv"
    with open(os.open(odd, os.O_WRONLY | os.O_CREAT, 0o644), "w") as handle:
        handle.write("x\n")
    (folder / "ok.csv").write_text("ok\n")
    with _session(folder, tmp_path / "ws") as repl:
        assert _run(repl, "import os\nprint(sorted(os.listdir('/notebook')))") == "['ok.csv']\n"
        assert _run(repl, "import colorsys, wave, sched\nprint('imported')") == "imported\n"
        assert any("caf\\udce9-latin1.csv" in note for note in repl.folder_notes), repl.folder_notes


@contextlib.contextmanager
def churning(folder: Path) -> Iterator[list[int]]:
    """A thread that creates and removes `tmp14.part` (and a folder) in `folder` in a loop,
    as a download does, until the block ends."""
    stop = threading.Event()
    done = [0]

    def churn() -> None:
        part, box = folder / "tmp14.part", folder / "tmp14.d"
        while not stop.is_set():
            part.write_bytes(b"partial")
            box.mkdir()
            (box / "inner.part").write_bytes(b"x")
            part.unlink()
            (box / "inner.part").unlink()
            box.rmdir()
            done[0] += 1

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join(10)


def test_a_file_that_comes_and_goes_never_fails_the_start(tmp_path: Path) -> None:
    folder = tmp_path / "nb"
    folder.mkdir()
    for index in range(300):
        (folder / f"tmp{index:03}.csv").write_text("x\n")
    deadline = time.monotonic() + RACE_SECONDS
    with churning(folder) as done:
        while time.monotonic() < deadline:
            shutil.rmtree(folder / ".sandbox-kernel", ignore_errors=True)
            prepare_overlay(folder)  # raises if a vanished entry fails the scan
        with _session(folder, tmp_path / "ws") as repl:
            for _ in range(3):
                assert _run(repl, "import os\nprint(len(os.listdir('.')) >= 300)") == "True\n"
    assert done[0] > 100, "the churn did not run"


def test_read_only_shows_the_same_names_and_no_writes(tmp_path: Path) -> None:
    """SANDBOX_KERNEL_NOTEBOOK_FOLDER=read-only shows what the overlay shows, without writes:
    no hidden, secret or runtime file, no name that would break the listing."""
    folder = tmp_path / "nb"
    folder.mkdir()
    (folder / ".env").write_text("TOKEN=hmac-secret\n")
    (folder / "kernel-77.json").write_text('{"key": "hmac-secret"}')
    (folder / "id_ed25519").write_text("hmac-secret\n")
    with open(os.open(os.fsencode(folder) + b"/caf\xe9.csv", os.O_WRONLY | os.O_CREAT), "w"):
        pass
    (folder / "data.csv").write_text("a\n")
    config = REPLConfig(policy=POLICY, workspace=tmp_path / "ws", notebook_dir=folder)
    with ReplSandbox(config) as repl:
        assert _run(repl, "import os\nprint(sorted(os.listdir('.')))") == "['data.csv']\n"
        assert "hmac-secret" not in _run(repl, READ_ALL)
        for cell in ("open('data.csv', 'a').write('x')", "open('new.csv', 'w').write('x')"):
            assert repl.execute(cell).status == "error", cell
    assert (folder / "data.csv").read_text() == "a\n"
    assert not (folder / "new.csv").exists()
