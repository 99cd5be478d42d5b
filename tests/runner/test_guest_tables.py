"""The guest's table module under host CPython (no WebAssembly): the caps and value
conversions that need no pandas, at their edges. The same module runs in the sandbox in every
other runner test."""

from __future__ import annotations

import datetime
import decimal
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

TABLES_PATH = Path(__file__).parents[2] / "sandbox_kernel" / "guest" / "tables.py"


@pytest.fixture(scope="module")
def tables() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("sandbox_kernel_tables", TABLES_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def _size(columns: list[str], rows: list[list[Any]]) -> int:
    table = {"columns": columns, "rows": rows}
    return len(json.dumps(table, ensure_ascii=False, separators=(",", ":")).encode())


@pytest.mark.parametrize("extra", [0, 1, -1], ids=["exact", "one-more", "one-less"])
def test_the_byte_cap_is_exact(tables: types.ModuleType, extra: int) -> None:
    rows = [["é" * 10, i] for i in range(5)]
    fits = _size(["a", "b"], rows[:3])
    payload = tables.table_payload(["a", "b"], rows, 5, 100, fits + extra, "result")
    kept = 3 if extra >= 0 else 2
    assert len(payload["rows"]) == kept
    assert payload["cut"] == ["max_output_bytes"]
    assert _size(["a", "b"], payload["rows"]) <= fits + extra


def test_the_row_cap_and_the_total(tables: types.ModuleType) -> None:
    rows = ([i] for i in range(10))  # a generator: the total is unknown until the end
    cut = tables.table_payload(["n"], rows, None, 4, 10_000, "result")
    assert cut["rows"] == [[0], [1], [2], [3]] and cut["cut"] == ["max_rows"]
    assert cut["total_rows"] is None
    whole = tables.table_payload(["n"], ([i] for i in range(3)), None, 4, 10_000, "result")
    assert whole["total_rows"] == 3 and whole["cut"] == []
    known = tables.table_payload(["n"], [[1]], 1, 4, 10_000, "sql", more_rows=True)
    assert known["cut"] == ["max_rows"]


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        (float("nan"), None),
        (float("inf"), None),
        (decimal.Decimal("1.5"), 1.5),
        (decimal.Decimal("NaN"), None),
        (datetime.date(2024, 3, 1), "2024-03-01"),
        (datetime.datetime(2024, 3, 1, 12, 30), "2024-03-01T12:30:00"),
        (datetime.timedelta(hours=2), "2:00:00"),
        (b"caf\xc3\xa9", "café"),
        ((1, [2, {"k": 3}]), [1, [2, {"k": 3}]]),
        ([[[[["deep"]]]]], [[["[['deep']]"]]]),  # three levels kept
        ({1: "a"}, {"1": "a"}),
        (object, "<class 'object'>"),
    ],
    ids=[
        "nan",
        "inf",
        "decimal",
        "decimal-nan",
        "date",
        "datetime",
        "timedelta",
        "bytes",
        "nested",
        "too-deep",
        "non-str-key",
        "other",
    ],
)
def test_cell_values_become_json(tables: types.ModuleType, value: Any, plain: Any) -> None:
    converted = tables.cell_value(value)
    assert converted == plain
    json.dumps(converted, allow_nan=False)


def test_collect_never_raises(tables: types.ModuleType) -> None:
    class Broken:
        def __iter__(self) -> Any:
            raise RuntimeError("boom")

    payload = json.loads(tables.collect({"result_rows": Broken()}, 10, 1000))
    assert payload == {
        "ok": False,
        "code": "PYTHON_EXECUTION_ERROR",
        "message": "the result cannot be read: RuntimeError: boom",
    }


def test_record_keys_become_str_columns(tables: types.ModuleType) -> None:
    payload = json.loads(tables.collect({"result_rows": [{1: "a", (2, 3): "b"}]}, 10, 1000))
    assert payload["columns"] == ["1", "2_3"] and payload["rows"] == [["a", "b"]]
    listed = json.loads(tables.collect({"result": [{None: 1}]}, 10, 1000))
    assert listed["columns"] == ["None"] and listed["rows"] == [[1]]
