"""SQL requests in the real sandbox: results, caps, errors, timeouts, and the authorizer.

The host refuses writes before a sandbox starts (test_sql_check.py); here the in-sandbox
guard is tested on its own, by sending refused statements straight to the guest.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_kernel.runner import (
    DatasetRegistry,
    ErrorCode,
    LimitHit,
    QueryType,
    RunnerRequest,
    RunnerSettings,
    RunStatus,
    check_sql,
)
from sandbox_kernel.runner.adapter import FailurePayload, TablePayload
from sandbox_kernel.runner.engine import SandboxRun
from tests.runner.conftest import RunSql, describe, ok


def test_a_query_returns_columns_and_rows(run_sql: RunSql) -> None:
    response = ok(run_sql("SELECT product_id, unit_price FROM products ORDER BY unit_price DESC"))
    assert response.columns == ["product_id", "unit_price"]
    assert response.rows[0] == ["P04", 72.0] and response.row_count == 10
    assert response.total_rows == 10 and response.query_type is QueryType.SQL


def test_missing_values_are_null(run_sql: RunSql) -> None:
    sql = "SELECT station_id, date FROM daily WHERE precipitation_mm IS NULL"
    assert ok(run_sql(sql, dataset="weather")).rows == [["REY", "2024-03-04"]]


def test_table_names_are_case_insensitive_and_may_be_quoted(run_sql: RunSql) -> None:
    response = ok(run_sql('SELECT COUNT(*) AS n FROM "Orders" JOIN CUSTOMERS USING (customer_id)'))
    assert response.rows == [[30]]


def test_max_rows_cuts_and_says_so(run_sql: RunSql) -> None:
    response = ok(run_sql("SELECT order_id FROM orders ORDER BY order_id", max_rows=3))
    assert response.rows == [[1001], [1002], [1003]]
    assert response.total_rows is None, "a cursor does not know how many more there were"
    assert response.limits_hit == [LimitHit.MAX_ROWS] and response.truncated


def test_max_output_bytes_cuts_and_says_so(run_sql: RunSql) -> None:
    response = ok(run_sql("SELECT * FROM customers", max_output_bytes=300))
    assert 0 < response.row_count < 12
    assert response.limits_hit == [LimitHit.MAX_OUTPUT_BYTES]


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELECT * FROM refunds", "no such table: refunds (tables: customers, orders, products)"),
        ("SELECT nope FROM orders", "no such column: nope"),
        ("SELECT FROM orders", "syntax error"),
    ],
    ids=["unknown-table", "unknown-column", "syntax"],
)
def test_sqlite_errors_are_sql_execution_errors(run_sql: RunSql, sql: str, words: str) -> None:
    response = run_sql(sql)
    assert response.error is not None, describe(response)
    assert response.error.type is ErrorCode.SQL_EXECUTION_ERROR
    assert words in response.error.message


def test_writes_are_refused_before_any_sandbox_starts(run_sql: RunSql) -> None:
    response = run_sql("WITH t AS (SELECT 1)\nDELETE FROM orders")
    assert response.error is not None and response.error.type is ErrorCode.SQL_POLICY_VIOLATION
    assert response.error.message == "line 2: DELETE is not allowed: queries are read-only"
    assert response.error.line == 2


def test_a_runaway_query_is_a_timeout(run_sql: RunSql) -> None:
    sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n"
    response = run_sql(sql, timeout_seconds=1)
    assert response.status is RunStatus.TIMEOUT, describe(response)
    assert response.error is not None and response.error.type is ErrorCode.RUNNER_TIMEOUT


# -- the in-sandbox guard --------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox_run(settings: RunnerSettings) -> Iterator[SandboxRun]:
    """One session with the retail tables loaded, for statements sent without the host check."""
    request = RunnerRequest(query_type="sql", dataset_id="retail", sql="SELECT 1")
    dataset = DatasetRegistry.load(settings.datasets).get("retail")
    with SandboxRun(settings, request, dataset) as run:
        run.load(dataset.tables())
        yield run


@pytest.mark.parametrize(
    ("sql", "denied"),
    [
        ("DELETE FROM orders", "DELETE"),
        ("INSERT INTO orders (order_id) VALUES (1)", "INSERT"),
        ("UPDATE orders SET quantity = 0", "UPDATE"),
        ("DROP TABLE orders", "changing the database schema"),
        ("CREATE TEMP TABLE t (a)", "changing the database schema"),
        ("ATTACH DATABASE '/app/x.db' AS x", "ATTACH"),
        ("PRAGMA table_info(orders)", "PRAGMA"),
        ("WITH t AS (SELECT 1) DELETE FROM orders", "DELETE"),
    ],
    ids=["delete", "insert", "update", "drop", "create-temp", "attach", "pragma", "cte-delete"],
)
def test_the_authorizer_refuses_writes_inside_the_sandbox(
    sandbox_run: SandboxRun, sql: str, denied: str
) -> None:
    payload = sandbox_run.sql(sql, check_sql(sql).identifiers)
    assert isinstance(payload, FailurePayload), payload
    assert payload.code == "SQL_POLICY_VIOLATION"
    assert payload.message == f"{denied} is not allowed: queries are read-only"


def test_the_data_is_intact_after_the_refused_writes(sandbox_run: SandboxRun) -> None:
    payload = sandbox_run.sql("SELECT COUNT(*), SUM(quantity) FROM orders", ["orders"])
    assert isinstance(payload, TablePayload) and payload.rows == [[30, 91]]
