"""The data analysis runner: SQL and Python over registered CSV datasets, in the sandbox.

    execute_sql(dataset_id, sql)                 one read-only SQL query -> RunnerResponse
    execute_python(dataset_id, python_code)      Python over DataFrames (ENABLE_PYTHON_EXECUTION)
    run_request(RunnerRequest | dict)            either; what `sandbox-kernel runner` calls

Modules: models (requests, responses, error codes), settings (environment), datasets (the
registry), guard (the AST policy check), sql (the SQL statement check), adapter and engine
(the sandbox side), capsules (the record of every run), api, cli. Guest code lives in
sandbox_kernel/guest/tables.py and sql.py.

Re-exports only. Must not import: anything Jupyter.
"""

from __future__ import annotations

from sandbox_kernel.runner.api import execute_python, execute_sql, run_request
from sandbox_kernel.runner.capsules import Capsule, CapsuleStore, CapsuleSummary
from sandbox_kernel.runner.datasets import Dataset, DatasetRegistry, Table
from sandbox_kernel.runner.errors import (
    CapsuleNotFound,
    DatasetNotFound,
    DatasetRegistryError,
    GuardConfigError,
    RunnerConfigError,
    RunnerError,
)
from sandbox_kernel.runner.guard import GuardConfig, PolicyReport, Violation, check_code
from sandbox_kernel.runner.models import (
    ErrorCode,
    ErrorInfo,
    LimitHit,
    QueryType,
    RunnerRequest,
    RunnerResponse,
    RunStatus,
)
from sandbox_kernel.runner.settings import RunnerSettings
from sandbox_kernel.runner.sql import SqlCheck, check_sql

__all__ = [
    "Capsule",
    "CapsuleNotFound",
    "CapsuleStore",
    "CapsuleSummary",
    "Dataset",
    "DatasetNotFound",
    "DatasetRegistry",
    "DatasetRegistryError",
    "ErrorCode",
    "ErrorInfo",
    "GuardConfig",
    "GuardConfigError",
    "LimitHit",
    "PolicyReport",
    "QueryType",
    "RunStatus",
    "RunnerConfigError",
    "RunnerError",
    "RunnerRequest",
    "RunnerResponse",
    "RunnerSettings",
    "SqlCheck",
    "Table",
    "Violation",
    "check_code",
    "check_sql",
    "execute_python",
    "execute_sql",
    "run_request",
]
