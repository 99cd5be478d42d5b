"""Tables inside the sandbox: CSV files as DataFrames, and a result as columns and rows.

Runs INSIDE the sandbox's CPython as the module "sandbox_kernel_tables"; the host
(sandbox_kernel/runner/adapter.py) execs this source into it and calls it from cells it
writes itself. Unit tests run the parts that need no pandas under host CPython 3.11, so it
uses no newer syntax.

    load(namespace, tables)    read each CSV into a DataFrame; bind `dfs` (name -> frame), one
                               global per table, and `pd` and `np` unless already bound
    collect(namespace, ...)    the one result the code set (result_df, result_rows with
                               result_columns, or result) as a JSON payload for the host, with
                               a chart: result_figure, or else the last figure drawn, as PNG
    table_payload(...)         columns and rows as that payload, cut at max_rows and at
                               max_bytes of JSON, the cut reported in "cut"

The payload is a JSON text: {"ok": true, "columns", "rows", "total_rows", "cut", "source",
"figure_png"} or {"ok": false, "code", "message"}. The host checks it again (a chart must be a
PNG within its cap); nothing here is trusted.

Must import only the standard library at module level (pandas and numpy are found in
sys.modules); never imports sandbox_kernel.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import sys
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = [
    "RESULT_NAMES",
    "LoadError",
    "ResultError",
    "cell_value",
    "collect",
    "dumps",
    "failure",
    "figure_png",
    "load",
    "table_payload",
    "to_table",
]

RESULT_NAMES = ("result_df", "result_rows", "result")
_MAX_DEPTH = 3  # nested lists and dicts in a cell; deeper ones become their str()
_COMPACT = (",", ":")


class LoadError(Exception):
    """A table could not be read from its CSV file."""


class ResultError(Exception):
    """The code's result cannot be turned into a table; the message says how to fix it."""


# -- loading -------------------------------------------------------------------------------


def load(namespace: dict[str, Any], tables: dict[str, str], announce: str = "") -> None:
    """Read each table's CSV file (name -> guest path) and bind the frames in `namespace`.

    `dfs` gains the new tables (a dict already bound there is kept and updated). With
    `announce` (a dataset id), print one line per table: name, rows, columns.
    """
    import numpy
    import pandas

    frames = {}
    for name, path in tables.items():
        try:
            frames[name] = pandas.read_csv(path)
        except Exception as exc:  # any parser failure is the dataset's, reported by table
            file = path.rsplit("/", 1)[-1]
            raise LoadError(f"table {name!r} ({file}): {type(exc).__name__}: {exc}") from None
    dfs = namespace.get("dfs")
    if not isinstance(dfs, dict):
        dfs = {}
    dfs.update(frames)
    namespace["dfs"] = dfs
    namespace.update(frames)
    namespace.setdefault("pd", pandas)
    namespace.setdefault("np", numpy)
    if announce:
        print(f"dataset {announce!r}: {len(frames)} tables, also in dfs")
        for name, frame in frames.items():
            rows, columns = frame.shape
            names = ", ".join(map(str, frame.columns))
            print(f"  {name}: {rows:,} rows x {columns} columns ({names})")


# -- results -------------------------------------------------------------------------------


def collect(namespace: dict[str, Any], max_rows: int, max_bytes: int) -> str:
    """The result the code set, as the host's JSON payload (never raises)."""
    try:
        present = [name for name in RESULT_NAMES if name in namespace]
        if "result_columns" in namespace and "result_rows" not in namespace:
            raise ResultError("result_columns goes with result_rows, which the code did not set")
        if not present and _figure(namespace) is not None:  # a chart alone: an empty table
            namespace = {**namespace, "result_rows": [], "result_columns": []}
            present = ["result_rows"]
        if not present:
            raise ResultError(
                "the code set no result: set result_df (a DataFrame), result_rows (a list of "
                "rows, with result_columns), or result (any value)"
            )
        if len(present) > 1:
            raise ResultError(
                f"the code set {' and '.join(present)}: set exactly one of "
                "result_df, result_rows or result"
            )
        source = present[0]
        columns, rows, total = to_table(source, namespace[source], namespace.get("result_columns"))
        payload = table_payload(columns, rows, total, max_rows, max_bytes, source)
        payload["figure_png"] = figure_png(namespace)
        return dumps(payload)
    except ResultError as exc:
        return dumps(failure("PYTHON_EXECUTION_ERROR", str(exc)))
    except Exception as exc:  # a broken __repr__ or __iter__ in user data: the code's error
        message = f"the result cannot be read: {type(exc).__name__}: {exc}"
        return dumps(failure("PYTHON_EXECUTION_ERROR", message))


def _figure(namespace: dict[str, Any]) -> Any:
    """The chart of the run: result_figure, or else the last figure pyplot drew, or None."""
    if "result_figure" in namespace:
        figure = namespace["result_figure"]
        if not callable(getattr(figure, "savefig", None)):
            raise ResultError(
                f"result_figure must be a matplotlib Figure, not {type(figure).__name__}"
            )
        return figure
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None or not pyplot.get_fignums():
        return None
    return pyplot.figure(pyplot.get_fignums()[-1])


def figure_png(namespace: dict[str, Any]) -> str | None:
    """The run's chart as base64 PNG text, or None when it drew none."""
    figure = _figure(namespace)
    if figure is None:
        return None
    import base64
    import io

    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(out.getvalue()).decode("ascii")


def failure(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "code": code, "message": message}


def to_table(source: str, value: Any, columns: Any = None) -> tuple[list[str], Iterable[Any], Any]:
    """(columns, rows, total rows or None) for the value of result_df, result_rows or result."""
    pandas = sys.modules.get("pandas")
    is_frame = pandas is not None and isinstance(value, (pandas.DataFrame, pandas.Series))
    if source == "result_df":
        if not is_frame:
            raise ResultError(f"result_df must be a pandas DataFrame, not {type(value).__name__}")
        return _frame(value)
    if source == "result_rows":
        return _rows(value, columns)
    return _anything(value)


def _frame(frame: Any) -> tuple[list[str], Iterable[Any], int]:
    """A DataFrame's columns and rows; a named index (groupby, set_index) becomes columns."""
    pandas = sys.modules["pandas"]
    if isinstance(frame, pandas.Series):
        frame = frame.to_frame(name="value" if frame.name is None else frame.name)
    if any(name is not None for name in frame.index.names):
        frame = frame.reset_index(allow_duplicates=True)
    columns = [_column_name(c) for c in frame.columns]
    return columns, frame.itertuples(index=False, name=None), len(frame)


def _column_name(column: Any) -> str:
    if isinstance(column, tuple):  # a MultiIndex column: ("revenue", "sum") -> revenue_sum
        return "_".join(str(part) for part in column if str(part) != "")
    return str(column)


def _rows(rows: Any, columns: Any) -> tuple[list[str], Iterable[Any], int]:
    pandas, numpy = sys.modules.get("pandas"), sys.modules.get("numpy")
    if pandas is not None and isinstance(rows, pandas.DataFrame):
        return _frame(rows)
    if numpy is not None and isinstance(rows, numpy.ndarray):
        rows = rows.tolist()
    if isinstance(rows, (str, bytes, dict)) or not isinstance(rows, Iterable):
        raise ResultError(f"result_rows must be a list of rows, not {type(rows).__name__}")
    rows = list(rows)
    names = None if columns is None else _column_list(columns)
    if rows and all(isinstance(row, dict) for row in rows):
        keys = names if names is not None else _keys(rows)
        return [_column_name(k) for k in keys], ([r.get(k) for k in keys] for r in rows), len(rows)
    for i, row in enumerate(rows):
        if not isinstance(row, (list, tuple)):
            raise ResultError(
                f"result_rows[{i}] is a {type(row).__name__}: each row is a list, a tuple or a dict"
            )
    if names is None:
        if rows:
            raise ResultError("result_rows of lists or tuples needs result_columns (their names)")
        names = []
    for i, row in enumerate(rows):
        if len(row) != len(names):
            raise ResultError(
                f"result_rows[{i}] has {len(row)} values but result_columns names {len(names)}"
            )
    return names, rows, len(rows)


def _column_list(columns: Any) -> list[str]:
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Iterable):
        raise ResultError(f"result_columns must be a list of names, not {type(columns).__name__}")
    return [_column_name(c) for c in columns]


def _keys(records: list[dict[Any, Any]]) -> list[Any]:
    """The keys of all records, in the order they first appear."""
    keys: dict[Any, None] = {}
    for record in records:
        keys.update(dict.fromkeys(record))
    return list(keys)


def _anything(value: Any) -> tuple[list[str], Iterable[Any], int]:
    """`result`: a frame, an array, a dict, a list, or a scalar, each as a natural table."""
    pandas, numpy = sys.modules.get("pandas"), sys.modules.get("numpy")
    if pandas is not None and isinstance(value, (pandas.DataFrame, pandas.Series)):
        return _frame(value)
    if numpy is not None and isinstance(value, numpy.ndarray):
        if value.ndim == 1:
            return ["value"], ([item] for item in value.tolist()), len(value)
        if value.ndim == 2:
            names = [f"column_{i + 1}" for i in range(value.shape[1])]
            return names, value.tolist(), len(value)
        if value.ndim > 2:
            raise ResultError(f"result is a {value.ndim}-dimensional array: at most 2 fit a table")
        value = value.item()
    if isinstance(value, dict):
        return _mapping(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else list(value)
        return _sequence(items)
    return ["result"], [[value]], 1


def _is_column(value: Any) -> bool:
    pandas, numpy = sys.modules.get("pandas"), sys.modules.get("numpy")
    if isinstance(value, (list, tuple)):
        return True
    if numpy is not None and isinstance(value, numpy.ndarray):
        return bool(value.ndim == 1)
    return pandas is not None and isinstance(value, pandas.Series)


def _mapping(value: dict[Any, Any]) -> tuple[list[str], Iterable[Any], int]:
    """Equal-length lists as columns ({"a": [1, 2]}); anything else as one row."""
    names = [_column_name(key) for key in value]
    values = list(value.values())
    if values and all(_is_column(v) for v in values) and len({len(v) for v in values}) == 1:
        columns = [list(v) for v in values]
        return names, (list(row) for row in zip(*columns, strict=True)), len(columns[0])
    return names, ([values] if values else []), 1 if values else 0


def _sequence(items: list[Any]) -> tuple[list[str], Iterable[Any], int]:
    """Records ([{"a": 1}]), rows ([[1, 2]]) or values ([1, 2]) as a table."""
    if items and all(isinstance(item, dict) for item in items):
        names = _keys(items)
        return (
            [_column_name(n) for n in names],
            ([r.get(n) for n in names] for r in items),
            len(items),
        )
    if items and all(isinstance(item, (list, tuple)) for item in items):
        widths = {len(item) for item in items}
        if len(widths) != 1:
            raise ResultError("result is a list of rows of different lengths")
        names = [f"column_{i + 1}" for i in range(widths.pop())]
        return names, items, len(items)
    return ["value"], ([item] for item in items), len(items)


# -- caps and cells ------------------------------------------------------------------------


def table_payload(
    columns: list[str],
    rows: Iterable[Any],
    total: int | None,
    max_rows: int,
    max_bytes: int,
    source: str,
    more_rows: bool = False,
) -> dict[str, Any]:
    """The payload for a table: at most `max_rows` rows and `max_bytes` bytes of JSON
    (columns and rows, compact); what was cut is named in "cut", never dropped silently.
    `more_rows`: `rows` was already cut at max_rows by the caller (a SQL cursor)."""
    kept: list[list[Any]] = []
    cut: list[str] = []
    size = len(dumps({"columns": columns, "rows": []}).encode("utf-8"))
    seen = 0
    iterator: Iterator[Any] = iter(rows)
    for row in iterator:
        seen += 1
        if len(kept) >= max_rows:
            cut.append("max_rows")
            break
        values = [cell_value(v) for v in row]
        row_bytes = len(dumps(values).encode("utf-8")) + (1 if kept else 0)
        if size + row_bytes > max_bytes:
            cut.append("max_output_bytes")
            break
        size += row_bytes
        kept.append(values)
    if more_rows and not cut:
        cut.append("max_rows")
    if total is None and not cut:
        total = seen
    return {
        "ok": True,
        "columns": columns,
        "rows": kept,
        "total_rows": total,
        "cut": cut,
        "source": source,
    }


def cell_value(value: Any, depth: int = 0) -> Any:
    """One value as JSON data: NaN, NaT and NA as None, dates as ISO text, numpy scalars as
    Python numbers, nested containers kept (a few levels deep), anything else as str()."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, (numpy.datetime64, numpy.timedelta64)):
        return None if numpy.isnat(value) else str(value)
    if numpy is not None and isinstance(value, numpy.generic):
        return cell_value(value.item(), depth)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return None if _is_missing(value) else value.isoformat()
    if isinstance(value, datetime.timedelta):
        return None if _is_missing(value) else str(value)
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
        return [cell_value(v, depth + 1) for v in value]
    if depth < _MAX_DEPTH and isinstance(value, dict):
        return {_column_name(k): cell_value(v, depth + 1) for k, v in value.items()}
    if _is_missing(value):
        return None
    return str(value)


def _is_missing(value: Any) -> bool:
    """pandas' NA and NaT (also datetime subclasses), without pandas when it is not loaded."""
    pandas = sys.modules.get("pandas")
    if pandas is None:
        return False
    try:
        return value is pandas.NA or value is pandas.NaT or bool(pandas.isna(value) is True)
    except (TypeError, ValueError):
        return False


def dumps(value: Any) -> str:
    """Compact JSON, the payload's format."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=_COMPACT)
