"""The agent server's chat: one message about one dataset becomes one runner request.

    request = ChatRequest(message="PYTHON: result = len(orders)", dataset_id="retail")
    plan = explicit_plan(request.message)            # "PYTHON: <code>" or "SQL: <query>"
    plan = plan or Planner(provider, settings).plan(request, dataset)   # else the model

The seed's chat policy, which the planner's prompt states and the server enforces:
- SQL by default. Python only when the user asks for it ("python", "pandas", "dataframe",
  "matplotlib", ... in the message) or when SQL cannot do what is asked.
- Python is never planned while ENABLE_PYTHON_EXECUTION is off; a request for it, explicit
  or planned, is refused by the runner with PYTHON_EXECUTION_DISABLED, which says why.
- The planned code passes the same guard (the AST policy check, the SQL statement check) and
  the same sandbox as code a caller sends itself: a model is one more untrusted author.

`validation_event` says what the guard thinks of a plan before it runs (the runner checks it
again, and its verdict is the one that counts).

Must not import: wasmtime, anything Jupyter, starlette (server.py serves this).
"""

from __future__ import annotations

import csv
import io
import re
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from sandbox_kernel.llm.base import ChatMessage, LLMProvider
from sandbox_kernel.llm.errors import LLMError
from sandbox_kernel.runner.datasets import Dataset
from sandbox_kernel.runner.errors import RunnerError
from sandbox_kernel.runner.guard import check_code
from sandbox_kernel.runner.models import (
    DATASET_ID_PATTERN,
    MAX_PYTHON_CHARS,
    QueryType,
)
from sandbox_kernel.runner.settings import RunnerSettings
from sandbox_kernel.runner.sql import check_sql

__all__ = [
    "MAX_MESSAGE_CHARS",
    "ChatRequest",
    "Plan",
    "Planner",
    "PlanningFailed",
    "asks_for_python",
    "explicit_plan",
    "validation_event",
]

MAX_MESSAGE_CHARS: Final = MAX_PYTHON_CHARS + 64
"""A message may hold a whole `PYTHON:` program (the runner's own ceiling) and its prefix."""
_MAX_HEADER_BYTES: Final = 64_000
_MAX_COLUMNS: Final = 200
_MAX_EXPLANATION_CHARS: Final = 2_000
_EXPLICIT: Final = re.compile(r"\A\s*(PYTHON|SQL)\s*:(.*)\Z", re.DOTALL | re.IGNORECASE)
_FENCE: Final = re.compile(r"```[ \t]*(sql|sqlite|python|py)[ \t]*\n(.*?)```", re.DOTALL | re.I)
_PYTHON_WORDS: Final = re.compile(
    r"\b(python|pandas|dataframes?|numpy|matplotlib|scipy|sklearn|scikit-learn|plot)\b", re.I
)


class PlanningFailed(RunnerError):
    """The model could not be asked, or its answer holds no query to run."""


class ChatRequest(BaseModel):
    """`POST /chat`'s body."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    message: Annotated[str, Field(min_length=1, max_length=MAX_MESSAGE_CHARS)]
    """A question, or an explicit `PYTHON: <code>` / `SQL: <query>`."""
    dataset_id: Annotated[str, Field(pattern=DATASET_ID_PATTERN)]
    """The registered dataset the question is about."""


class Plan(BaseModel):
    """What will run: the query type and its code, and who wrote it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query_type: QueryType
    code: str
    source: Literal["explicit", "model"]
    model: str | None = None
    """The provider that planned it (source "model")."""
    explanation: str = ""
    """What the model wrote around its code block, cut at 2,000 characters."""

    def request(self, dataset_id: str) -> dict[str, Any]:
        """The runner request's fields (validated by the runner, not here: a plan that is
        not a valid request must fail as the runner fails it, and be recorded)."""
        field = "sql" if self.query_type is QueryType.SQL else "python_code"
        return {"query_type": self.query_type.value, "dataset_id": dataset_id, field: self.code}


def explicit_plan(message: str) -> Plan | None:
    """The plan of a message that starts with `PYTHON:` or `SQL:` (any case), else None."""
    match = _EXPLICIT.match(message)
    if match is None:
        return None
    kind = QueryType.PYTHON if match.group(1).upper() == "PYTHON" else QueryType.SQL
    code = match.group(2).lstrip(" \t").strip("\n")
    return Plan(query_type=kind, code=code, source="explicit")


def asks_for_python(message: str) -> bool:
    """Whether the user asks for Python by name (or for something only Python gives)."""
    return _PYTHON_WORDS.search(message) is not None


def validation_event(plan: Plan, settings: RunnerSettings) -> dict[str, JsonValue]:
    """The guard's verdict on a plan, as the `validating` status shows it."""
    if plan.query_type is QueryType.PYTHON:
        report = check_code(plan.code, settings.guard)
        violations: list[JsonValue] = [str(v) for v in report.violations]
        allowed = report.allowed
    else:
        check = check_sql(plan.code)
        allowed = check.allowed
        violations = [] if allowed else [f"line {check.line}: {check.violation}"]
    return {
        "query_type": plan.query_type.value,
        "code": plan.code,
        "source": plan.source,
        "model": plan.model,
        "explanation": plan.explanation,
        "allowed": allowed,
        "violations": violations,
        "python_enabled": settings.enable_python_execution,
    }


class Planner:
    """Asks the configured model for one query that answers a question about a dataset."""

    def __init__(self, provider: LLMProvider, settings: RunnerSettings) -> None:
        self.provider = provider
        self.settings = settings

    def plan(self, request: ChatRequest, dataset: Dataset) -> Plan:
        """The model's plan for `request`.

        Raises:
            PlanningFailed: the model failed (its error, one line), or answered without a
                ```sql or ```python block.
        """
        try:
            messages = self.messages(request, dataset)
        except RunnerError as exc:  # the registry changed under us, or the folder went away
            raise PlanningFailed(f"the dataset could not be described: {exc}") from None
        try:
            completion = self.provider.complete(messages)
        except LLMError as exc:
            raise PlanningFailed(f"the model could not plan the query: {exc}") from None
        return self._read(completion.text)

    def messages(self, request: ChatRequest, dataset: Dataset) -> list[ChatMessage]:
        python = self.settings.enable_python_execution
        rules = [
            "You turn a question about a dataset into exactly one query that answers it.",
            "Answer with one fenced code block: ```sql for one read-only SQLite SELECT over "
            "the tables below, or ```python for pandas code.",
            "Use SQL unless the user asks for Python or SQL cannot do what is asked.",
        ]
        if python:
            rules.append(
                "Python code sees each table as a pandas DataFrame of its name (and all in "
                "`dfs`), may import pandas and numpy, and must set result_df (a DataFrame), "
                "result_rows with result_columns, or result."
            )
        else:
            rules.append("Python execution is disabled here: always answer with SQL.")
        if asks_for_python(request.message):
            rules.append("The user asks for Python.")
        return [
            {"role": "system", "content": "\n".join(rules)},
            {"role": "user", "content": f"{_schema(dataset)}\n\nQuestion: {request.message}"},
        ]

    def _read(self, text: str) -> Plan:
        match = _FENCE.search(text)
        if match is None:
            raise PlanningFailed(
                "the model's answer holds no ```sql or ```python code block to run"
            )
        kind = QueryType.SQL if match.group(1).lower() in ("sql", "sqlite") else QueryType.PYTHON
        explanation = (text[: match.start()] + text[match.end() :]).strip()
        return Plan(
            query_type=kind,
            code=match.group(2).strip("\n"),
            source="model",
            model=getattr(self.provider, "name", None),
            explanation=explanation[:_MAX_EXPLANATION_CHARS],
        )


def _schema(dataset: Dataset) -> str:
    """The dataset's tables and their columns (the CSV header row), for the prompt."""
    lines = [f"Dataset {dataset.id}: {dataset.description}".rstrip(": ")]
    for table in dataset.tables():
        columns = _header(dataset, table.file)
        lines.append(f"- table {table.name} ({table.file}): {', '.join(columns) or '?'}")
    return "\n".join(lines)


def _header(dataset: Dataset, file: str) -> list[str]:
    """The first row of a dataset's CSV file, read on the host (a registered dataset is the
    operator's file, not the guest's), at most 64 KB and 200 columns of it."""
    try:
        with (dataset.folder / file).open("rb") as handle:
            head = handle.read(_MAX_HEADER_BYTES).decode("utf-8-sig", errors="replace")
    except OSError:
        return []
    first = head.splitlines()[0] if head else ""
    row = next(csv.reader(io.StringIO(first)), [])
    return [name.strip()[:100] for name in row[:_MAX_COLUMNS]]
