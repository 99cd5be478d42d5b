"""The notebook's folder as a new user meets it, through papermill: a cell that writes beside
the notebook gets one line saying where the files went and how to keep them (and a cell that
writes nothing gets none); `%files` lists exactly what changed; `%files --keep` puts a CSV and
a PNG beside the notebook and refuses what it must."""

from __future__ import annotations

from pathlib import Path

import nbformat
import papermill  # type: ignore[import-untyped]
import pytest

from tests.kernel.conftest import KERNEL_NAME, kernel_env

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
CELLS = [
    "x = 1",
    "open('results.csv', 'w').write('a,b\\n1,2\\n')\n"
    f"open('plot.png', 'wb').write({PNG!r})\n"
    "open('conftest.py', 'w').write('import os\\n')\n"
    "open('data.csv', 'a').write('3,4\\n')",
    "print(open('data.csv').read())",
    "%files",
    "%files --keep results.csv plot.png data.csv conftest.py .sandbox-kernel/state.json",
    "%files --diff data.csv",
    "%sandbox",
]


def _run(folder: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    """[stdout, stderr] of each cell of a notebook in `folder` run by papermill."""
    for name, value in kernel_env(tmp_path / "kernel").items():
        monkeypatch.setenv(name, value)
    notebook = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    notebook.cells = [
        nbformat.v4.new_code_cell(source)  # type: ignore[no-untyped-call]
        for source in CELLS
    ]
    notebook.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": KERNEL_NAME}
    source, output = folder / "analysis.ipynb", tmp_path / "out.ipynb"
    nbformat.write(notebook, source)  # type: ignore[no-untyped-call]
    papermill.execute_notebook(
        str(source), str(output), cwd=str(folder), progress_bar=False, start_timeout=120
    )
    done = nbformat.read(output, as_version=4)  # type: ignore[no-untyped-call]
    return [
        [
            "".join(o.get("text", "") for o in cell.outputs if o.get("name") == stream)
            for stream in ("stdout", "stderr")
        ]
        for cell in done.cells
    ]


def test_a_notebook_is_told_where_its_files_went_and_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "nb"
    folder.mkdir()
    (folder / "data.csv").write_text("a,b\n")
    outputs = _run(folder, monkeypatch, tmp_path)
    said = [err for _, err in outputs[:3]]
    assert "[sandbox]" not in said[0]  # nothing written: no line
    line = said[1]
    assert line.count("\n") == 1 and line.startswith("[sandbox] this cell wrote ")
    for name in ("conftest.py", "data.csv (changed)", "plot.png", "and 1 more"):
        assert name in line, line
    assert ".sandbox-kernel/layer/" in line and "%files --keep NAME" in line
    assert "[sandbox]" not in said[2]  # reading is not writing
    listing = outputs[3][0]
    rows = [row.split() for row in listing.splitlines()[1:-1]]
    assert sorted((r[0], r[-1]) for r in rows) == [
        ("changed", "data.csv"),
        ("new", "conftest.py"),
        ("new", "plot.png"),
        ("new", "results.csv"),
    ]
    kept = outputs[4][0]
    assert "kept results.csv" in kept and "kept plot.png" in kept
    assert "not kept data.csv: your folder has a file by that name" in kept
    assert "not kept conftest.py: other programs run or read this name" in kept
    assert "not kept .sandbox-kernel/state.json: a hidden" in kept
    assert (folder / "results.csv").read_text() == "a,b\n1,2\n"
    assert (folder / "plot.png").read_bytes() == PNG
    assert (folder / "data.csv").read_text() == "a,b\n"
    assert not (folder / "conftest.py").exists()
    assert "+3,4" in outputs[5][0]
    # Kept files are no longer the session's own: data.csv and conftest.py are left.
    assert "notebook folder: 2 changes in the session's copy" in outputs[6][0]
