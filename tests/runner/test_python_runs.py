"""Python requests in the real sandbox: results as tables, caps, errors, limits, the flag.

Each request runs in a fresh session over the project's `retail` dataset (customers 12 rows,
orders 30, products 10).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from sandbox_kernel.runner import (
    ErrorCode,
    LimitHit,
    QueryType,
    RunnerConfigError,
    RunnerSettings,
    RunStatus,
    execute_python,
    execute_sql,
)
from tests.runner.conftest import RunPython, describe, ok


@pytest.mark.parametrize(
    ("code", "columns", "rows"),
    [
        (
            "result_df = products.head(2)[['product_id', 'unit_price']]",
            ["product_id", "unit_price"],
            [["P01", 24.5], ["P02", 4.2]],
        ),
        (
            "result_df = orders[orders.quantity >= 10][['order_id']]",  # filtered: index dropped
            ["order_id"],
            [[1003], [1013]],
        ),
        (
            "result_df = products.groupby('category')[['unit_price']].max()",  # named index kept
            ["category", "unit_price"],
            [["accessories", 18.5], ["coffee", 24.5], ["equipment", 72.0]],
        ),
        (
            "result_df = customers['segment'].value_counts()",
            ["segment", "count"],
            [["consumer", 8], ["business", 4]],
        ),
        (
            "result_rows = [(1, 'a'), (2, None)]\nresult_columns = ['n', 'letter']",
            ["n", "letter"],
            [[1, "a"], [2, None]],
        ),
        (
            "result_rows = [{'a': 1}, {'a': 2, 'b': 'x'}]",
            ["a", "b"],
            [[1, None], [2, "x"]],
        ),
        ("result = len(orders)", ["result"], [[30]]),
        ("result = products.unit_price.max()", ["result"], [[72.0]]),
        ("result = float('nan')", ["result"], [[None]]),
        ("result = 'forty-two'", ["result"], [["forty-two"]]),
        (
            "result = {'orders': len(orders), 'customers': len(customers)}",
            ["orders", "customers"],
            [[30, 12]],
        ),
        ("result = {'x': [1, 2], 'y': ['a', 'b']}", ["x", "y"], [[1, "a"], [2, "b"]]),
        ("result = [3, 1, 2]", ["value"], [[3], [1], [2]]),
        ("result = [{'k': 'a', 'v': 1}, {'k': 'b', 'v': 2}]", ["k", "v"], [["a", 1], ["b", 2]]),
        ("result = [[1, 2], [3, 4]]", ["column_1", "column_2"], [[1, 2], [3, 4]]),
        ("result = np.arange(3)", ["value"], [[0], [1], [2]]),
        (
            "result = pd.to_datetime(orders.order_date).head(1).tolist()",
            ["value"],
            [["2024-01-03T00:00:00"]],
        ),
        ("result = []", ["value"], []),
    ],
    ids=[
        "dataframe",
        "dataframe-filtered",
        "dataframe-named-index",
        "series-value-counts",
        "rows-with-columns",
        "rows-of-dicts",
        "scalar-int",
        "scalar-float",
        "scalar-nan",
        "scalar-str",
        "dict-of-scalars",
        "dict-of-columns",
        "list-of-values",
        "list-of-records",
        "list-of-rows",
        "numpy-array",
        "timestamps",
        "empty-list",
    ],
)
def test_results_become_tables(
    run_python: RunPython, code: str, columns: list[str], rows: list[list[Any]]
) -> None:
    response = ok(run_python(code))
    assert (response.columns, response.rows) == (columns, rows)
    assert response.row_count == len(rows) and response.total_rows == len(rows)
    assert response.truncated is False and response.limits_hit == []
    assert response.query_type is QueryType.PYTHON


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("x = 1", "the code set no result"),
        ("result = 1\nresult_df = orders", "the code set result_df and result"),
        ("result_columns = ['a']", "result_columns goes with result_rows"),
        ("result_rows = [(1, 2)]", "needs result_columns"),
        ("result_rows = [(1, 2)]\nresult_columns = ['a']", "has 2 values but result_columns"),
        ("result_rows = [1, 2]", "result_rows[0] is a int"),
        ("result_df = [1, 2]", "result_df must be a pandas DataFrame, not list"),
        ("result = np.zeros((2, 2, 2))", "3-dimensional array"),
    ],
    ids=[
        "none",
        "two",
        "columns-alone",
        "rows-without-columns",
        "row-width",
        "scalar-rows",
        "result-df-not-a-frame",
        "3d-array",
    ],
)
def test_unusable_results_are_execution_errors(
    run_python: RunPython, code: str, words: str
) -> None:
    response = run_python(code)
    assert response.error is not None, describe(response)
    assert response.error.type is ErrorCode.PYTHON_EXECUTION_ERROR
    assert words in response.error.message


def test_the_tables_are_globals_and_in_dfs(run_python: RunPython) -> None:
    response = ok(run_python("result = [sorted(dfs), orders is dfs['orders'], pd.__name__]"))
    assert response.rows == [[["customers", "orders", "products"]], [True], ["pandas"]]


def test_files_load_only_the_tables_asked_for(run_python: RunPython) -> None:
    assert ok(run_python("result = sorted(dfs)", files=["orders.csv"])).rows == [["orders"]]
    missing = run_python("result = len(customers)", files=["orders"])
    assert missing.error is not None and "NameError" in missing.error.message


def test_nothing_survives_from_one_request_to_the_next(run_python: RunPython) -> None:
    ok(run_python("leaked = 'secret'\nresult = 1"))
    second = run_python("result = leaked")
    assert second.error is not None and "NameError" in second.error.message


def test_an_exception_names_the_user_s_line_with_its_traceback(run_python: RunPython) -> None:
    response = run_python("print('before')\ntotal = len(orders)\nresult = total / 0")
    assert response.status is RunStatus.ERROR and response.error is not None
    assert response.error.type is ErrorCode.PYTHON_EXECUTION_ERROR
    assert response.error.line == 3
    assert response.error.message == "line 3: ZeroDivisionError: division by zero"
    assert response.stdout_trunc == "before\n"
    assert 'File "<code>", line 3' in response.stderr_trunc
    assert "<cell-" not in response.stderr_trunc


def test_print_output_comes_back(run_python: RunPython) -> None:
    response = ok(run_python("print('rows:', len(orders))\nresult = 1"))
    assert response.stdout_trunc == "rows: 30\n" and response.stderr_trunc == ""


# -- caps ------------------------------------------------------------------------------------


def test_max_rows_cuts_and_says_so(run_python: RunPython) -> None:
    response = ok(run_python("result_df = orders", max_rows=5))
    assert response.row_count == 5 and response.total_rows == 30
    assert response.rows[0][0] == 1001
    assert response.truncated is True and response.limits_hit == [LimitHit.MAX_ROWS]


def test_max_output_bytes_cuts_rows_and_says_so(run_python: RunPython) -> None:
    response = ok(run_python("result_df = customers", max_output_bytes=400))
    assert 0 < response.row_count < 12 and response.total_rows == 12
    assert response.limits_hit == [LimitHit.MAX_OUTPUT_BYTES] and response.truncated
    table = {"columns": response.columns, "rows": response.rows}
    assert len(json.dumps(table, separators=(",", ":")).encode()) <= 400


def test_stdout_is_cut_at_max_output_bytes(run_python: RunPython) -> None:
    response = ok(run_python("print('x' * 5000)\nresult = 1", max_output_bytes=1000))
    assert response.stdout_trunc.startswith("x" * 800)
    assert len(response.stdout_trunc.encode()) <= 1000  # the notice is inside the cap
    assert response.stdout_trunc.endswith(
        "[runner: stdout cut at max_output_bytes (1,000 bytes)]\n"
    )
    assert response.limits_hit == [LimitHit.STDOUT] and response.truncated
    assert response.rows == [[1]], "the table itself is whole"


# -- limits ----------------------------------------------------------------------------------


def test_an_infinite_loop_is_a_timeout(run_python: RunPython) -> None:
    response = run_python("while True:\n    pass", timeout_seconds=1)
    assert response.status is RunStatus.TIMEOUT, describe(response)
    assert response.error is not None and response.error.type is ErrorCode.RUNNER_TIMEOUT
    assert response.error.message == "the query took longer than timeout_seconds (1 s)"
    assert response.limits_hit == [LimitHit.TIMEOUT]


def test_running_out_of_memory_is_resource_exceeded(run_python: RunPython) -> None:
    response = run_python("blob = bytearray(2_000_000_000)\nresult = 1")
    assert response.error is not None, describe(response)
    assert response.error.type is ErrorCode.RUNNER_RESOURCE_EXCEEDED
    assert response.limits_hit == [LimitHit.MEMORY]


def test_running_out_of_fuel_is_resource_exceeded(settings: RunnerSettings) -> None:
    frugal = settings.model_copy(update={"fuel_per_second": 500_000_000})
    response = execute_python("retail", "while True:\n    pass", settings=frugal)
    assert response.error is not None, describe(response)
    assert response.error.type is ErrorCode.RUNNER_RESOURCE_EXCEEDED
    assert "instruction budget (5,000,000,000)" in response.error.message
    assert response.limits_hit == [LimitHit.FUEL]


# -- the feature flag -------------------------------------------------------------------------


def test_python_is_off_unless_enabled(settings_default_flag: RunnerSettings) -> None:
    assert settings_default_flag.enable_python_execution is False
    response = execute_python("retail", "result = 1", settings=settings_default_flag)
    assert response.error is not None
    assert response.error.type is ErrorCode.PYTHON_EXECUTION_DISABLED
    assert "set ENABLE_PYTHON_EXECUTION=1" in response.error.message
    sql = execute_sql("retail", "SELECT COUNT(*) AS n FROM orders", settings=settings_default_flag)
    assert ok(sql).rows == [[30]], "SQL needs no flag"


def test_the_flag_comes_from_the_environment() -> None:
    on = RunnerSettings.from_environment({"ENABLE_PYTHON_EXECUTION": "true"})
    off = RunnerSettings.from_environment({"ENABLE_PYTHON_EXECUTION": "0"})
    assert (on.enable_python_execution, off.enable_python_execution) == (True, False)
    assert RunnerSettings.from_environment({}).enable_python_execution is False
    with pytest.raises(RunnerConfigError, match="ENABLE_PYTHON_EXECUTION must be 1, true"):
        RunnerSettings.from_environment({"ENABLE_PYTHON_EXECUTION": "maybe"})


# -- charts ----------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_last_figure_drawn_comes_back_as_a_png(run_python: RunPython) -> None:
    response = ok(
        run_python(
            "import matplotlib.pyplot as plt\n"
            "counts = orders.groupby('customer_id').size()\n"
            "counts.plot.bar()\nresult_df = counts.reset_index(name='orders')"
        )
    )
    assert response.figure_png is not None and response.rows
    assert base64.b64decode(response.figure_png).startswith(PNG)


def test_result_figure_is_the_chart_even_alone(run_python: RunPython) -> None:
    response = ok(
        run_python(
            "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\n"
            "other, _ = plt.subplots()\nresult_figure = fig"
        )
    )
    assert response.columns == [] and response.rows == []
    assert base64.b64decode(response.figure_png or "").startswith(PNG)


def test_a_run_without_a_figure_has_none(run_python: RunPython) -> None:
    assert ok(run_python("result = 1")).figure_png is None


def test_result_figure_must_be_a_figure(run_python: RunPython) -> None:
    response = run_python("result_figure = '<svg onload=\"alert(1)\"></svg>'\nresult = 1")
    assert response.status is RunStatus.ERROR, describe(response)
    assert "result_figure must be a matplotlib Figure" in describe(response)


def test_a_chart_over_the_cap_is_left_out(settings: RunnerSettings) -> None:
    small = settings.model_copy(update={"max_figure_bytes": 100})
    response = ok(
        execute_python(
            "retail",
            "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nresult = 1",
            settings=small,
        )
    )
    assert response.figure_png is None and LimitHit.MAX_FIGURE_BYTES in response.limits_hit
