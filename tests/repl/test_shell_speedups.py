"""IPython's per-cell work made cheaper in the guest (guest/speedups.py, guest/shell.py): plain
Python skips the static input transforms, a cell that cannot await skips the compile that
asks, and the loop checks no longer make IPython walk each tree again. Each keeps IPython's
behaviour: the transforms' output is compared with IPython's own on every cell of the
repository's notebooks and on cells made to hit each transform."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from sandbox_kernel.repl import ReplSandbox
from tests.repl.conftest import plain, repl_config, run_ok

POLICY = {"fuel_budget": 10**12, "timeout_seconds": 300}
ROOT = Path(__file__).parents[2]

# Plain Python that must take the short way: each only gets a final newline from IPython.
PLAIN = [
    "x = 1",
    "a != b",
    "'%s' % x",
    "y = a % b",
    "d[..., 0]",
    "def f():\n    return 1\n",
    "x = 1\n\ny = 2\n",
    "f(1,\n  2)",
    "# a comment\n    indented_in_a_comment = 1",
    "class C:\n    '''doc'''\n\n    x = 1",
]
# What each of IPython's transforms acts on, or might: none may take the short way.
SPECIAL = [
    "%pwd",
    "%%time\nx = 1",
    "!echo hi",
    "!!echo hi",
    "x = !echo hi",
    "y = %who_ls",
    "y = \\\n  %who_ls",
    "len?",
    "len??",
    "?len",
    ">>> 1 + 1",
    "In [1]: 1 + 1",
    "   ...: 2",
    "  x = 1",
    "\nx = 1",
    "x = 1\n   \ny = 2",
    "/print 1",
    ",print a b",
    ";print a b",
    "x = 1\r\ny = 2",
    "x = 1\x0cy = 2",
    "if x:\n    %time 1\n",
    "s = 'a?b'",
    "",
]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplSandbox]:
    config = repl_config(tmp_path_factory.mktemp("speedups"), POLICY, ipython=True)
    with ReplSandbox(config) as repl:
        yield repl


def notebook_cells() -> list[str]:
    cells = []
    for path in sorted(
        [*ROOT.glob("tests/notebooks/*.ipynb"), ROOT / "notebooks/quickstart.ipynb"]
    ):
        notebook = nbformat.read(path, as_version=4)
        cells += [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    assert len(cells) > 20
    return cells


def test_the_short_way_and_ipythons_transforms_agree(session: ReplSandbox) -> None:
    cells = [*PLAIN, *SPECIAL, *notebook_cells()]
    done = run_ok(
        session,
        "import json, sandbox_kernel_speedups as speedups\n"
        "manager = get_ipython().input_transformer_manager\n"
        f"cells = json.loads({json.dumps(json.dumps(cells))})\n"
        "differ = [c for c in cells if manager.transform_cell(c) != "
        "type(manager).transform_cell(manager, c)]\n"
        "shorts = [speedups.plain(c) for c in cells]\n"
        "print(json.dumps([differ, shorts]))",
    )
    differ, shorts = json.loads(done.stdout)
    assert differ == []
    assert shorts[: len(PLAIN)] == [True] * len(PLAIN)
    assert shorts[len(PLAIN) : len(PLAIN) + len(SPECIAL)] == [False] * len(SPECIAL)
    assert sum(shorts) > len(PLAIN)  # the notebooks' plain cells take it too


def test_a_users_own_transform_still_applies(session: ReplSandbox) -> None:
    run_ok(
        session,
        "def _ones(lines):\n"
        "    return [line.replace('ONE', '1') for line in lines]\n"
        "get_ipython().input_transformers_cleanup.append(_ones)",
    )
    try:
        assert plain(run_ok(session, "ONE + ONE")) == "2"
    finally:
        run_ok(session, "get_ipython().input_transformers_cleanup.remove(_ones)")
    assert "NameError" in str(session.execute("ONE").ename)


def test_special_syntax_and_top_level_await_still_run(session: ReplSandbox) -> None:
    assert plain(run_ok(session, "\n  \n  indented = 41\n  indented + 1")) == "42"
    assert plain(run_ok(session, ">>> 2 * 3")) == "6"
    shown = run_ok(session, "x = %pwd\nx == __import__('os').getcwd()")
    assert plain(shown) == "True"
    awaited = run_ok(session, "import asyncio\nawait asyncio.sleep(0)\n'async' + ' done'")
    assert plain(awaited) == "'async done'"
    ran = run_ok(session, "label = 'await is only a word here'\nlabel.split()[0]")
    assert plain(ran) == "'await'"


def test_loops_are_checked_without_an_ast_transformer(session: ReplSandbox) -> None:
    """The soft interrupt's check comes with the shell's transform_ast: `ast_transformers` is
    empty, as on ipykernel, and a user's own still runs after it."""
    assert plain(run_ok(session, "get_ipython().ast_transformers")) == "[]"
    run_ok(
        session,
        "import ast\n"
        "class Seven(ast.NodeTransformer):\n"
        "    def visit_Constant(self, node):\n"
        "        return ast.Constant(7) if node.value == 6 else node\n"
        "get_ipython().ast_transformers.append(Seven())",
    )
    try:
        assert (
            plain(run_ok(session, "total = 0\nfor i in range(3):\n    total += 6\ntotal")) == "21"
        )
    finally:
        run_ok(session, "get_ipython().ast_transformers.clear()")


# Cells, then a probe of what IPython keeps per cell: _PLAIN_TRAITS (guest/shell.py) hold it
# as plain attributes in the guest, and a cell must see what it sees under IPython's traits.
KEPT_CELLS = ["x = 1\nx", "y = x + 1", "1/0", "y", "z = 3;"]
NATIVE_SHELL = (
    "import json, sys\n"
    "from IPython.core.interactiveshell import InteractiveShell\n"
    "from traitlets.config import Config\n"
    "config = Config()\n"
    "config.HistoryManager.hist_file = ':memory:'\n"
    "shell = InteractiveShell(config=config)\n"
    "for cell in json.loads(sys.argv[1]):\n"
    "    shell.run_cell(cell, store_history=True)\n"
    "print(shell.user_ns['probed'])\n"
)
KEPT_PROBE = (
    "ip = get_ipython()\n"
    "probed = repr((_i, _ii, _iii, _i2, In[1:], Out, _, __, ip.execution_count,"
    " ip.last_execution_succeeded, ip.last_execution_result.result,"
    " ip.displayhook.exec_result.info.raw_cell, ip.history_manager._i00))"
)


def test_what_ipython_keeps_per_cell_is_as_under_ipythons_traits(tmp_path: Path) -> None:
    """The same cells through IPython's own shell, in a process of its own (it puts display
    and more into builtins), and through the sandbox's."""
    native = subprocess.run(
        [sys.executable, "-c", NATIVE_SHELL, json.dumps([*KEPT_CELLS, KEPT_PROBE])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    with ReplSandbox(repl_config(tmp_path, POLICY, ipython=True)) as repl:
        for cell in [*KEPT_CELLS, KEPT_PROBE]:
            repl.execute(cell)
        probed = run_ok(repl, "print(probed)").stdout.strip()
    assert probed == native.stdout.strip().splitlines()[-1]
    assert probed.startswith("('z = 3;', 'y', '1/0', 'y = x + 1'")
