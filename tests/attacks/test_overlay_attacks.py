"""Attacks on the notebook folder's overlay: the guest sees the user's files through hard links
in a layer folder, so every way a cell could change a linked file in place is tried (write,
append, read-write, truncate, new timestamps by path and by descriptor, through a link of its
own, a symlink, a folder moved after it was opened), and every way it could see what it must
not (hidden files, secret files, the layer's own record, the home folder). Each attack must
leave the user's file byte for byte and time for time as it was, give the cell either its
own copy or a clear error, and leave the session working.

Without the guard's copy-up (host/overlay.py, before_write) the first seven change the
user's file: a hard link is the same file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.host.cache import cache_dir
from sandbox_kernel.host.overlay import OverlayRefused, prepare_overlay
from sandbox_kernel.repl import REPLConfig, ReplSandbox

POLICY = ExecutionPolicy(fuel_budget=50_000_000_000, timeout_seconds=60, max_file_bytes=100_000)
NAMES = ("write", "append", "rplus", "truncate", "utime", "futime", "link", "symlink", "moved")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's notebook folder: a file per attack, hidden and secret files, a big file."""
    root = tmp_path_factory.mktemp("overlay") / "course"
    (root / "data").mkdir(parents=True)
    for name in NAMES:
        (root / "data" / f"{name}.csv").write_text(f"the user's {name}\n")
        os.utime(root / "data" / f"{name}.csv", (1_000_000_000, 1_000_000_000))
    (root / ".env").write_text("API_KEY=secret\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (root / "server.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (root / "big.bin").write_bytes(b"b" * 200_000)  # over the policy's file cap
    (root / "venv" / "lib").mkdir(parents=True)  # a virtual environment: tools, not data
    (root / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / "__pycache__").mkdir()
    return root


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of the user's (the layer's folder aside): its bytes and its mtime."""
    return {
        str(path.relative_to(root)): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in root.rglob("*")
        if path.is_file() and ".sandbox-kernel" not in path.parts
    }


@pytest.fixture(scope="module")
def session(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplSandbox]:
    workspace = tmp_path_factory.mktemp("overlay-workspace")
    config = REPLConfig(
        policy=POLICY, workspace=workspace, notebook_dir=folder, notebook_overlay=True
    )
    with ReplSandbox(config) as repl:
        yield repl


@pytest.fixture
def untouched(folder: Path, session: ReplSandbox) -> Iterator[None]:
    """The attack runs inside; after it the user's files are as they were, and the session
    runs the next cell."""
    before = _snapshot(folder)
    yield
    assert _snapshot(folder) == before
    assert session.execute("6 * 7").result == {"text/plain": "42"}


def _run(session: ReplSandbox, code: str) -> str:
    done = session.execute(code)
    assert done.ok, f"{done.status} {done.error}\n{done.stderr}"
    return done.stdout


ATTACKS = {
    "write": "open('data/write.csv', 'w').write('guest')\nprint(open('data/write.csv').read())",
    "append": "open('data/append.csv', 'a').write('guest')\nprint(open('data/append.csv').read())",
    "rplus": (
        "f = open('data/rplus.csv', 'r+')\nf.write('GUEST')\nf.close()\n"
        "print(open('data/rplus.csv').read())"
    ),
    "truncate": "os.truncate('data/truncate.csv', 3)\nprint(open('data/truncate.csv').read())",
    "link": (
        "os.link('data/link.csv', 'mine.csv')\nopen('mine.csv', 'w').write('guest')\n"
        "print(open('mine.csv').read(), open('data/link.csv').read())"
    ),
    "symlink": (
        "os.symlink('data/symlink.csv', 'alias.csv')\nopen('alias.csv', 'w').write('guest')\n"
        "print(open('data/symlink.csv').read())"
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_change_lands_in_the_guests_copy(
    session: ReplSandbox, untouched: None, attack: str
) -> None:
    shown = _run(session, "import os\n" + ATTACKS[attack])
    assert "guest" in shown.lower() or attack == "truncate", shown
    if attack == "truncate":
        assert shown.strip() == "the", shown


def test_new_times_by_path_go_to_the_copy(session: ReplSandbox, untouched: None) -> None:
    shown = _run(
        session,
        "import os\nos.utime('data/utime.csv', (5, 5))\nprint(os.stat('data/utime.csv').st_mtime)",
    )
    assert shown.strip() == "5.0"


def test_new_times_by_descriptor_are_refused(session: ReplSandbox, untouched: None) -> None:
    shown = _run(
        session,
        "import os\nfd = os.open('data/futime.csv', os.O_RDONLY)\n"
        "try:\n    os.utime(fd, (5, 5))\n    print('changed')\n"
        "except OSError as e:\n    print(type(e).__name__)\nfinally:\n    os.close(fd)",
    )
    assert shown.strip() == "PermissionError", shown


def test_a_folder_moved_after_it_was_opened_is_no_way_around(
    session: ReplSandbox, untouched: None
) -> None:
    """The guard finds the host file by the path the folder was opened with; after a rename
    that path names something else, and the write is refused rather than let through."""
    shown = _run(
        session,
        "import os\nos.makedirs('box', exist_ok=True)\nos.link('data/moved.csv', 'box/moved.csv')\n"
        "d = os.open('box', os.O_RDONLY | os.O_DIRECTORY)\nos.rename('box', 'box2')\n"
        "os.mkdir('box')\nopen('box/moved.csv', 'w').write('decoy')\n"
        "try:\n    fd = os.open('moved.csv', os.O_WRONLY, dir_fd=d)\n"
        "    os.write(fd, b'guest')\n    os.close(fd)\n    print('written')\n"
        "except OSError as e:\n    print(type(e).__name__)\nfinally:\n    os.close(d)",
    )
    assert shown.strip() in ("PermissionError", "written"), shown
    if shown.strip() == "written":  # then it was the guest's copy that changed
        assert _run(session, "print(open('box2/moved.csv').read())").strip() == "guest"


def test_a_copy_over_the_file_cap_is_refused(session: ReplSandbox, untouched: None) -> None:
    shown = _run(
        session,
        "try:\n    open('big.bin', 'ab').write(b'x')\n    print('appended')\n"
        "except OSError as e:\n    print(type(e).__name__, e.errno)",
    )
    assert shown.startswith("OSError"), shown  # EFBIG: a copy of 200 kB is over the cap
    # Truncating needs no copy: the guest's empty file, the user's untouched.
    assert (
        _run(
            session, "open('big.bin', 'wb').write(b'x')\nprint(os.path.getsize('big.bin'))"
        ).strip()
        == "1"
    )


def test_hidden_and_secret_files_are_not_there(session: ReplSandbox) -> None:
    shown = _run(
        session,
        "import os\nnames = set(os.listdir('.'))\n"
        "secret = ('id_ed25519', 'server.pem')\n"
        "print(sorted(n for n in names if n.startswith('.') or n in secret))\n"
        "for name in ('.env', '.git/config', 'id_ed25519', 'server.pem', '../state.json', "
        "'/notebook/../state.json'):\n"
        "    try:\n        open(name).read()\n        print('read', name)\n"
        "    except OSError as e:\n        print(type(e).__name__)",
    )
    lines = shown.splitlines()
    assert lines[0] == "[]", shown
    tools = _run(session, "print(sorted({'venv', '__pycache__'} & set(os.listdir('.'))))")
    assert tools.strip() == "[]", tools
    assert not any(line.startswith("read") for line in lines), shown


def test_the_layer_is_beside_the_users_files_and_kept(folder: Path, session: ReplSandbox) -> None:
    _run(session, "open('results.txt', 'w').write('kept')")
    layer = folder / ".sandbox-kernel" / "layer"
    assert (layer / "results.txt").read_text() == "kept"
    assert not (folder / "results.txt").exists()


def test_a_planted_record_cannot_reach_outside_the_layer(tmp_path: Path) -> None:
    """A cloned folder can carry its own .sandbox-kernel/state.json: an entry that climbs out
    of the layer is dropped, so the start never removes a file outside it."""
    root = tmp_path / "cloned"
    (root / ".sandbox-kernel").mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    st = victim.stat()
    record = {"../../victim.txt": [st.st_dev, st.st_ino], "/etc/passwd": [0, 0]}
    (root / ".sandbox-kernel" / "state.json").write_text(json.dumps(record))
    (root / "a.csv").write_text("a\n")
    overlay = prepare_overlay(root)
    assert victim.read_text() == "keep me"
    assert (overlay.layer / "a.csv").read_text() == "a\n"


def test_a_planted_link_for_the_layer_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cloned"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, root / ".sandbox-kernel")
    with pytest.raises(OverlayRefused, match="not a folder of yours"):
        prepare_overlay(root)
    assert list(elsewhere.iterdir()) == []


def test_the_home_folder_is_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    # The compiled guest and its library stay where they are (they are found through HOME).
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(cache_dir()))
    monkeypatch.setenv("HOME", str(home))
    for folder in (home, tmp_path):  # the home folder, and a folder that holds it
        with pytest.raises(OverlayRefused, match="home folder") as refused:
            prepare_overlay(folder)
        assert refused.value.never_shown
    config = REPLConfig(
        policy=POLICY, workspace=tmp_path / "ws", notebook_dir=home, notebook_overlay=True
    )
    with ReplSandbox(config) as repl:
        assert repl.execute("import os; os.getcwd()").result == {"text/plain": "'/app'"}
        assert any("not shown" in note for note in repl.folder_notes), repl.folder_notes
        assert repl.execute("os.listdir('/notebook')").status == "error"


def test_a_file_the_user_adds_mid_session_is_shown_and_still_never_changed(
    folder: Path, session: ReplSandbox
) -> None:
    """The layer is brought up to date between cells (Overlay.refresh): a file the user adds
    while the kernel runs is seen by the next cell, as on ipykernel, and is as much the user's
    as the others (without the refresh of the guard's set, a write through the new hard link
    would land in the user's file)."""
    (folder / "data" / "added.csv").write_text("added by the user\n")
    (folder / "later").mkdir()
    (folder / "later" / "more.csv").write_text("more\n")
    before = _snapshot(folder)
    out = _run(
        session,
        "print(open('data/added.csv').read(), end='')\nprint(open('later/more.csv').read())\n"
        "open('data/added.csv', 'a').write('guest')\nopen('later/more.csv', 'w').write('guest')\n"
        "print(open('data/added.csv').read())",
    )
    assert out == "added by the user\nmore\n\nadded by the user\nguest\n"
    assert _snapshot(folder) == before
    (folder / "data" / "added.csv").unlink()  # removed by the user: gone at the next cell
    assert _run(session, "import os; print(os.path.exists('data/added.csv'))") == "True\n", (
        "the guest's own copy of a file stays when the user removes theirs"
    )
