"""The host's half of the guest table modules (guest/tables.py, guest/sql.py).

Writes the cells that install the modules in a session, load a dataset's tables, collect a
Python result or run a SQL query; and reads what comes back. Nothing from the guest is
trusted: the payload is validated, and the row and byte caps are applied again here, so a
guest that lies about them (the code runs in the same interpreter) still cannot pass them.

The kernel's %dataset and %%sql use the same cells.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError

from sandbox_kernel.repl.guest_sources import loader_source
from sandbox_kernel.runner.models import LimitHit

__all__ = [
    "RESULT_VARIABLE",
    "FailurePayload",
    "PayloadError",
    "TablePayload",
    "cap_stream",
    "collect_cell",
    "dataset_cell",
    "fit_rows",
    "install_code",
    "load_cell",
    "read_payload",
    "sql_cell",
    "sql_magic_cell",
]

TABLES_MODULE: Final = "sandbox_kernel_tables"
SQL_MODULE: Final = "sandbox_kernel_sql"
GUEST_MODULES: Final = ((TABLES_MODULE, "tables.py"), (SQL_MODULE, "sql.py"))
RESULT_VARIABLE: Final = "__sandbox_kernel_result__"
_COMPACT: Final = (",", ":")


class PayloadError(ValueError):
    """The guest's answer is missing or malformed."""


def install_code() -> str:
    """Python that loads the guest table modules into the session, once."""
    return loader_source(GUEST_MODULES)


def _module(name: str) -> str:
    return f"__import__('sys').modules[{name!r}]"


def load_cell(tables: Mapping[str, str]) -> str:
    """Install the modules and load `tables` (name -> guest path) into the session."""
    call = f"{_module(TABLES_MODULE)}.load(globals(), {dict(tables)!r})"
    return f"{install_code()}{call}\n"


def dataset_cell(tables: Mapping[str, str], dataset_id: str) -> str:
    """The kernel's %dataset: as load_cell, printing what was loaded."""
    call = f"{_module(TABLES_MODULE)}.load(globals(), {dict(tables)!r}, {dataset_id!r})"
    return f"{install_code()}{call}\n"


def collect_cell(max_rows: int, max_bytes: int) -> str:
    """Put the code's result, as a JSON payload, in RESULT_VARIABLE."""
    call = f"{_module(TABLES_MODULE)}.collect(globals(), {int(max_rows)}, {int(max_bytes)})"
    return f"{RESULT_VARIABLE} = {call}\n"


def sql_cell(sql: str, names: Sequence[str], max_rows: int, max_bytes: int) -> str:
    """Run `sql` over the session's frames; its JSON payload in RESULT_VARIABLE."""
    arguments = f"globals(), {sql!r}, {list(names)!r}, {int(max_rows)}, {int(max_bytes)}"
    return f"{install_code()}{RESULT_VARIABLE} = {_module(SQL_MODULE)}.run({arguments})\n"


def sql_magic_cell(sql: str, names: Sequence[str], max_rows: int, out: str = "") -> str:
    """The kernel's %%sql: the result DataFrame is the cell's value (shown as a table)."""
    arguments = f"globals(), {sql!r}, {list(names)!r}, {int(max_rows)}, {out!r}"
    return f"{install_code()}{_module(SQL_MODULE)}.cell({arguments})\n"


class TablePayload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: Literal[True]
    columns: list[str]
    rows: list[list[JsonValue]]
    total_rows: Annotated[int, Field(ge=0)] | None
    cut: list[Literal["max_rows", "max_output_bytes"]]
    source: str
    figure_png: str | None = None  # base64; api.py checks it is a PNG within the cap


class FailurePayload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: Literal[False]
    code: Literal["PYTHON_EXECUTION_ERROR", "SQL_EXECUTION_ERROR", "SQL_POLICY_VIOLATION"]
    message: str


_PAYLOAD: Final = TypeAdapter[TablePayload | FailurePayload](TablePayload | FailurePayload)


def read_payload(raw: object) -> TablePayload | FailurePayload:
    """The guest's payload, validated.

    Raises:
        PayloadError: there is none, or it is not what the guest modules write.
    """
    if not isinstance(raw, str):
        raise PayloadError("the sandbox returned no result payload")
    try:
        return _PAYLOAD.validate_json(raw)
    except ValidationError:
        raise PayloadError("the sandbox returned a malformed result payload") from None


def fit_rows(
    columns: list[str], rows: list[list[JsonValue]], max_rows: int, max_bytes: int
) -> tuple[list[list[JsonValue]], list[LimitHit]]:
    """`rows` cut at `max_rows` and at `max_bytes` of compact JSON (with the columns)."""
    hits: list[LimitHit] = []
    if len(rows) > max_rows:
        rows, hits = rows[:max_rows], [LimitHit.MAX_ROWS]
    size = len(_dumps({"columns": columns, "rows": []}))
    for i, row in enumerate(rows):
        size += len(_dumps(row)) + (1 if i else 0)
        if size > max_bytes:
            return rows[:i], [*hits, LimitHit.MAX_OUTPUT_BYTES]
    return rows, hits


def cap_stream(text: str, max_bytes: int, name: str) -> tuple[str, bool]:
    """`text` cut to at most `max_bytes` (UTF-8), its notice included; whether it was cut. A
    stream the sandbox already cut (its own notice at the end) gets the runner's notice."""
    sandbox_cut = _SANDBOX_NOTICE.search(text)
    if sandbox_cut is not None:
        text = text[: sandbox_cut.start()]
    data = text.encode("utf-8")
    if len(data) <= max_bytes and sandbox_cut is None:
        return text, False
    notice = f"[runner: {name} cut at max_output_bytes ({max_bytes:,} bytes)]\n"
    if len(notice) >= max_bytes:
        return notice[:max_bytes], True
    kept = data[: max_bytes - len(notice) - 1].decode("utf-8", "ignore")
    if kept and not kept.endswith("\n"):
        kept += "\n"
    return kept + notice, True


# The end of a stream the sandbox cut (host/output.py's notice, either form).
_SANDBOX_NOTICE = re.compile(
    r"\n?\[sandbox: (?:[\d,]+ bytes of \w+ omitted;[^\n]*|\w+ cut at [\d,]+ bytes)\]\n$"
)


def _dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=_COMPACT).encode("utf-8")
