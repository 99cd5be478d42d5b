"""The runner's entrypoints for agent servers: one request in, one `RunnerResponse` out.

    execute_sql(dataset_id, sql, ...)               always available
    execute_python(dataset_id, python_code, ...)    behind ENABLE_PYTHON_EXECUTION
    run_request(request)                            either, from a RunnerRequest or its JSON data

None of them raises for anything a request holds: every failure is a response with a typed
error. The steps, each of which may end the run: validate the request; the feature flag;
find the dataset and its tables; the AST policy check (Python) or the statement check (SQL);
then the sandbox (start, load, query, collect). Every run, refused or not, is recorded as a
capsule (capsules.py) and the response carries its id.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pydantic import JsonValue, ValidationError

from sandbox_kernel.core.errors import SandboxError
from sandbox_kernel.repl.models import CodeExecution
from sandbox_kernel.repl.results import capped
from sandbox_kernel.runner.adapter import (
    FailurePayload,
    PayloadError,
    TablePayload,
    cap_stream,
    fit_rows,
)
from sandbox_kernel.runner.capsules import Capsule, new_capsule_id
from sandbox_kernel.runner.datasets import Dataset, Table
from sandbox_kernel.runner.engine import Cancellation, RunFailed, SandboxRun
from sandbox_kernel.runner.errors import DatasetNotFound, RunnerConfigError
from sandbox_kernel.runner.guard import PolicyReport, check_code
from sandbox_kernel.runner.intake import (
    RequestUnreadable,
    peek_code,
    peek_query_type,
    peek_text,
    request_data,
)
from sandbox_kernel.runner.models import (
    ErrorCode,
    LimitHit,
    QueryType,
    RunnerRequest,
    RunnerResponse,
    RunStatus,
    validation_messages,
)
from sandbox_kernel.runner.settings import ENABLE_PYTHON_ENV, RunnerSettings
from sandbox_kernel.runner.sql import check_sql

__all__ = ["execute_python", "execute_sql", "failed_run", "run_request"]

_MAX_COLUMN_CHARS = 1_000  # a column name the guest made can be 20 MB
_MAX_DETAILS = 20

logger = logging.getLogger("sandbox_kernel.runner")


def execute_python(
    dataset_id: str,
    python_code: str,
    *,
    settings: RunnerSettings | None = None,
    **limits: Any,
) -> RunnerResponse:
    """Run `python_code` over the dataset's tables (`dfs`, and one global per table); the
    code sets result_df, result_rows (+ result_columns) or result. Off unless
    ENABLE_PYTHON_EXECUTION (or `settings.enable_python_execution`) turns it on.

    `limits`: files, timeout_seconds, max_rows, max_output_bytes (RunnerRequest's fields).
    """
    request = {"query_type": "python", "dataset_id": dataset_id, "python_code": python_code}
    return run_request({**request, **limits}, settings=settings)


def execute_sql(
    dataset_id: str,
    sql: str,
    *,
    settings: RunnerSettings | None = None,
    **limits: Any,
) -> RunnerResponse:
    """Run one read-only SQL statement (SQLite) over the dataset's tables.

    `limits`: files, timeout_seconds, max_rows, max_output_bytes (RunnerRequest's fields).
    """
    request = {"query_type": "sql", "dataset_id": dataset_id, "sql": sql}
    return run_request({**request, **limits}, settings=settings)


def run_request(
    request: RunnerRequest | Mapping[str, Any] | str | bytes,
    *,
    settings: RunnerSettings | None = None,
    query_type: QueryType | None = None,
    cancellation: Cancellation | None = None,
    run_id: str | None = None,
) -> RunnerResponse:
    """Answer one request: a RunnerRequest, its fields as JSON data, or its JSON text.

    `query_type` is the entrypoint's (`sandbox-kernel runner sql` says "sql"): a request that
    leaves it out gets it, one that names another is a VALIDATION_ERROR. `cancellation`, when
    given, lets another thread stop the run (it then ends as RUNNER_CANCELLED, recorded).
    `run_id` is the capsule's id, when the caller chose it (new_capsule_id()).
    """
    return _Run(request, settings, query_type, cancellation, run_id).respond()


def failed_run(
    request: Mapping[str, Any],
    *,
    settings: RunnerSettings,
    run_id: str,
    code: ErrorCode,
    message: str,
) -> RunnerResponse:
    """The response to a run that ended outside the runner (its worker process died or did
    not answer): an error saying so, recorded under `run_id` unless the run's own capsule was
    written first (a capsule id is written once)."""
    return _Run(request, settings, None, None, run_id).fail(RunFailed(code, message))


class _Run:
    """One request on its way to a response, and what its capsule records."""

    def __init__(
        self,
        raw: RunnerRequest | Mapping[str, Any] | str | bytes,
        settings: RunnerSettings | None,
        entrypoint: QueryType | None,
        cancellation: Cancellation | None = None,
        run_id: str | None = None,
    ) -> None:
        self.raw: object = raw
        self.run_id = run_id
        self.cancellation = cancellation
        self.settings = settings
        self.entrypoint = entrypoint
        self.request: RunnerRequest | None = raw if isinstance(raw, RunnerRequest) else None
        self.report: PolicyReport | None = None
        self.timings: dict[str, float] = {}
        self.host_paths: dict[str, str] = {}  # host path -> what the guest calls it
        self.started = time.perf_counter()

    def respond(self) -> RunnerResponse:
        try:
            response = self._respond()
        except RunFailed as failed:
            response = self._failure(failed)
        except Exception:  # the promise is a response, never a traceback: logged, not shown
            logger.exception("the runner failed")
            message = "the runner failed unexpectedly (the server log has the details)"
            response = self._failure(RunFailed(ErrorCode.RUNNER_INTERNAL_ERROR, message))
        return self.finish(response)

    def fail(self, failed: RunFailed) -> RunnerResponse:
        """The response and capsule of a run that ended elsewhere (as `failed` says)."""
        with contextlib.suppress(RunFailed):
            self._settings()
            self._validated()
        return self.finish(self._failure(failed))

    def finish(self, response: RunnerResponse) -> RunnerResponse:
        """`response` timed, scrubbed of host paths, recorded, with its run id."""
        self.timings["total"] = _ms_since(self.started)
        response = self._scrubbed(
            response.model_copy(update={"exec_time_ms": self.timings["total"]})
        )
        return response.model_copy(update={"run_id": self._record(response)})

    # -- the steps ---------------------------------------------------------------------------

    def _respond(self) -> RunnerResponse:
        settings = self._settings()
        request = self._validated()
        if request.query_type is QueryType.PYTHON and not settings.enable_python_execution:
            message = (
                f"Python execution is disabled; set {ENABLE_PYTHON_ENV}=1 to enable it "
                "(SQL queries are always available)"
            )
            raise RunFailed(ErrorCode.PYTHON_EXECUTION_DISABLED, message)
        dataset, tables = self._dataset(settings, request)
        if request.query_type is QueryType.PYTHON:
            return self._python(settings, request, dataset, tables)
        return self._sql(settings, request, dataset, tables)

    def _settings(self) -> RunnerSettings:
        if self.settings is None:
            try:
                self.settings = RunnerSettings.from_environment()
            except RunnerConfigError as exc:
                raise RunFailed(ErrorCode.RUNNER_INTERNAL_ERROR, str(exc)) from None
        return self.settings

    def _validated(self) -> RunnerRequest:
        if self.request is None:
            started = time.perf_counter()
            try:
                self.raw = request_data(self.raw, self.entrypoint)
                self.request = RunnerRequest.model_validate(self.raw)
            except RequestUnreadable as exc:
                raise RunFailed(ErrorCode.VALIDATION_ERROR, str(exc), details=[str(exc)]) from None
            except ValidationError as exc:
                details = validation_messages(exc)
                more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
                message = details[0] + more
                raise RunFailed(ErrorCode.VALIDATION_ERROR, message, details=details) from None
            finally:
                self.timings["validate"] = _ms_since(started)
        return self.request

    def _dataset(
        self, settings: RunnerSettings, request: RunnerRequest
    ) -> tuple[Dataset, list[Table]]:
        try:
            dataset = settings.registry().get(request.dataset_id)
            self.host_paths[str(dataset.folder)] = "/data"
            return dataset, dataset.select(request.files)
        except DatasetNotFound as exc:
            raise RunFailed(ErrorCode.VALIDATION_ERROR, f"dataset_id: {exc}") from None
        except RunnerConfigError as exc:
            raise RunFailed(ErrorCode.RUNNER_INTERNAL_ERROR, str(exc)) from None
        except LookupError as exc:
            raise RunFailed(ErrorCode.VALIDATION_ERROR, f"files: {exc.args[0]}") from None

    def _python(
        self,
        settings: RunnerSettings,
        request: RunnerRequest,
        dataset: Dataset,
        tables: list[Table],
    ) -> RunnerResponse:
        code = request.query
        started = time.perf_counter()
        self.report = check_code(code, settings.guard)
        self.timings["guard"] = _ms_since(started)
        if not self.report.allowed:
            raise RunFailed(
                ErrorCode.PYTHON_POLICY_VIOLATION,
                self.report.summary(),
                line=self.report.first_line,
                details=self.report.details(),
            )
        with self._sandbox(settings, request, dataset, tables) as run:
            run.load(tables)
            execution = run.python(code)
            payload = run.collect()
        drawn = payload.figure_png if isinstance(payload, TablePayload) else None
        chart = checked_figure(drawn or last_png(execution), settings.max_figure_bytes)
        return self._table(request, payload, execution.stdout, execution.stderr, chart)

    def _sql(
        self,
        settings: RunnerSettings,
        request: RunnerRequest,
        dataset: Dataset,
        tables: list[Table],
    ) -> RunnerResponse:
        started = time.perf_counter()
        check = check_sql(request.query)
        self.timings["guard"] = _ms_since(started)
        if check.violation is not None:
            message = f"line {check.line}: {check.violation}"
            raise RunFailed(ErrorCode.SQL_POLICY_VIOLATION, message, line=check.line)
        with self._sandbox(settings, request, dataset, tables) as run:
            run.load(tables)
            payload = run.sql(request.query, check.identifiers)
        return self._table(request, payload)

    @contextmanager
    def _sandbox(
        self,
        settings: RunnerSettings,
        request: RunnerRequest,
        dataset: Dataset,
        tables: list[Table],
    ) -> Iterator[SandboxRun]:
        if self.cancellation is not None and self.cancellation.cancelled:
            message = "the run was cancelled before it started: its caller went away"
            raise RunFailed(ErrorCode.RUNNER_CANCELLED, message)
        try:
            run = SandboxRun(settings, request, dataset, self.cancellation, tables=tables)
            self.host_paths[str(run.workspace)] = "/app"
            run.__enter__()
        except (SandboxError, OSError) as exc:
            logger.error("the runner's sandbox did not start: %s", exc)
            message = "the sandbox could not start (the server log has the details)"
            raise RunFailed(ErrorCode.RUNNER_INTERNAL_ERROR, message) from None
        try:
            yield run
        except PayloadError as exc:
            raise RunFailed(ErrorCode.RUNNER_INTERNAL_ERROR, str(exc)) from None
        finally:
            self.timings.update(run.timings)
            run.close()

    # -- responses ---------------------------------------------------------------------------

    def _table(
        self,
        request: RunnerRequest,
        payload: TablePayload | FailurePayload,
        stdout: str = "",
        stderr: str = "",
        chart: tuple[str | None, list[LimitHit]] = (None, []),
    ) -> RunnerResponse:
        """The response for the guest's table (a Python run's `chart` beside it, as
        checked_figure left it: the PNG, or the cap it was over)."""
        if isinstance(payload, FailurePayload):
            code = ErrorCode(payload.code)
            raise RunFailed(code, payload.message, stdout=stdout, stderr=stderr)
        cap = request.max_output_bytes
        columns = [capped(name, _MAX_COLUMN_CHARS) for name in payload.columns]
        rows, hits = fit_rows(columns, payload.rows, request.max_rows, cap)
        hits = [*(LimitHit(c) for c in payload.cut), *hits]
        stdout, stdout_cut = cap_stream(stdout, cap, "stdout")
        stderr, stderr_cut = cap_stream(stderr, cap, "stderr")
        hits += [LimitHit.STDOUT] * stdout_cut + [LimitHit.STDERR] * stderr_cut
        figure, figure_cut = chart
        hits = list(dict.fromkeys([*hits, *figure_cut]))
        return RunnerResponse(
            status=RunStatus.SUCCESS,
            query_type=request.query_type,
            columns=columns,
            rows=rows,
            row_count=len(rows),
            total_rows=payload.total_rows,
            truncated=bool(hits),
            limits_hit=hits,
            stdout_trunc=stdout,
            stderr_trunc=stderr,
            figure_png=figure,
        )

    def _failure(self, failed: RunFailed) -> RunnerResponse:
        query_type = self.request.query_type if self.request else self._query_type()
        cap = self.request.max_output_bytes if self.request is not None else 1_000_000
        stdout, stdout_cut = cap_stream(failed.stdout, cap, "stdout")
        stderr, stderr_cut = cap_stream(failed.stderr, cap, "stderr")
        hits = [failed.limit] if failed.limit is not None else []
        hits += [LimitHit.STDOUT] * stdout_cut + [LimitHit.STDERR] * stderr_cut
        message, message_cut = cap_stream(failed.message, cap, "error")
        details = [cap_stream(d, cap, "detail")[0] for d in failed.details[:_MAX_DETAILS]]
        return RunnerResponse.failure(
            failed.code,
            message,
            query_type=query_type,
            line=failed.line,
            details=details,
            limits_hit=hits,
            truncated=stdout_cut or stderr_cut or message_cut,
            stdout_trunc=stdout,
            stderr_trunc=stderr,
        )

    def _scrubbed(self, response: RunnerResponse) -> RunnerResponse:
        """No host path in the response, whatever wrote it (longest paths first)."""
        if not self.host_paths:
            return response
        data = response.model_dump_json()
        for host in sorted(self.host_paths, key=len, reverse=True):
            # Whole path components only: a folder /d must not turn /data into /datata.
            pattern = re.escape(json.dumps(host)[1:-1]) + r"(?![\w.-])"
            guest = self.host_paths[host]
            data = re.sub(pattern, lambda _: guest, data)  # noqa: B023 - used at once
        return RunnerResponse.model_validate_json(data)

    def _query_type(self) -> QueryType | None:
        """The query type of a request that did not validate, when it can be told."""
        return peek_query_type(self.raw) or self.entrypoint

    # -- the capsule -------------------------------------------------------------------------

    def _record(self, response: RunnerResponse) -> str | None:
        settings = self.settings
        if settings is None:
            return None  # the settings themselves failed: there is nowhere to record
        request = self.request
        capsule = Capsule(
            id=self.run_id or new_capsule_id(),
            query_type=(request.query_type.value if request else self._query_type()),
            dataset_id=request.dataset_id if request else peek_text(self.raw, "dataset_id"),
            code=request.query if request else peek_code(self.raw),
            request=_jsonable(request.model_dump(mode="json") if request else self.raw),
            policy_report=self.report.model_dump(mode="json") if self.report else None,
            response=response.model_dump(mode="json"),
            timings_ms=self.timings,
            limits_hit=[hit.value for hit in response.limits_hit],
            sandbox={
                **settings.limits(),
                **(_request_limits(request) if request is not None else {}),
            },
        )
        try:
            return settings.capsule_store().record(capsule)
        except (OSError, sqlite3.Error, RunnerConfigError) as exc:  # the run stands, logged
            logger.warning("could not record the run capsule: %s", exc)
            return None


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _jsonable(value: object) -> JsonValue:
    """`value` as JSON data (what could not be encoded, as its str)."""
    parsed: JsonValue = json.loads(json.dumps(value, default=str))
    return parsed


def _request_limits(request: RunnerRequest) -> dict[str, object]:
    return {
        "timeout_seconds": request.timeout_seconds,
        "max_rows": request.max_rows,
        "max_output_bytes": request.max_output_bytes,
    }


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def last_png(execution: CodeExecution) -> str | None:
    """The last figure the code drew: the session shows each figure when its cell ends (as a
    notebook's inline backend does), so it is the cell's last PNG display."""
    for display in reversed(execution.displays):
        data = display.get("data")
        png = data.get("image/png") if isinstance(data, dict) else None
        if isinstance(png, str):
            return png
    return None


def checked_figure(png: str | None, max_bytes: int) -> tuple[str | None, list[LimitHit]]:
    """The chart if it is a PNG within `max_bytes` (base64 text, for the response); anything
    else the guest sent as one (an SVG, HTML, a forged payload) is never passed on."""
    if png is None:
        return None, []
    try:
        data = base64.b64decode(png, validate=True)
    except (binascii.Error, ValueError):
        return None, []
    if not data.startswith(PNG_SIGNATURE):
        return None, []
    if len(data) > max_bytes:
        return None, [LimitHit.MAX_FIGURE_BYTES]
    return base64.b64encode(data).decode("ascii"), []
