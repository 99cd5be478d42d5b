"""`ReplSandbox.files()`, `keep_files()` and `diff_file()` on a real session whose notebook
folder is shown as an overlay: what a cell writes, changes and deletes is listed exactly, and
kept beside the notebook only as the rules allow (host/layer_files.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.repl import REPLConfig, ReplSandbox
from sandbox_kernel.repl.files import NoLayer, note

POLICY = ExecutionPolicy(fuel_budget=50_000_000_000, timeout_seconds=60)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "nb"
    root.mkdir()
    (root / "data.csv").write_text("a,b\n1,2\n")
    (root / "notes.txt").write_text("one\ntwo\n")
    (root / "taken.csv").write_text("the user's own\n")
    (root / "sub").mkdir()
    (root / "sub" / "keep.txt").write_text("kept as it is\n")
    return root


@pytest.fixture
def repl(folder: Path, tmp_path: Path) -> Iterator[ReplSandbox]:
    config = REPLConfig(
        policy=POLICY, workspace=tmp_path / "ws", notebook_dir=folder, notebook_overlay=True
    )
    with ReplSandbox(config) as session:
        session.initialize()
        yield session


def run(repl: ReplSandbox, code: str) -> None:
    execution = repl.execute(code)
    assert execution.error is None, execution


def test_files_lists_exactly_what_the_cells_changed(repl: ReplSandbox, folder: Path) -> None:
    assert repl.files() == []
    assert repl.written.news() == []
    run(
        repl,
        "open('results.csv', 'w').write('x\\n1\\n')\n"
        f"open('plot.png', 'wb').write({PNG!r})\n"
        "open('notes.txt', 'a').write('three\\n')\n"
        "import os; os.remove('data.csv'); os.makedirs('out/deep')\n"
        "open('out/deep/t.txt', 'w').write('t')",
    )
    listed = {(c.path, c.kind, c.type) for c in repl.files()}
    assert listed == {
        ("results.csv", "new", "file"),
        ("plot.png", "new", "file"),
        ("notes.txt", "changed", "file"),
        ("data.csv", "deleted", "file"),
        ("out", "new", "folder"),
        ("out/deep", "new", "folder"),
        ("out/deep/t.txt", "new", "file"),
    }
    sizes = {c.path: c.size for c in repl.files()}
    assert sizes["plot.png"] == len(PNG) and sizes["results.csv"] == 4
    news = repl.written.news()
    assert {c.path for c in news} == {p for p, _, _ in listed}
    line = note(news)  # folders named only for themselves: out/ and out/deep/ hold files named
    assert line.count("\n") == 1 and "and 2 more" in line and "%files --keep" in line
    run(repl, "x = 1")
    assert repl.written.news() == []  # quiet when nothing changed
    # The user's files are untouched, and a file the user adds is not the session's doing.
    assert (folder / "data.csv").read_text() == "a,b\n1,2\n"
    (folder / "later.csv").write_text("mine\n")
    run(repl, "y = 2")
    assert repl.written.news() == []
    assert "later.csv" not in {c.path for c in repl.files()}


def test_keep_copies_a_csv_and_a_png_and_refuses_what_it_must(
    repl: ReplSandbox, folder: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    run(
        repl,
        "open('results.csv', 'w').write('x\\n1\\n')\n"
        f"open('plot.png', 'wb').write({PNG!r})\n"
        "open('taken.csv', 'w').write('the guest\\'s\\n')\n"
        "open('.hidden.csv', 'w').write('h')\n"
        "open('conftest.py', 'w').write('import os')\n"
        "import os; os.symlink('results.csv', 'link.csv')\n"
        "open('notes.txt', 'a').write('three\\n')",
    )
    done = {k.name: k for k in repl.keep_files(["results.csv", "plot.png"])}
    assert done["results.csv"].kept and done["plot.png"].kept
    assert (folder / "results.csv").read_text() == "x\n1\n"
    assert (folder / "plot.png").read_bytes() == PNG
    assert not os.stat(folder / "plot.png").st_mode & 0o111
    refused = {
        k.name: k.reason
        for k in repl.keep_files(
            ["taken.csv", ".hidden.csv", "link.csv", "conftest.py", "../outside/x", "nothing"]
        )
    }
    assert "already" in refused["taken.csv"] or "--force" in refused["taken.csv"]
    assert "hidden" in refused[".hidden.csv"]
    assert "link" in refused["link.csv"]
    assert "code or configuration" in refused["conftest.py"]
    assert "plain relative path" in refused["../outside/x"]
    assert "no such file" in refused["nothing"]
    assert (folder / "taken.csv").read_text() == "the user's own\n"
    assert not (folder / ".hidden.csv").exists() and not (folder / "conftest.py").exists()
    assert not (folder / "link.csv").exists() and list(outside.iterdir()) == []
    # Kept again: refused (the same file, or one of the user's by that name).
    assert not repl.keep_files(["results.csv"])[0].kept
    # --force replaces the user's file, and keeps a configuration name.
    forced = repl.keep_files(["taken.csv", "conftest.py"], force=True)
    assert all(k.kept for k in forced), forced
    assert (folder / "taken.csv").read_text() == "the guest's\n"
    assert (folder / "conftest.py").read_text() == "import os"
    assert not repl.keep_files([".hidden.csv"], force=True)[0].kept
    assert not repl.keep_files(["link.csv"], force=True)[0].kept
    diff = repl.diff_file("notes.txt")
    assert "+three" in diff and diff.startswith("--- yours/notes.txt")
    # What was kept is no longer listed as the session's own.
    assert {"results.csv", "plot.png"}.isdisjoint({c.path for c in repl.files()})
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".keeping")]


def test_a_session_without_a_layer_says_so(tmp_path: Path) -> None:
    config = REPLConfig(policy=POLICY, workspace=tmp_path / "ws")
    with ReplSandbox(config) as session:
        session.initialize()
        with pytest.raises(NoLayer):
            session.files()
        assert session.written.news() == []


def test_an_untouched_folder_keeps_no_workspace(folder: Path) -> None:
    """The workspace beside the notebook that a session made is gone at its end when the
    guest never wrote to /app, and kept when it did (or when it was the user's)."""
    for code, kept in (("x = 1", False), ("open('/app/a.txt', 'w').write('a')", True)):
        config = REPLConfig(
            policy=POLICY,
            workspace=folder / "workspace",
            notebook_dir=folder,
            notebook_overlay=True,
        )
        with ReplSandbox(config) as session:
            session.initialize()
            run(session, code)
            assert (folder / "workspace").is_dir()
        assert (folder / "workspace").exists() == kept
    (folder / "workspace" / "a.txt").unlink()  # the user's own, empty folder stays
    config = REPLConfig(policy=POLICY, workspace=folder / "workspace", notebook_dir=folder)
    with ReplSandbox(config) as session:
        session.initialize()
    assert (folder / "workspace").is_dir()
