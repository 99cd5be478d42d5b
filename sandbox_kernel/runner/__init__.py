"""The data analysis runner: SQL and Python over registered CSV datasets, in the sandbox.

    execute_sql(dataset_id, sql)                 one read-only SQL query -> RunnerResponse
    execute_python(dataset_id, python_code)      Python over DataFrames (ENABLE_PYTHON_EXECUTION)
    run_request(RunnerRequest | dict)            either; what `sandbox-kernel runner` calls

Modules: models (requests, responses, error codes), settings (environment), datasets (the
registry), guard (the AST policy check), sql (the SQL statement check), adapter and engine
(the sandbox side), capsules (the record of every run), api, cli. Guest code lives in
sandbox_kernel/guest/tables.py and sql.py.

Re-exports only, imported on first use (the kernel loads this package for %dataset and
%%sql, and should not pay for all of it at start). Must not import: anything Jupyter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_kernel._lazy import lazy_getattr

if TYPE_CHECKING:
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

_HOMES = {
    "Capsule": "sandbox_kernel.runner.capsules",
    "CapsuleNotFound": "sandbox_kernel.runner.errors",
    "CapsuleStore": "sandbox_kernel.runner.capsules",
    "CapsuleSummary": "sandbox_kernel.runner.capsules",
    "Dataset": "sandbox_kernel.runner.datasets",
    "DatasetNotFound": "sandbox_kernel.runner.errors",
    "DatasetRegistry": "sandbox_kernel.runner.datasets",
    "DatasetRegistryError": "sandbox_kernel.runner.errors",
    "ErrorCode": "sandbox_kernel.runner.models",
    "ErrorInfo": "sandbox_kernel.runner.models",
    "GuardConfig": "sandbox_kernel.runner.guard",
    "GuardConfigError": "sandbox_kernel.runner.errors",
    "LimitHit": "sandbox_kernel.runner.models",
    "PolicyReport": "sandbox_kernel.runner.guard",
    "QueryType": "sandbox_kernel.runner.models",
    "RunStatus": "sandbox_kernel.runner.models",
    "RunnerConfigError": "sandbox_kernel.runner.errors",
    "RunnerError": "sandbox_kernel.runner.errors",
    "RunnerRequest": "sandbox_kernel.runner.models",
    "RunnerResponse": "sandbox_kernel.runner.models",
    "RunnerSettings": "sandbox_kernel.runner.settings",
    "SqlCheck": "sandbox_kernel.runner.sql",
    "Table": "sandbox_kernel.runner.datasets",
    "Violation": "sandbox_kernel.runner.guard",
    "check_code": "sandbox_kernel.runner.guard",
    "check_sql": "sandbox_kernel.runner.sql",
    "execute_python": "sandbox_kernel.runner.api",
    "execute_sql": "sandbox_kernel.runner.api",
    "run_request": "sandbox_kernel.runner.api",
}


__getattr__ = lazy_getattr(__name__, _HOMES)
