"""Attacks through the notebook folder mount (SANDBOX_KERNEL_NOTEBOOK_FOLDER=read-only): the
folder is readable and nothing more. Writing into it, reaching its parent, following a link out
of it or replacing its notebooks all fail plainly, the host's files are unchanged, and the next
cell works."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernel.conftest import RunningKernel, start_kernel


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningKernel, Path]]:
    top = tmp_path_factory.mktemp("notebook-attacks")
    root = top / "nb"
    (root / "data").mkdir(parents=True)
    (root / "data" / "x.csv").write_text("a\n1\n")
    (root / "analysis.ipynb").write_text('{"cells": []}')
    (top / "beside.txt").write_text("beside the notebook folder")
    os.symlink(top / "beside.txt", root / "data" / "link.txt")
    kernel = start_kernel(root, extra_env={"SANDBOX_KERNEL_NOTEBOOK_FOLDER": "read-only"})
    yield kernel, root
    kernel.shutdown()


def _notebook_files(root: Path) -> dict[str, bytes]:
    """The folder's own files and names (the test's kernel keeps its workspace and run log in
    it too, and the guest's read-only view of it, .sandbox-kernel/layer: those are the
    host's, left out)."""
    return {
        str(p.relative_to(root)): b"" if p.is_dir() else p.read_bytes()
        for p in root.rglob("*")
        if not p.is_symlink()
        and p.name != "runs.jsonl"
        and not {"workspace", ".sandbox-kernel"} & set(p.relative_to(root).parts)
    }


@pytest.mark.parametrize(
    "cell",
    [
        "open('new.txt', 'w').write('x')",
        "open('analysis.ipynb', 'w').write('{}')",  # a notebook replaced
        "open('data/x.csv', 'a').write('2\\n')",
        "import os; os.remove('data/x.csv')",
        "import os; os.rename('analysis.ipynb', 'gone.ipynb')",
        "import os; os.mkdir('made')",
    ],
)
def test_the_folder_cannot_be_changed(mounted: tuple[RunningKernel, Path], cell: str) -> None:
    kernel, root = mounted
    before = _notebook_files(root)
    refused = kernel.run(cell)
    assert refused.status == "error", refused.describe()
    assert refused.reply["ename"] in ("OSError", "PermissionError"), refused.describe()
    assert _notebook_files(root) == before
    assert kernel.run_ok("6 * 7").result() == "42"


@pytest.mark.parametrize(
    "path",
    ["data/link.txt", "../beside.txt", "/notebook/../beside.txt", "/notebook/../../etc/passwd"],
)
def test_nothing_outside_the_folder_is_read(mounted: tuple[RunningKernel, Path], path: str) -> None:
    kernel, _ = mounted
    attempt = kernel.run(f"open({path!r}).read()")
    assert attempt.status == "error", attempt.describe()
    assert "beside the notebook folder" not in attempt.describe()
    assert "root:" not in attempt.describe()
    assert kernel.run_ok("open('data/x.csv').read()").result() == "'a\\n1\\n'"
