"""Warm dataset images are shared by every run over a dataset: nothing one run does may
reach the next (issue 36). Each run starts from the image as it was saved (a private
copy-on-write mapping of the file), with a fresh scratch folder; these runs try to leave
something behind in the frames, the interpreter, the modules, the files and the SQLite copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_kernel.host.cache import cache_dir
from sandbox_kernel.runner import RunnerSettings, execute_python, execute_sql
from tests.runner.conftest import DATASETS, PERMISSIVE_GUARD, ok


@pytest.fixture
def permissive(tmp_path: Path) -> RunnerSettings:
    """The example datasets, Python on, and the AST guard open: what the sandbox holds."""
    return RunnerSettings(
        datasets=DATASETS,
        capsules=tmp_path / "capsules.sqlite3",
        enable_python_execution=True,
        guard=PERMISSIVE_GUARD,
    )


POISON = """
import sys, pandas
builtins = sys.modules["builtins"]
orders["quantity"] = orders["quantity"] * 1000      # the frame, in place
dfs["orders"].iloc[0, 0] = -1
orders.drop(orders.index, inplace=True)
products.columns = ["x"] * len(products.columns)
dfs.clear()
builtins.len = lambda *a: 0                          # the interpreter's builtins
pandas.DataFrame.sum = lambda self, *a, **k: 42      # a module everyone imports
sys.modules["sandbox_kernel_sql"].run = None         # the runner's own SQL module
left_behind = "secret"
open("/app/left.txt", "w").write("from the last run")
result = 1
"""

CHECK = """
import os
result = [[
    int(orders["quantity"].sum()),
    len(orders),
    len(dfs),
    "left_behind" in globals(),
    os.listdir("/app"),
    list(products.columns)[:1],
]]
"""


def test_a_run_that_poisons_its_session_leaves_nothing_for_the_next(
    permissive: RunnerSettings,
) -> None:
    clean = ok(execute_python("retail", CHECK, settings=permissive))
    ok(execute_python("retail", POISON, settings=permissive))
    after = ok(execute_python("retail", CHECK, settings=permissive))
    assert after.rows == clean.rows
    total, rows, tables, leftover, files, first = after.rows[0]
    assert rows > 0 and tables == 3 and leftover is False and files == [] and first != "x"
    sql = ok(execute_sql("retail", "SELECT sum(quantity) AS q FROM orders", settings=permissive))
    assert sql.rows == [[total]], "the SQL step saw a poisoned frame or module"


def test_the_image_file_is_never_written_by_a_run(permissive: RunnerSettings) -> None:
    ok(execute_python("retail", "result = 1", settings=permissive))  # the image exists
    images = {p: p.read_bytes()[: 1 << 20] for p in (cache_dir() / "warm").glob("*.mem")}
    stamps = {p: p.stat().st_mtime_ns for p in images}
    ok(execute_python("retail", POISON, settings=permissive))
    for path, head in images.items():
        if path.exists():  # pruning may remove an old image: never rewrite one
            assert path.stat().st_mtime_ns == stamps[path]
            assert path.read_bytes()[: 1 << 20] == head
