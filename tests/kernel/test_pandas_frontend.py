"""pandas knows it is in a notebook (its in_ipython_frontend: the shell's type names "zmq", as
ipykernel's ZMQInteractiveShell does), so wide and categorical reprs are laid out as on
ipykernel, compared with the baseline's ipykernel in the same test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kernel.conftest import RunningKernel, start_ipykernel

CELLS = [
    "import pandas as pd\nfrom pandas.io.formats.console import in_ipython_frontend\n"
    "in_ipython_frontend()",
    "pd.Categorical(['abcdefghij'] * 12)",
    "pd.Series(pd.Categorical(list('abcdefghijklmnopqrstuvwxyz')))",
    "pd.DataFrame({f'column_{i:02d}': range(3) for i in range(30)})",
    "pd.Series(range(100))",
]


@pytest.fixture(scope="module")
def ipykernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKernel]:
    running = start_ipykernel(tmp_path_factory.mktemp("ipykernel-pandas"))
    yield running
    running.shutdown()


def test_pandas_reprs_are_ipykernels(kernel: RunningKernel, ipykernel: RunningKernel) -> None:
    differences = []
    for cell in CELLS:
        ours, theirs = kernel.run_ok(cell).result(), ipykernel.run_ok(cell).result()
        if ours != theirs:
            differences.append(f"{cell!r}:\n  sandbox:   {ours!r}\n  ipykernel: {theirs!r}")
    assert not differences, "\n".join(differences)
