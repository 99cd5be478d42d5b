"""Listing and diffing the workspace without following links, and removing it safely."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox_kernel.host import workspace as ws
from sandbox_kernel.host.workspace import diff, remove_tree, snapshot


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host folder beside the workspace, holding a secret the listing must never reach."""
    folder = tmp_path / "outside"
    (folder / "deep").mkdir(parents=True)
    (folder / "secret.txt").write_text("secret")
    (folder / "deep" / "more.txt").write_text("more")
    return folder


def _tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def test_snapshot_lists_files_in_subfolders_by_posix_path(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a")
    (workspace / "sub" / "deeper").mkdir(parents=True)
    (workspace / "sub" / "b.csv").write_text("bb")
    (workspace / "sub" / "deeper" / "c").write_text("ccc")
    (workspace / "empty").mkdir()
    shot = snapshot(workspace)
    assert shot.complete is True
    assert sorted(shot.entries) == ["a.txt", "sub/b.csv", "sub/deeper/c"]
    assert shot.entries["sub/deeper/c"].size == 3
    assert shot.entries["a.txt"].kind == "file"


def test_snapshot_of_a_missing_folder_is_empty(tmp_path: Path) -> None:
    shot = snapshot(tmp_path / "absent")
    assert shot.entries == {}
    assert shot.complete is True


def test_exclude_leaves_out_the_named_paths(workspace: Path) -> None:
    (workspace / "user_code.py").write_text("print(1)")
    (workspace / "kept.txt").write_text("k")
    assert sorted(snapshot(workspace, exclude=frozenset({"user_code.py"})).entries) == ["kept.txt"]


@pytest.mark.parametrize(
    "target", ["folder", "file", "dangling"], ids=["folder", "file", "dangling"]
)
def test_a_symlink_is_listed_as_a_link_and_not_followed(
    workspace: Path, outside: Path, target: str
) -> None:
    pointed = {"folder": outside, "file": outside / "secret.txt", "dangling": outside / "gone"}
    (workspace / "escape").symlink_to(os.path.relpath(pointed[target], workspace))
    before = _tree(outside)
    shot = snapshot(workspace)
    assert sorted(shot.entries) == ["escape"]
    assert shot.entries["escape"].kind == "link"
    assert not any("secret" in path or "more" in path for path in shot.entries)
    assert _tree(outside) == before


def test_a_symlinked_subfolder_is_not_entered(workspace: Path, outside: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "up").symlink_to("../../outside")
    assert sorted(snapshot(workspace).entries) == ["sub/up"]


def test_other_file_kinds_are_listed_as_other(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    shot = snapshot(workspace)
    assert shot.entries["pipe"].kind == "other"


def test_max_entries_bounds_the_listing(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ws, "MAX_ENTRIES", 10)
    for i in range(25):
        (workspace / f"f{i:02}.txt").write_text("x")
    shot = snapshot(workspace)
    assert shot.complete is False
    assert len(shot.entries) == 10


def test_max_entries_not_reached_is_complete(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ws, "MAX_ENTRIES", 10)
    for i in range(10):
        (workspace / f"f{i}.txt").write_text("x")
    shot = snapshot(workspace)
    assert shot.complete is True
    assert len(shot.entries) == 10


def test_diff_reports_created_and_modified_sorted(workspace: Path) -> None:
    (workspace / "same.txt").write_text("same")
    (workspace / "grow.txt").write_text("a")
    (workspace / "gone.txt").write_text("g")
    before = snapshot(workspace)
    (workspace / "grow.txt").write_text("abc")
    (workspace / "gone.txt").unlink()
    (workspace / "z.txt").write_text("z")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "a.txt").write_text("a")
    created, modified = diff(before, snapshot(workspace))
    assert created == ["sub/a.txt", "z.txt"]
    assert modified == ["grow.txt"]


def test_diff_sees_a_same_size_rewrite(workspace: Path) -> None:
    path = workspace / "f.txt"
    path.write_text("aaaa")
    before = snapshot(workspace)
    path.write_text("bbbb")
    later = before.entries["f.txt"].mtime_ns + 10**9  # coarse clocks: make the tick visible
    os.utime(path, ns=(later, later))
    assert diff(before, snapshot(workspace)) == ([], ["f.txt"])


def test_diff_sees_a_file_replaced_by_a_link(workspace: Path, outside: Path) -> None:
    (workspace / "f").write_text("x")
    before = snapshot(workspace)
    (workspace / "f").unlink()
    (workspace / "f").symlink_to(outside / "secret.txt")
    assert diff(before, snapshot(workspace)) == ([], ["f"])


def test_no_change_is_an_empty_diff(workspace: Path) -> None:
    (workspace / "f").write_text("x")
    assert diff(snapshot(workspace), snapshot(workspace)) == ([], [])


def test_remove_tree_does_not_follow_links(workspace: Path, outside: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "escape").symlink_to(outside)
    (workspace / "file-link").symlink_to(outside / "secret.txt")
    before = _tree(outside)
    remove_tree(workspace)
    assert not workspace.exists()
    assert _tree(outside) == before
    assert (outside / "secret.txt").read_text() == "secret"


def test_remove_tree_of_a_link_removes_only_the_link(tmp_path: Path, outside: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(outside)
    remove_tree(link)
    assert not link.is_symlink()
    assert (outside / "secret.txt").is_file()


def test_remove_tree_of_nothing_is_quiet(tmp_path: Path) -> None:
    remove_tree(tmp_path / "absent")


def test_a_listing_counts_folders_against_its_limit(tmp_path: Path) -> None:
    """20,000 empty folders hold no file, yet walking them costs: the limit counts them."""
    for i in range(300):
        (tmp_path / f"d{i}").mkdir()
    assert snapshot(tmp_path, limit=100).complete is False
    assert snapshot(tmp_path, limit=1_000).complete is True
