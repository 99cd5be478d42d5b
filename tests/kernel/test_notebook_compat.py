"""Notebooks of our own (tests/notebooks) that use every IPython construct and the data stack
as a course does, whose stored outputs are ipykernel's (the `sandbox-baseline` kernel:
ipykernel with the guest's package versions; tests/notebooks/refresh.py stores them).

- nbval on sandbox-python: every cell's outputs must be ipykernel's (text compared; images,
  timings and memory addresses left out, as tests/notebooks/sanitize.cfg says).
- nbval on the baseline itself: the stored outputs are still what ipykernel gives.
- papermill on sandbox-python: every cell runs, errors only where a cell is tagged, and the
  cells that update or clear their displays end as ipykernel's (nbval cannot follow those).

Each run works in a copy of the folder, so nothing is written into the repository.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import papermill
import pytest

from tests.kernel.conftest import KERNEL_NAME, REPO, kernel_env
from tests.kernel.test_notebooks import run_nbval, unexpected_errors

NOTEBOOKS = REPO / "tests" / "notebooks"
BASELINE = "sandbox-baseline"
NAMES = sorted(path.name for path in NOTEBOOKS.glob("*.ipynb"))


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return folder


def _env(tmp_path: Path, name: str) -> dict[str, str]:
    """A sandbox kernel with its workspace and run log in `tmp_path`. data_science.ipynb reads
    its folder's data/ by relative paths: its kernel mounts the folder read-only as the working
    folder; ipython.ipynb writes and imports relative files: its kernel works in /app."""
    env = kernel_env(tmp_path)
    # nbval compares each cell's outputs with ipykernel's, which has no line saying where a
    # cell's files went: off, as docs/kernel.md tells nbval users
    env["SANDBOX_KERNEL_FILES_NOTE"] = "off"
    if name == "data_science.ipynb":
        env["SANDBOX_KERNEL_NOTEBOOK_FOLDER"] = "read-only"
    return env


def _texts(cell: nbformat.NotebookNode) -> list[str]:
    """A cell's outputs as text: streams and text/plain."""
    texts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            texts.append(output.text)
        elif "data" in output:
            texts.append(str(output.data.get("text/plain", "")))
    return texts


def _nbval(
    folder: Path, name: str, kernel: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    sanitize = str(NOTEBOOKS / "sanitize.cfg")
    return run_nbval(
        name,
        folder,
        env,
        *("--nbval-kernel-name", kernel, "--nbval-sanitize-with", sanitize),
        *("--nbval-cell-timeout", "600", "--rootdir", str(folder)),
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kernel", [KERNEL_NAME, BASELINE])
def test_nbval_matches_ipykernels_outputs(tmp_path: Path, name: str, kernel: str) -> None:
    folder = _copy(tmp_path)
    done = _nbval(folder, name, kernel, _env(tmp_path, name))
    cells = len([c for c in nbformat.read(NOTEBOOKS / name, 4).cells if c.cell_type == "code"])
    passed = re.search(r"\b(\d+) passed\b", done.stdout)
    print(f"{kernel} {name}: {passed.group(1) if passed else 0} of {cells} cells as ipykernel")
    assert done.returncode == 0, f"nbval failed:\n{done.stdout[-8000:]}\n{done.stderr[-2000:]}"
    assert passed is not None and int(passed.group(1)) == cells


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_papermill_runs_every_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    for key, value in _env(tmp_path, name).items():
        monkeypatch.setenv(key, value)
    folder = _copy(tmp_path)
    output = tmp_path / f"out-{name}"
    try:
        papermill.execute_notebook(
            str(folder / name),
            str(output),
            kernel_name=KERNEL_NAME,
            cwd=str(folder),
            progress_bar=False,
            start_timeout=180,
            execution_timeout=600,
        )
    except papermill.PapermillExecutionError as error:  # raised for a tagged cell's error too
        assert (error.ename, error.evalue) == ("ValueError", "expected")
    ran = nbformat.read(output, as_version=4)
    assert unexpected_errors(ran) == []
    # nbval cannot follow update_display_data and clear_output; nbclient (papermill) applies
    # them, as JupyterLab does: those cells must end as ipykernel's ended.
    # (papermill adds a banner cell when a cell raised: cells are matched by their source.)
    stored = nbformat.read(NOTEBOOKS / name, as_version=4)
    ours = {cell.source: cell for cell in ran.cells}
    for theirs in stored.cells:
        if "display-updates" in theirs.metadata.get("tags", []):
            assert _texts(ours[theirs.source]) == _texts(theirs), theirs.source
