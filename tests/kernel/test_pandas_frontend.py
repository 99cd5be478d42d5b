"""pandas knows it is in a notebook (its in_ipython_frontend: the shell's type names "zmq", as
ipykernel's ZMQInteractiveShell does), so wide and categorical reprs are laid out as on
ipykernel; numpy's integers print as on 64-bit Linux where a cell makes them (numpy64.py).
Both compared with the baseline's ipykernel in the same test."""

from __future__ import annotations

from tests.kernel.conftest import RunningKernel

CELLS = [
    "import pandas as pd\nfrom pandas.io.formats.console import in_ipython_frontend\n"
    "in_ipython_frontend()",
    "pd.Categorical(['abcdefghij'] * 12)",
    "pd.Series(pd.Categorical(list('abcdefghijklmnopqrstuvwxyz')))",
    "pd.DataFrame({f'column_{i:02d}': range(3) for i in range(30)})",
    "pd.Series(range(100))",
]

NUMPY_CELLS = [
    "import numpy as np\nnp.array([7, 8, 9])",
    "np.arange(100_000).sum()",
    "np.concatenate([[1, 2, 3], [4, 5, 6]])",
    "np.concatenate([[[1, 2], [3, 4]]] * 2, axis=1)",
    "np.where(np.array([0.5, -1.0, 2.0]) > 0, 2, -2)",
    "np.count_nonzero(np.arange(10) < 6)",
    "np.array([1, 2], dtype=np.int32)",
    "(np.array([0.5, -1.0, 2.0]) > 0).sum()",
    "np.ones((2, 3), dtype=bool).sum(axis=1)",
]


def test_pandas_reprs_are_ipykernels(kernel: RunningKernel, ipykernel: RunningKernel) -> None:
    _compare(kernel, ipykernel, CELLS)


def test_numpy_integer_reprs_are_ipykernels(
    kernel: RunningKernel, ipykernel: RunningKernel
) -> None:
    _compare(kernel, ipykernel, NUMPY_CELLS)


def _compare(kernel: RunningKernel, ipykernel: RunningKernel, cells: list[str]) -> None:
    differences = []
    for cell in cells:
        ours, theirs = kernel.run_ok(cell).result(), ipykernel.run_ok(cell).result()
        if ours != theirs:
            differences.append(f"{cell!r}:\n  sandbox:   {ours!r}\n  ipykernel: {theirs!r}")
    assert not differences, "\n".join(differences)


def test_a_multiindex_table_passes_the_firewall_whole(kernel: RunningKernel) -> None:
    """pandas writes `halign` on a MultiIndex's header cells: a presentational word the
    firewall keeps, so such a table comes without a removal note (18 cells of one course
    printed one)."""
    cell = (
        "import pandas as pd\n"
        "pd.DataFrame([[1, 2]], columns=pd.MultiIndex.from_tuples([('a', 'x'), ('a', 'y')]))"
    )
    done = kernel.run_ok(cell)
    assert 'halign="left"' in done.of_type("execute_result")[0].content["data"]["text/html"]
    assert done.stream("stderr") == ""
