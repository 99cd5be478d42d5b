"""numpy, pandas and matplotlib values through the driver, in the real guest (which has them):
plain values for get_variable, rich bundles for results, figures shown after the cell."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.repl import REPLConfig, ReplSandbox

POLICY = ExecutionPolicy(fuel_budget=10**12, timeout_seconds=120, memory_bytes=1_000_000_000)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplSandbox]:
    config = REPLConfig(policy=POLICY, workspace=tmp_path_factory.mktemp("values"))
    with ReplSandbox(config) as repl:
        yield repl


def _ok(repl: ReplSandbox, code: str) -> None:
    done = repl.execute(code)
    assert done.status == "ok", done


def test_numpy_values_are_plain(session: ReplSandbox) -> None:
    _ok(
        session,
        "import numpy\nscalars = [numpy.float64(1.5), numpy.int32(7)]\n"
        "grid = numpy.array([[1, 2], [3, numpy.nan]])\nbig = numpy.zeros((400, 400))",
    )
    assert session.get_variable("scalars") == [1.5, 7]
    assert session.get_variable("grid") == [[1.0, 2.0], [3.0, None]]
    cut = session.get_variable("big")
    assert len(cut) <= 400 and "truncated" in str(cut[-1])


def test_pandas_values_are_plain_and_frames_are_tables(session: ReplSandbox) -> None:
    _ok(session, "import pandas\nframe = pandas.DataFrame({'a': [1, 2], 'b': ['x', None]})")
    assert session.get_variable("frame") == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]
    assert session.get_variable("column") is None
    _ok(session, "column = frame['a']")
    assert session.get_variable("column") == [1, 2]
    shown = session.execute("frame")
    assert shown.result is not None and "<table" in shown.result["text/html"]


def test_matplotlib_figures_are_shown_after_the_cell(session: ReplSandbox) -> None:
    done = session.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.figure()")
    assert done.result is not None and done.result["text/plain"].startswith("<Figure")
    (shown,) = done.displays  # the figure that is the result is not shown twice
    assert base64.b64decode(shown["data"]["image/png"]).startswith(b"\x89PNG")
    assert session.execute("plt.get_fignums()").result == {"text/plain": "[]"}
