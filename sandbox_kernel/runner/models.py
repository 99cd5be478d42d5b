"""What a runner is asked (`RunnerRequest`) and what it answers (`RunnerResponse`).

A request names a dataset and holds exactly one query: `sql` (query_type "sql") or
`python_code` (query_type "python"), with per-request caps on time, rows and output bytes.
A response is tabular (`columns`, `rows`) and always says how the run ended: `status` is
success, error or timeout, and a failure carries an `ErrorInfo` whose `type` is an
`ErrorCode`. Truncation is never silent: `truncated` and `limits_hit` say what was cut.

Must not import anything from sandbox_kernel but core, nor wasmtime.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Final, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    model_validator,
)

__all__ = [
    "DATASET_ID_PATTERN",
    "MAX_OUTPUT_BYTES",
    "MAX_ROWS",
    "MAX_TIMEOUT_SECONDS",
    "ErrorCode",
    "ErrorInfo",
    "LimitHit",
    "QueryType",
    "RunStatus",
    "RunnerRequest",
    "RunnerResponse",
    "validation_messages",
]

DATASET_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
"""A dataset id: letters, digits, '_' and '-', starting with a letter or digit, 64 at most."""
MAX_TIMEOUT_SECONDS: Final = 300.0
MAX_ROWS: Final = 100_000
MAX_OUTPUT_BYTES: Final = 50_000_000
MAX_PYTHON_CHARS: Final = 1_000_000
MAX_SQL_CHARS: Final = 100_000
MAX_FILES: Final = 100


class QueryType(StrEnum):
    SQL = "sql"
    PYTHON = "python"


class RunStatus(StrEnum):
    SUCCESS = "success"
    ERROR = "error"
    TIMEOUT = "timeout"


class ErrorCode(StrEnum):
    """The type of a failed run, for callers to branch on."""

    VALIDATION_ERROR = "VALIDATION_ERROR"
    """The request is malformed: a missing or extra field, a bad value, an unknown dataset."""
    PYTHON_EXECUTION_DISABLED = "PYTHON_EXECUTION_DISABLED"
    """A Python request while ENABLE_PYTHON_EXECUTION is off."""
    PYTHON_POLICY_VIOLATION = "PYTHON_POLICY_VIOLATION"
    """The AST policy check refused the code; nothing ran."""
    PYTHON_EXECUTION_ERROR = "PYTHON_EXECUTION_ERROR"
    """The code raised, or set no usable result."""
    SQL_POLICY_VIOLATION = "SQL_POLICY_VIOLATION"
    """The SQL writes, attaches, sets a pragma, or holds several statements; nothing ran."""
    SQL_EXECUTION_ERROR = "SQL_EXECUTION_ERROR"
    """SQLite refused the query (a syntax error, an unknown table or column)."""
    RUNNER_TIMEOUT = "RUNNER_TIMEOUT"
    """The run took longer than timeout_seconds (status "timeout")."""
    RUNNER_RESOURCE_EXCEEDED = "RUNNER_RESOURCE_EXCEEDED"
    """The run used up its instruction budget (fuel) or its memory."""
    RUNNER_INTERNAL_ERROR = "RUNNER_INTERNAL_ERROR"
    """The runner itself failed (a broken dataset, registry or sandbox), not the query."""
    RUNNER_CANCELLED = "RUNNER_CANCELLED"
    """The run was stopped before its end because its caller went away (the agent server's
    client disconnected); what ran was rolled back with the session."""


class LimitHit(StrEnum):
    """A cap a run reached: output caps cut the response, the others stopped the run."""

    MAX_ROWS = "max_rows"
    MAX_OUTPUT_BYTES = "max_output_bytes"
    MAX_FIGURE_BYTES = "max_figure_bytes"  # the chart was over the cap: left out
    STDOUT = "stdout"
    STDERR = "stderr"
    TIMEOUT = "timeout"
    FUEL = "fuel"
    MEMORY = "memory"


def _not_bool(value: object) -> object:
    # pydantic reads true as 1: `"max_rows": true` would ask for one row.
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


def _finite(value: object) -> object:
    value = _not_bool(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _file_name(name: str) -> str:
    if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
        raise ValueError("must be a file name of the dataset, without any folder")
    return name


def _unique(names: tuple[str, ...]) -> tuple[str, ...]:
    if not names:
        raise ValueError("must name at least one file (leave it out to load every table)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"names a file more than once: {', '.join(repeated)}")
    return names


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    if "\0" in text:
        raise ValueError("must not contain NUL")
    return text


_Seconds = Annotated[
    float,
    BeforeValidator(_finite),
    Field(gt=0, le=MAX_TIMEOUT_SECONDS, allow_inf_nan=False),
]
_Rows = Annotated[int, BeforeValidator(_not_bool), Field(gt=0, le=MAX_ROWS)]
_Bytes = Annotated[int, BeforeValidator(_not_bool), Field(gt=0, le=MAX_OUTPUT_BYTES)]
_FileName = Annotated[str, Field(max_length=255), AfterValidator(_file_name)]
_Files = Annotated[tuple[_FileName, ...], Field(max_length=MAX_FILES), AfterValidator(_unique)]
_Python = Annotated[str, Field(max_length=MAX_PYTHON_CHARS), AfterValidator(_not_blank)]
_Sql = Annotated[str, Field(max_length=MAX_SQL_CHARS), AfterValidator(_not_blank)]


class RunnerRequest(BaseModel):
    """One analysis question over one dataset, by SQL or by Python.

    Rules: `sql` and `python_code` are mutually exclusive; query_type "sql" needs `sql`,
    "python" needs `python_code`; every limit is positive and below its ceiling; unknown
    fields are refused.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    query_type: QueryType
    """"sql" or "python"."""
    dataset_id: Annotated[str, Field(pattern=DATASET_ID_PATTERN)]
    """The registered dataset to query."""
    files: _Files | None = None
    """CSV files (or table names) of the dataset to load; all of them when left out."""
    sql: _Sql | None = None
    """One read-only SQL statement (SQLite dialect) over the dataset's tables."""
    python_code: _Python | None = None
    """Python that sets exactly one of result_df, result_rows (+ result_columns), result."""
    timeout_seconds: _Seconds = 10.0
    """Wall-clock time for each step in the sandbox: loading, the query, the result."""
    max_rows: _Rows = 1_000
    """Rows returned at most; the rest is cut and reported."""
    max_output_bytes: _Bytes = 1_000_000
    """Bytes of the rows as JSON returned at most, and of stdout and of stderr each."""

    @model_validator(mode="after")
    def _one_query(self) -> Self:
        if self.sql is not None and self.python_code is not None:
            raise ValueError("sql and python_code are mutually exclusive: give only one")
        if self.query_type is QueryType.SQL and self.sql is None:
            raise ValueError("query_type 'sql' needs the sql field")
        if self.query_type is QueryType.PYTHON and self.python_code is None:
            raise ValueError("query_type 'python' needs the python_code field")
        return self

    @property
    def query(self) -> str:
        """The SQL or the Python code, whichever the request holds."""
        text = self.sql if self.query_type is QueryType.SQL else self.python_code
        return text or ""


class ErrorInfo(BaseModel):
    """Why a run failed: a typed code and one message a person (or an agent) can act on."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    type: ErrorCode
    message: str
    """One line; names the line of the code when the error has one."""
    line: int | None = Field(default=None, ge=1)
    """The line of python_code (or sql) the error is about, 1-based."""
    details: list[str] = Field(default_factory=list)
    """Every problem found (validation errors, policy violations), one per entry."""


Row = list[JsonValue]


class RunnerResponse(BaseModel):
    """The outcome of one run: a table on success, a typed error otherwise."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    status: RunStatus
    query_type: QueryType | None = None
    """None only when the request was too malformed to tell."""
    columns: list[str] = Field(default_factory=list)
    rows: list[Row] = Field(default_factory=list)
    row_count: int = Field(default=0, ge=0)
    """Rows in `rows` (after the caps)."""
    total_rows: int | None = Field(default=None, ge=0)
    """Rows the result had before the caps, when known."""
    truncated: bool = False
    """True when rows, or stdout or stderr, were cut (see limits_hit)."""
    limits_hit: list[LimitHit] = Field(default_factory=list)
    exec_time_ms: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Wall-clock time of the whole run, sandbox start included."""
    stdout_trunc: str = ""
    """What the code printed, cut at max_output_bytes."""
    stderr_trunc: str = ""
    """What the code wrote to stderr (with its traceback, on an error), cut the same way."""
    figure_png: str | None = None
    """A Python run's chart (result_figure, or the last figure drawn) as base64 PNG, checked
    to be a PNG within the server's max_figure_bytes; None when it drew none."""
    error: ErrorInfo | None = None
    run_id: str | None = None
    """The run's capsule id (`sandbox-kernel capsules show RUN_ID`), once it is recorded."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.status is RunStatus.SUCCESS) != (self.error is None):
            raise ValueError("a successful run has no error, a failed one has one")
        if self.status is RunStatus.TIMEOUT and (
            self.error is None or self.error.type is not ErrorCode.RUNNER_TIMEOUT
        ):
            raise ValueError("a timed-out run has a RUNNER_TIMEOUT error")
        if self.row_count != len(self.rows):
            raise ValueError(f"row_count is {self.row_count} but there are {len(self.rows)} rows")
        width = len(self.columns)
        for i, row in enumerate(self.rows):
            if len(row) != width:
                raise ValueError(f"row {i} has {len(row)} values for {width} columns")
        return self

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.SUCCESS

    @classmethod
    def failure(
        cls,
        code: ErrorCode,
        message: str,
        *,
        query_type: QueryType | None = None,
        line: int | None = None,
        details: list[str] | None = None,
        **fields: object,
    ) -> RunnerResponse:
        """A failed run's response; status "timeout" for RUNNER_TIMEOUT, else "error"."""
        status = RunStatus.TIMEOUT if code is ErrorCode.RUNNER_TIMEOUT else RunStatus.ERROR
        error = ErrorInfo(type=code, message=message, line=line, details=details or [])
        return cls.model_validate(
            {"status": status, "query_type": query_type, "error": error, **fields}
        )


# pydantic's wording for the checks requests use, in the house wording (core/errors.py's).
_MESSAGES: Final = {
    "missing": "is required",
    "extra_forbidden": "unknown field",
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than_equal": "must be <= {le}",
    "finite_number": "must be a finite number",
    "string_too_long": "must be at most {max_length:,} characters",
    "too_long": "must hold at most {max_length:,} items",
    "string_pattern_mismatch": "must match {pattern}",
    "enum": "must be one of {expected}",
}


def validation_messages(exc: ValidationError) -> list[str]:
    """pydantic's errors as "field: message" lines, in the house wording."""
    messages = []
    for detail in exc.errors():
        where = ".".join(str(part) for part in detail["loc"])
        ctx = detail.get("ctx") or {}
        template = _MESSAGES.get(detail["type"])
        if template is not None:
            text = template.format(**ctx)
        elif detail["type"] == "value_error":
            text = str(ctx.get("error", detail["msg"]))
        else:
            text = detail["msg"][:1].lower() + detail["msg"][1:]
        messages.append(f"{where}: {text}" if where else text)
    return messages
