"""Attacks on `%files --keep` (host/layer_files.py): the host copies a file of the layer,
which the guest writes, into the user's folder, which a stranger may write too.

- A folder swapped for a link to an outside folder and back, on both sides at once, by a real
  racing renamer (renameat2 RENAME_EXCHANGE): nothing is written outside the notebook's
  folder and no outside file's bytes reach it.
- Any name (dots, slashes, "..", unicode, surrogates, NUL), with links the guest planted in
  the layer: --keep never writes outside the folder, never keeps a hidden name, never
  follows a link (hypothesis).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_kernel.host import layer_files
from sandbox_kernel.host.overlay import Overlay, prepare_overlay
from tests.attacks.test_overlay_host_attacks import swapping

MARKER = b"OUTSIDE-SECRET"
GUEST = b"the guest's table\n"
RACE_SECONDS = 4.0
Keep = Callable[[int, int, str, bool], object]


def _tree(root: Path) -> dict[str, bytes]:
    """Every file below `root` (links not followed) and its bytes."""
    found = {}
    for top, _, files in os.walk(root):
        for name in files:
            path = Path(top, name)
            if not path.is_symlink():
                found[str(path.relative_to(root))] = path.read_bytes()
    return found


def _raced(tmp_path: Path) -> tuple[Overlay, Path, Path, Path]:
    """A notebook folder with `sub/` and a link `swap` to a writable outside folder, and a
    layer whose `sub/data.csv` is the guest's and whose `swap` links to an outside folder
    holding a `data.csv` with MARKER in it."""
    folder, written, read = tmp_path / "nb", tmp_path / "outside-w", tmp_path / "outside-r"
    (folder / "sub").mkdir(parents=True)
    written.mkdir()
    read.mkdir()
    (read / "data.csv").write_bytes(MARKER)
    overlay = prepare_overlay(folder)
    layer = overlay.layer
    (layer / "sub" / "data.csv").write_bytes(GUEST)
    (folder / "swap").symlink_to(written)
    (layer / "swap").symlink_to(read)
    return overlay, folder, written, read


def race_keep(tmp_path: Path, keep: Keep) -> tuple[int, int, list[str]]:
    """Keep `sub/data.csv` again and again while both `sub`s are swapped with their links;
    (keeps tried, exchanges done, what went wrong)."""
    overlay, folder, written, read = _raced(tmp_path)
    assert overlay.fds is not None
    real, _, layer = overlay.fds
    tries, problems = 0, []
    with (
        swapping(folder / "sub", folder / "swap") as mine,
        swapping(overlay.layer / "sub", overlay.layer / "swap") as theirs,
    ):
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            tries += 1
            with contextlib.suppress(layer_files.KeepRefused, OSError):
                keep(real, layer, "sub/data.csv", True)
            outside = list(written.iterdir())
            if outside:
                problems.append(f"written outside: {outside}")
                break
        exchanges = mine[0] + theirs[0]
    for name, data in _tree(folder).items():
        if MARKER in data:
            problems.append(f"outside bytes kept as {name}")
    if _tree(read) != {"data.csv": MARKER}:
        problems.append("the outside folder changed")
    overlay.close()
    return tries, exchanges, problems


def test_a_racing_renamer_never_gets_keep_outside(tmp_path: Path) -> None:
    tries, exchanges, problems = race_keep(tmp_path, layer_files.keep)
    assert exchanges > 1000 and tries > 50, (tries, exchanges)
    assert problems == []


# -- any name ---------------------------------------------------------------------------------

NAME_PARTS = st.sampled_from(
    ["..", ".", "", "a", "b.csv", ".hidden", "up", "abs", "deep", "é", "\udcff", "\x00", "x"]
)
NAMES = st.one_of(
    st.lists(NAME_PARTS, min_size=1, max_size=5).map("/".join),
    st.text(min_size=1, max_size=30),
)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Overlay, Path]:
    """A notebook folder inside `top`, beside an `outside` folder, whose layer holds files by
    odd names and links the guest planted: `up` to "..", `abs` to the outside folder."""
    top = tmp_path_factory.mktemp("names")
    folder, outside = top / "nb", top / "outside"
    folder.mkdir()
    outside.mkdir()
    (outside / "b.csv").write_bytes(MARKER)
    overlay = prepare_overlay(folder)
    layer = overlay.layer
    for name in ("a", "b.csv", "x", "é", ".hidden"):
        (layer / name).write_bytes(GUEST)
    (layer / "deep").mkdir()
    (layer / "deep" / "b.csv").write_bytes(GUEST)
    (layer / "up").symlink_to("..")
    (layer / "abs").symlink_to(outside)
    (folder / "abs").symlink_to(outside)  # and one in the user's folder
    return overlay, top


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=NAMES, force=st.booleans())
def test_keep_never_writes_outside_the_folder(
    planted: tuple[Overlay, Path], name: str, force: bool
) -> None:
    overlay, top = planted
    assert overlay.fds is not None
    real, _, layer = overlay.fds
    before = {p for p in top.rglob("*") if not p.is_relative_to(top / "nb")}
    try:
        layer_files.keep(real, layer, name, force)
        kept = True
    except (layer_files.KeepRefused, OSError):
        kept = False
    after = {p for p in top.rglob("*") if not p.is_relative_to(top / "nb")}
    assert after == before
    assert (top / "outside" / "b.csv").read_bytes() == MARKER
    if kept:
        parts = name.split("/")
        assert not any(p.startswith(".") for p in parts)
        assert (top / "nb" / name).read_bytes() == GUEST
    for path in (top / "nb").rglob("*"):
        if ".sandbox-kernel" in path.parts:
            continue
        assert not path.name.startswith(".") or path.name == ".sandbox-kernel"
        if path.is_file() and not path.is_symlink():
            assert path.read_bytes() == GUEST
