"""The host's SQL statement check: one read-only statement, and the names it mentions."""

from __future__ import annotations

import pytest

from sandbox_kernel.runner import check_sql


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1",
        "select * from orders;",
        "WITH t AS (SELECT 1 AS x) SELECT x FROM t",
        "VALUES (1, 2)",
        "SELECT replace(name, 'a', 'b') FROM customers",
        "SELECT 'DROP TABLE orders; DELETE' AS text",
        'SELECT "update" FROM "insert"',
        "SELECT 1 -- ; DROP TABLE orders",
        "SELECT 1 /* ; DELETE FROM orders */",
        "  \n-- a comment first\nSELECT 1\n;\n",
    ],
    ids=[
        "select",
        "trailing-semicolon",
        "cte",
        "values",
        "replace-function",
        "keywords-in-a-string",
        "quoted-identifiers",
        "line-comment",
        "block-comment",
        "comment-first",
    ],
)
def test_read_only_queries_pass(sql: str) -> None:
    check = check_sql(sql)
    assert check.allowed, check.violation


@pytest.mark.parametrize(
    ("sql", "line", "words"),
    [
        ("DELETE FROM orders", 1, "not 'DELETE'"),
        ("INSERT INTO orders VALUES (1)", 1, "not 'INSERT'"),
        ("UPDATE orders SET quantity = 0", 1, "not 'UPDATE'"),
        ("DROP TABLE orders", 1, "not 'DROP'"),
        ("ATTACH DATABASE '/etc/passwd' AS p", 1, "not 'ATTACH'"),
        ("PRAGMA table_info(orders)", 1, "not 'PRAGMA'"),
        ("VACUUM INTO '/app/copy.db'", 1, "not 'VACUUM'"),
        ("CREATE TABLE x (a)", 1, "not 'CREATE'"),
        ("WITH t AS (SELECT 1)\nDELETE FROM orders", 2, "DELETE is not allowed"),
        ("WITH t AS (SELECT 1)\nINSERT INTO orders SELECT * FROM t", 2, "INSERT is not allowed"),
        ("SELECT 1;\nSELECT 2", 2, "one statement per query, found 2"),
        ("SELECT 1; DROP TABLE orders", 1, "one statement per query"),
        ("-- nothing", 1, "holds no SQL statement"),
        ("EXPLAIN SELECT 1", 1, "not 'EXPLAIN'"),
    ],
    ids=[
        "delete",
        "insert",
        "update",
        "drop",
        "attach",
        "pragma",
        "vacuum-into",
        "create",
        "cte-delete",
        "cte-insert",
        "two-statements",
        "stacked-drop",
        "only-a-comment",
        "explain",
    ],
)
def test_anything_else_is_refused_naming_the_line(sql: str, line: int, words: str) -> None:
    check = check_sql(sql)
    assert check.violation is not None and words in check.violation, check.violation
    assert check.line == line


def test_the_names_a_query_mentions_are_listed_lower_case() -> None:
    check = check_sql('SELECT o.Quantity FROM Orders o JOIN "Customers" USING (customer_id)')
    assert {"orders", "customers", "quantity", "customer_id"} <= set(check.identifiers)
    assert "'" not in "".join(check.identifiers)
