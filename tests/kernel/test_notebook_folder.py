"""A notebook's relative data paths (`pd.read_csv("data/x.csv")`) with
SANDBOX_KERNEL_NOTEBOOK_FOLDER=read-only: the kernel's starting folder (Jupyter starts a kernel
in the notebook's folder) is mounted read-only at /notebook and is the working folder; writes
go to the workspace. The default, the overlay, is test_notebook_overlay.py's.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.kernel.conftest import start_kernel


def _notebook_folder(root: Path) -> None:
    (root / "data").mkdir(parents=True)
    (root / "data" / "x.csv").write_text("a,b\n1,2\n3,4\n")
    (root / "secret-outside").mkdir()


def test_relative_paths_read_the_notebooks_folder(tmp_path: Path) -> None:
    root = tmp_path / "nb"
    _notebook_folder(root)
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    os.symlink(outside, root / "data" / "link.txt")
    kernel = start_kernel(root, extra_env={"SANDBOX_KERNEL_NOTEBOOK_FOLDER": "read-only"})
    try:
        assert kernel.run_ok("%pwd").result() == "'/notebook'"
        total = kernel.run_ok("import pandas as pd\nint(pd.read_csv('data/x.csv').a.sum())")
        assert total.result() == "4"
        # Read-only: a relative write fails plainly, and nothing reaches the host folder.
        refused = kernel.run("open('new.txt', 'w').write('x')")
        assert refused.reply["ename"] in ("OSError", "PermissionError"), refused.describe()
        assert not (root / "new.txt").exists()
        # Writes go to the workspace, as before.
        kernel.run_ok("open('/app/out.txt', 'w').write('kept')")
        assert (kernel.workspace / "out.txt").read_text() == "kept"
        # A link out of the folder is not followed.
        link = kernel.run("open('data/link.txt').read()")
        assert link.status == "error", link.describe()
        assert "host file" not in str(link.describe())
        assert kernel.run_ok("6 * 7").result() == "42"
    finally:
        kernel.shutdown()
