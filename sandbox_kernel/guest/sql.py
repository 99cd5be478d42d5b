"""Read-only SQL over DataFrames, inside the sandbox.

Runs INSIDE the sandbox's CPython as the module "sandbox_kernel_sql", after
"sandbox_kernel_tables" (the host loads both; see sandbox_kernel/runner/adapter.py). Unit
tests run it under host CPython 3.11 where pandas is not needed, so it uses no newer syntax.

The DataFrames a query names are copied into a private in-memory SQLite database; then the
database is locked down before the query is prepared: `PRAGMA query_only`, no attached
databases, and an authorizer that allows reading (SELECT, reading columns, functions,
recursive CTEs) and denies everything else, naming what it denied. The host has already
refused what it can see (runner/sql.py); this is the guard that holds if that check misses.

    run(namespace, sql, names, max_rows, max_bytes)   the runner: a JSON payload, never raises
    cell(namespace, sql, names, max_rows, out)        the kernel's %%sql: a DataFrame, or raises

Must import only the standard library at module level; never imports sandbox_kernel.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

__all__ = ["SqlError", "SqlExecutionError", "SqlPolicyViolation", "cell", "query", "run"]

_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
# Authorizer action codes by name (they overlap SQLite's result codes, so no reverse lookup).
_ACTION_NAMES = {
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ")
    for name in (
        "INSERT",
        "UPDATE",
        "DELETE",
        "CREATE_TABLE",
        "CREATE_INDEX",
        "CREATE_VIEW",
        "CREATE_TRIGGER",
        "CREATE_TEMP_TABLE",
        "CREATE_TEMP_INDEX",
        "CREATE_TEMP_VIEW",
        "CREATE_TEMP_TRIGGER",
        "CREATE_VTABLE",
        "DROP_TABLE",
        "DROP_INDEX",
        "DROP_VIEW",
        "DROP_TRIGGER",
        "DROP_VTABLE",
        "ALTER_TABLE",
        "ATTACH",
        "DETACH",
        "PRAGMA",
        "TRANSACTION",
        "ANALYZE",
        "REINDEX",
        "SAVEPOINT",
    )
    if hasattr(sqlite3, f"SQLITE_{name}")
}


class SqlError(Exception):
    """A query that did not run; `code` is the runner's error type."""

    code = "SQL_EXECUTION_ERROR"


class SqlExecutionError(SqlError):
    """SQLite refused the query: a syntax error, an unknown table or column."""


class SqlPolicyViolation(SqlError):
    """The query tried to write, attach or configure: queries are read-only."""

    code = "SQL_POLICY_VIOLATION"


def frames_in(namespace: dict[str, Any]) -> dict[str, Any]:
    """The DataFrames bound in `namespace` under names SQL can use (no leading '_')."""
    pandas = sys.modules.get("pandas")
    if pandas is None:
        return {}
    return {
        name: value
        for name, value in namespace.items()
        if isinstance(value, pandas.DataFrame) and name.isidentifier() and not name.startswith("_")
    }


def query(
    namespace: dict[str, Any], sql: str, names: list[str], max_rows: int
) -> tuple[list[str], list[tuple[Any, ...]], bool]:
    """Run `sql` over the frames of `namespace` it names (`names`: the identifiers the host
    found in it, lower-cased): (columns, at most max_rows rows, whether more rows exist)."""
    frames = frames_in(namespace)
    wanted = set(names)
    connection = sqlite3.connect(":memory:")
    try:
        for name, frame in frames.items():
            if name.lower() in wanted:
                _copy(connection, name, frame)
        denied: list[str] = []
        _lock_down(connection, denied)
        try:
            cursor = connection.execute(sql)
            columns = [d[0] for d in cursor.description or ()]
            rows = cursor.fetchmany(max_rows + 1)
        except sqlite3.Error as exc:
            if denied:
                raise SqlPolicyViolation(
                    f"{denied[0]} is not allowed: queries are read-only"
                ) from None
            raise SqlExecutionError(_explain(exc, frames)) from None
    finally:
        connection.close()
    return columns, rows[:max_rows], len(rows) > max_rows


def _copy(connection: sqlite3.Connection, name: str, frame: Any) -> None:
    keep_index = any(n is not None for n in frame.index.names)
    try:
        frame.to_sql(name, connection, index=keep_index)
    except Exception as exc:  # duplicate or odd column names, unsupported values
        raise SqlExecutionError(
            f"the DataFrame {name!r} cannot be copied into SQLite: {type(exc).__name__}: {exc}"
        ) from None


def _lock_down(connection: sqlite3.Connection, denied: list[str]) -> None:
    connection.execute("PRAGMA query_only = ON")
    connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)

    def authorize(action: int, arg1: Any, arg2: Any, database: Any, trigger: Any) -> int:
        if action in _ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        if isinstance(arg1, str) and arg1.startswith("sqlite_"):  # DROP deletes from these
            denied.append("changing the database schema")
        else:
            denied.append(_ACTION_NAMES.get(action, f"action {action}"))
        return sqlite3.SQLITE_DENY

    connection.set_authorizer(authorize)


def _explain(exc: sqlite3.Error, frames: dict[str, Any]) -> str:
    message = str(exc)
    if message.startswith("no such table"):
        tables = ", ".join(sorted(frames)) or "none"
        message += f" (tables: {tables})"
    return message


def run(
    namespace: dict[str, Any], sql: str, names: list[str], max_rows: int, max_bytes: int
) -> str:
    """The runner's SQL step: the query's table as the host's JSON payload (never raises)."""
    tables = sys.modules["sandbox_kernel_tables"]
    try:
        columns, rows, more = query(namespace, sql, names, max_rows)
    except SqlError as exc:
        return str(tables.dumps(tables.failure(exc.code, str(exc))))
    total = None if more else len(rows)
    payload = tables.table_payload(columns, rows, total, max_rows, max_bytes, "sql", more)
    return str(tables.dumps(payload))


def cell(
    namespace: dict[str, Any], sql: str, names: list[str], max_rows: int, out: str = ""
) -> Any:
    """The kernel's %%sql: the result as a DataFrame (bound to `out` when given)."""
    import pandas

    columns, rows, more = query(namespace, sql, names, max_rows)
    frame = pandas.DataFrame.from_records(rows, columns=columns)
    if more:
        print(
            f"[sql] showing the first {max_rows:,} rows; use %%sql --max-rows N for more",
            file=sys.stderr,
        )
    if out:
        namespace[out] = frame
    return frame
