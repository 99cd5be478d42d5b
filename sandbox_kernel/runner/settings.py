"""The runner's configuration, read in one place: environment < explicit argument.

    ENABLE_PYTHON_EXECUTION   1/true/yes/on turns the Python entrypoint on (default off, as
                              the seed rolls it out); SQL is always on
    SANDBOX_KERNEL_DATASETS   the dataset registry (TOML); default ./datasets/datasets.toml
    SANDBOX_KERNEL_CAPSULES   the run capsules' SQLite file; default
                              $XDG_DATA_HOME/sandbox-kernel/capsules.sqlite3
    SANDBOX_KERNEL_DATABASE   a postgresql:// URL: capsules go there instead (servers on
                              several machines share it; capsules_pg.py)
    SANDBOX_KERNEL_GUARD      a TOML file with the guard's allow and block lists (guard.py)

Limits of the sandbox that a request does not set live here too. The wall clock
(`timeout_seconds`, per request) is the limit a runaway query meets; the instruction budget
(fuel) is a deterministic backstop derived from it (`fuel_per_second` x timeout), high
enough that the wall clock comes first on any machine this runs on.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.runner.capsules import Capsules, CapsuleStore
from sandbox_kernel.runner.datasets import DatasetRegistry
from sandbox_kernel.runner.errors import RunnerConfigError
from sandbox_kernel.runner.guard import GuardConfig, load_guard_config
from sandbox_kernel.runner.models import RunnerRequest

__all__ = [
    "CAPSULES_ENV",
    "DATABASE_ENV",
    "DATASETS_ENV",
    "ENABLE_PYTHON_ENV",
    "GUARD_ENV",
    "RunnerSettings",
    "env_flag",
]

ENABLE_PYTHON_ENV: Final = "ENABLE_PYTHON_EXECUTION"
DATASETS_ENV: Final = "SANDBOX_KERNEL_DATASETS"
CAPSULES_ENV: Final = "SANDBOX_KERNEL_CAPSULES"
DATABASE_ENV: Final = "SANDBOX_KERNEL_DATABASE"
GUARD_ENV: Final = "SANDBOX_KERNEL_GUARD"
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})

_Positive = Annotated[int, Field(gt=0)]


def env_flag(environ: Mapping[str, str], name: str) -> bool:
    """A yes/no environment variable; unset is no.

    Raises:
        RunnerConfigError: a value that is neither (a typo must not silently mean "off").
    """
    value = environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise RunnerConfigError(f"{name} must be 1, true, yes or on (or 0, false, no, off)")


def default_capsules_path(environ: Mapping[str, str]) -> Path:
    data_home = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "sandbox-kernel" / "capsules.sqlite3"


class RunnerSettings(BaseModel):
    """What the runner may do and where it keeps things. Invalid values raise
    RunnerConfigError from `from_environment`, pydantic's ValidationError from the
    constructor."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    datasets: Path = Path("datasets/datasets.toml")
    """The dataset registry."""
    capsules: Path = Field(default_factory=lambda: default_capsules_path(os.environ))
    """The SQLite file every run is recorded in (unless `database` names another store)."""
    database: Annotated[str, Field(pattern=r"^postgres(ql)?://")] | None = None
    """A PostgreSQL URL every run is recorded in instead (shared by several servers)."""
    enable_python_execution: bool = False
    """The feature flag of the Python entrypoint."""
    guard: GuardConfig = Field(default_factory=GuardConfig)
    """The AST policy check's lists."""
    memory_bytes: _Positive = 1_000_000_000
    """Linear memory of the sandbox (the frames and SQLite's copy of them live there)."""
    fuel_per_second: _Positive = 50_000_000_000
    """Instructions allowed per second of timeout: about 4x what a busy loop runs here."""
    workspace_max_bytes: _Positive = 100_000_000
    """Bytes the code may write to its scratch /app (removed after the run)."""
    max_figure_bytes: _Positive = 2_000_000
    """Bytes of a Python run's chart (PNG) kept; a larger one is left out (max_figure_bytes)."""
    warm_start_modules: tuple[str, ...] = ("numpy", "pandas", "matplotlib.pyplot")
    """Imported once into a reusable image, so a run does not pay for `import pandas` (or for
    matplotlib's, about 2 s in the guest, when it draws a chart)."""
    warm_datasets: bool = True
    """Runs start from an image with the dataset's tables already loaded (made by the first run
    over the dataset, made again when a file changes: runner/warm_data.py)."""

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> RunnerSettings:
        """Settings from the environment (see the module docstring), then `overrides`.

        Raises:
            RunnerConfigError: an environment variable, the guard file or an override is
                invalid.
        """
        env = os.environ if environ is None else environ
        fields: dict[str, Any] = {"capsules": default_capsules_path(env)}
        if env.get(DATASETS_ENV):
            fields["datasets"] = Path(env[DATASETS_ENV]).expanduser()
        if env.get(CAPSULES_ENV):
            fields["capsules"] = Path(env[CAPSULES_ENV]).expanduser()
        if env.get(DATABASE_ENV):
            fields["database"] = env[DATABASE_ENV]
        fields["enable_python_execution"] = env_flag(env, ENABLE_PYTHON_ENV)
        if env.get(GUARD_ENV):
            fields["guard"] = load_guard_config(env[GUARD_ENV])
        fields.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**fields)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            raise RunnerConfigError(f"invalid runner settings: {problems}") from None

    def no_registry(self) -> str:
        """What a server says while no dataset registry exists at `datasets`."""
        return (
            f"no dataset registry at {self.datasets}: register datasets in a TOML file and "
            "name it with --datasets PATH or SANDBOX_KERNEL_DATASETS (docs/runner.md)"
        )

    def capsule_store(self) -> Capsules:
        """Where runs are recorded: the `database`, else the SQLite file `capsules`.

        Raises:
            RunnerConfigError: the database's driver is not installed.
        """
        if self.database is None:
            return CapsuleStore(self.capsules)
        from sandbox_kernel.runner.capsules_pg import PostgresCapsules  # psycopg, when asked

        return PostgresCapsules(self.database)

    def registry(self) -> DatasetRegistry:
        """The dataset registry, read now (edits to the file apply to the next run)."""
        return DatasetRegistry.load(self.datasets)

    def policy(self, request: RunnerRequest, workspace: Path, data: Path) -> ExecutionPolicy:
        """The sandbox policy for one request: /app is `workspace` (scratch), /data is the
        dataset's folder (read-only), stdout and stderr capped just past max_output_bytes so
        the runner can tell a cut stream from a full one."""
        capture = request.max_output_bytes + 1
        return ExecutionPolicy(
            fuel_budget=int(self.fuel_per_second * request.timeout_seconds),
            memory_bytes=self.memory_bytes,
            timeout_seconds=request.timeout_seconds,
            stdout_max_bytes=capture,
            stderr_max_bytes=capture,
            mount_host_dir=workspace,
            mount_data_dir=data,
            workspace_max_bytes=self.workspace_max_bytes,
        )

    def limits(self) -> dict[str, object]:
        """The limits a capsule records (never a host path)."""
        return {
            "memory_bytes": self.memory_bytes,
            "fuel_per_second": self.fuel_per_second,
            "workspace_max_bytes": self.workspace_max_bytes,
            "network": False,
            "guest_mounts": {"/app": "scratch, read-write", "/data": "dataset, read-only"},
        }
