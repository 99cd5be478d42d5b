"""Store ipykernel's outputs in the notebooks here: each runs on the `sandbox-baseline` kernel
(ipykernel with the guest's package versions, requirements-baseline.txt) in a copy of this
folder, and its outputs are written back. nbval then checks that sandbox-python gives the same
(tests/kernel/test_notebook_compat.py).

    .venv/bin/python tests/notebooks/refresh.py
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
BASELINE = "sandbox-baseline"


def run_on_baseline(path: Path, folder: Path) -> nbformat.NotebookNode:
    """`path` executed on ipykernel in `folder` (a copy of this one)."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name=BASELINE,
        timeout=600,
        allow_errors=False,  # only cells tagged raises-exception may fail
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute()
    return notebook


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="notebooks-refresh-") as temp:
        folder = Path(temp) / "notebooks"
        shutil.copytree(HERE, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        for path in sorted(HERE.glob("*.ipynb")):
            ran = run_on_baseline(folder / path.name, folder)
            stored = nbformat.read(path, as_version=4)
            for cell, fresh in zip(stored.cells, ran.cells, strict=True):
                if cell.cell_type == "code":
                    cell.outputs = fresh.outputs
                    cell.execution_count = fresh.execution_count
            nbformat.write(stored, path)
            print(f"{path.name}: outputs of {BASELINE} stored")


if __name__ == "__main__":
    main()
