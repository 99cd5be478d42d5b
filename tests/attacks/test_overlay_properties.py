"""Property-based hunt for the overlay's host-side doors (issue 47, items 5, 6, 9): hypothesis
generates sequences of what the guest does in its layer (writes, renames, deletes, links
planted anywhere, a folder replaced by a link) and what others do in the notebook's folder
(files added, renamed, removed, links planted to outside), each step followed by the layer's
refresh or a new start, all while a real renamer thread swaps a folder of the notebook's for a
link to an outside folder and back (renameat2 RENAME_EXCHANGE). The invariants:

- nothing outside the notebook's folder and its layer is ever created or changed;
- the refresh never changes the user's own files;
- no file of the layer is an outside file, and no file the guest can read holds its bytes.

The first test plays the guest with the host's own calls in the layer (everything a guest may
do there and more: links with absolute targets), fast enough for many sequences; the second
plays it with cells in a real session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_kernel.host.overlay import Overlay, prepare_overlay
from sandbox_kernel.repl import ReplSandbox
from tests.attacks.test_overlay_host_attacks import (
    MARKER,
    READ_ALL,
    _run,
    _session,
    _tree,
    swapping,
)

NAMES = ("a.csv", "b.csv", "sub/c.csv", "sub/deep/d.csv", "new/e.csv", "box/f.csv")
FOLDERS = ("sub", "sub/deep", "new", "box")
# Where a planted link may point: out of the layer, out of the folder, absolute, into it.
TARGETS = (
    "../../../outside",
    "../../../outside/secret.csv",
    "../../../../outside",
    "../../outside",
    "..",
    "../..",
    "sub",
    "a.csv",
    "{outside}",
    "{outside}/secret.csv",
)

names = st.sampled_from(NAMES)
folders = st.sampled_from(FOLDERS)
# The user's steps leave `box` to the racer (a step through it could reach outside itself).
user_names = st.sampled_from([n for n in NAMES if not n.startswith("box")])
user_folders = st.sampled_from([f for f in FOLDERS if f != "box"])
targets = st.sampled_from(TARGETS)
GUEST_STEPS = st.one_of(
    st.tuples(st.just("write"), names, st.binary(max_size=8)),
    st.tuples(st.just("rename"), names, names),
    st.tuples(st.just("remove"), names),
    st.tuples(st.just("symlink"), names, targets),
    st.tuples(st.just("replace_folder"), folders, targets),
)
USER_STEPS = st.one_of(
    st.tuples(st.just("user_add"), user_names, st.binary(max_size=8)),
    st.tuples(st.just("user_rename"), user_names, user_names),
    st.tuples(st.just("user_remove"), user_names),
    st.tuples(st.just("user_link"), user_names, targets),
    st.tuples(st.just("user_folder_link"), user_folders, targets),
)
STEPS = st.lists(
    st.one_of(GUEST_STEPS, USER_STEPS, st.tuples(st.just("restart"))), min_size=1, max_size=12
)


@dataclass
class Place:
    """A notebook folder `folder` (with `box/`, raced against the link `swap`) beside an
    outside folder of files holding MARKER."""

    top: Path

    @property
    def folder(self) -> Path:
        return self.top / "nb"

    @property
    def outside(self) -> Path:
        return self.top / "outside"

    @property
    def layer(self) -> Path:
        return self.folder / ".sandbox-kernel" / "layer"

    def make(self) -> None:
        (self.folder / "box").mkdir(parents=True)
        (self.folder / "sub" / "deep").mkdir(parents=True)
        (self.outside / "sub").mkdir(parents=True)
        for name in ("secret.csv", "a.csv", "f.csv", "sub/c.csv"):
            (self.outside / name).write_text(f"{MARKER} {name}\n")
        for name in ("a.csv", "sub/c.csv", "sub/deep/d.csv", "box/f.csv"):
            (self.folder / name).write_text(f"user {name}\n")
        os.symlink(self.outside, self.folder / "swap")

    def target(self, text: str) -> str:
        return text.format(outside=self.outside)

    def outside_identities(self) -> set[tuple[int, int]]:
        found = set()
        for top, _, files in os.walk(self.outside):
            for name in files:
                st = os.lstat(Path(top, name))
                found.add((st.st_dev, st.st_ino))
        return found

    def user_tree(self) -> dict[str, tuple[int, bytes]]:
        """The user's entries that neither the layer nor the racing renamer holds."""
        found: dict[str, tuple[int, bytes]] = {}
        for entry in os.scandir(self.folder):
            if entry.name in ("box", "swap", ".sandbox-kernel"):
                continue
            if entry.is_dir(follow_symlinks=False):
                found.update({f"{entry.name}/{k}": v for k, v in _tree(Path(entry.path)).items()})
            path = Path(entry.path)
            detail = (
                os.readlink(path).encode()
                if path.is_symlink()
                else path.read_bytes()
                if path.is_file()
                else b""
            )
            found[entry.name] = (path.lstat().st_mode, detail)
        return found


def _clear(path: Path) -> None:
    """Whatever is at `path` removed, a link itself and not what it points to."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _beneath(root: Path, relative: str) -> Path | None:
    """`root / relative` if no folder on the way is a link (the test's own steps never
    reach outside, whatever was planted)."""
    path = root
    for part in relative.split("/")[:-1]:
        path = path / part
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            return None
    return root / relative


def _step(place: Place, root: Path, step: tuple[object, ...]) -> None:
    """Do `step` in `root` (the layer for the guest's, the folder for the user's)."""
    kind, *args = step
    first = _beneath(root, str(args[0]))
    if first is None:
        return
    with contextlib.suppress(OSError):
        if kind in ("write", "user_add"):
            first.parent.mkdir(parents=True, exist_ok=True)
            if first.parent.is_symlink():
                return
            _clear(first)  # as the guard's copy-up: a new file, never the user's changed
            first.write_bytes(bytes(args[1]))  # type: ignore[call-overload]
        elif kind in ("rename", "user_rename"):
            second = _beneath(root, str(args[1]))
            if second is not None and first != second:
                os.rename(first, second)
        elif kind in ("remove", "user_remove"):
            _clear(first)
        elif kind in ("symlink", "user_link", "replace_folder", "user_folder_link"):
            _clear(first)
            os.symlink(place.target(str(args[1])), first)


def _check(place: Place, secrets: set[tuple[int, int]], outside: object) -> None:
    assert _tree(place.outside) == outside, "a file outside the notebook's folder changed"
    for top, _, files in os.walk(place.layer):
        for name in files:
            path = Path(top, name)
            st = os.lstat(path)
            assert (st.st_dev, st.st_ino) not in secrets, f"an outside file in the layer: {path}"
            if path.is_file() and not path.is_symlink():
                assert MARKER.encode() not in path.read_bytes(), path


@contextlib.contextmanager
def raced(place: Place) -> Iterator[None]:
    with swapping(place.folder / "box", place.folder / "swap"):
        yield


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(steps=STEPS)
def test_no_sequence_reaches_outside_the_folder(steps: list[tuple[object, ...]]) -> None:
    with tempfile.TemporaryDirectory(prefix="overlay-property-") as top:
        place = Place(Path(top))
        place.make()
        secrets, outside = place.outside_identities(), _tree(place.outside)
        with raced(place):
            overlay: Overlay = prepare_overlay(place.folder)
            _check(place, secrets, outside)
            for step in steps:
                guest = not str(step[0]).startswith("user") and step[0] != "restart"
                if step[0] == "restart":
                    overlay.close()
                    overlay = prepare_overlay(place.folder)
                else:
                    _step(place, place.layer if guest else place.folder, step)
                    before = place.user_tree() if guest else None
                    overlay.refresh()
                    if before is not None:
                        assert place.user_tree() == before, "the refresh changed the user's files"
                _check(place, secrets, outside)
        # Refreshes look only where something changed: they leave the layer as a new start.
        overlay.refresh()
        refreshed, shared = _layer(place), overlay.shared
        overlay.close()
        again = prepare_overlay(place.folder)
        assert _layer(place) == refreshed, "a refresh left the layer unlike a new start"
        # ... and know every user's file that a new start knows as shared (the guard's set)
        assert again.shared <= shared
        again.close()


def _layer(place: Place) -> dict[str, tuple[int, int, int]]:
    """The layer's entries: (mode, device, inode), links not followed."""
    found = {}
    for top, dirs, files in os.walk(place.layer):
        for name in [*dirs, *files]:
            st = os.lstat(Path(top, name))
            found[str(Path(top, name).relative_to(place.layer))] = (
                st.st_mode,
                st.st_dev,
                st.st_ino,
            )
    return found


# -- the same with a real guest -------------------------------------------------------------

GUEST_CELLS = {
    "write": "p = {0!r}\nos.makedirs(os.path.dirname(p) or '.', exist_ok=True)\n"
    "open(p, 'wb').write({1!r})",
    "rename": "os.rename({0!r}, {1!r})",
    "remove": "os.remove({0!r})",
    "symlink": "os.symlink({1!r}, {0!r})",
    "replace_folder": "shutil.rmtree({0!r})\nos.symlink({1!r}, {0!r})",
}


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(
    steps=st.lists(st.one_of(GUEST_STEPS, USER_STEPS), min_size=1, max_size=6),
)
def test_no_guest_sequence_reads_or_writes_outside(steps: list[tuple[object, ...]]) -> None:
    with tempfile.TemporaryDirectory(prefix="overlay-guest-property-") as top:
        place = Place(Path(top))
        place.make()
        secrets, outside = place.outside_identities(), _tree(place.outside)
        repl: ReplSandbox
        with raced(place), _session(place.folder, place.top / "ws") as repl:
            _run(repl, "import os, shutil")
            for step in steps:
                kind, *args = step
                if str(kind).startswith("user"):
                    _step(place, place.folder, step)
                else:
                    if kind in ("symlink", "replace_folder"):
                        args[1] = place.target(str(args[1]))
                    cell = GUEST_CELLS[str(kind)].format(*args)
                    repl.execute(
                        f"try:\n    {cell.replace(chr(10), chr(10) + '    ')}\n"
                        "except OSError:\n    pass"
                    )
                shown = _run(repl, READ_ALL)
                assert MARKER not in shown, "the guest read an outside file"
                _check(place, secrets, outside)
