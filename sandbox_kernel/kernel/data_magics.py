"""The kernel's data analysis support: %dataset, %%sql, and the guarded mode.

    %dataset                list the registered datasets (SANDBOX_KERNEL_DATASETS)
    %dataset ID             load the dataset's tables into the session: one DataFrame per CSV
                            file, bound by table name and in `dfs`
    %%sql [--out NAME] [--max-rows N]
    SELECT ...              read-only SQL (SQLite) over the session's DataFrames, run inside the
                            sandbox; the result is shown as a table (and bound to NAME)

Guarded mode (the `sandbox-python-guarded` kernel spec sets SANDBOX_KERNEL_GUARDED=1): every
cell, and every user expression, passes the runner's AST policy check before it runs; a
refused cell answers PYTHON_POLICY_VIOLATION, naming the line, and nothing runs. The check's
lists come from SANDBOX_KERNEL_GUARD (a TOML file) or the runner's defaults; a broken list
file refuses every cell (the mode fails closed).

`plan(code)` turns a cell into what to do: guest code to run as the cell (so %dataset and
%%sql get output, interrupts, limits, rollback and the run log like any cell), or an answer
given on the host. SQL is checked here (runner/sql.py) and guarded in the guest by SQLite's
authorizer (guest/sql.py).

Datasets reach the guest read-only at /data. Mounts are fixed when the session starts, so
the kernel mounts a private staging folder there (empty, read-only to the guest) unless the
policy mounts a data folder of its own; %dataset then hard-links (or copies) the dataset's CSV
files into /data/ID/TABLE.csv. With a policy's own data folder, %dataset loads the datasets
that lie inside it and refuses the others.

Must not import: ipykernel (the kernel passes itself in), wasmtime.
"""

from __future__ import annotations

import os
import shlex
import shutil
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sandbox_kernel.core.runtime_folder import private_mkdtemp
from sandbox_kernel.kernel.magics import MagicResult
from sandbox_kernel.kernel.settings import KernelSettings, guest_can_write
from sandbox_kernel.runner.errors import RunnerError

# The rest of the runner is imported where it is used: most sessions never type %dataset or
# %%sql, and the kernel should not start slower for them (about 50 ms).
if TYPE_CHECKING:
    from sandbox_kernel.runner.datasets import Dataset, DatasetRegistry
    from sandbox_kernel.runner.guard import GuardConfig

__all__ = ["CellPlan", "DataMagics"]

SQL_MAX_ROWS: Final = 10_000
_SQL_USAGE: Final = "usage: %%sql [--out NAME] [--max-rows N], then the query on the next lines"


@dataclass(frozen=True)
class CellPlan:
    """What to do with a cell: run `code` in the guest, or answer with `reply` on the host."""

    code: str
    reply: MagicResult | None = None


class DataMagics:
    """%dataset, %%sql and the guarded mode for one kernel."""

    def __init__(self, settings: KernelSettings) -> None:
        self.guarded = settings.guarded
        self.registry_path = settings.datasets
        self._guard: GuardConfig | None = None
        self._guard_error: str | None = None
        if self.guarded:
            from sandbox_kernel.runner.guard import load_guard_config

            try:
                self._guard = load_guard_config(settings.guard_file)
            except RunnerError as exc:
                self._guard_error = f"guarded mode: every cell is refused: {exc}"
        policy = settings.policy
        self._stage: Path | None = None
        if policy.mount_data_dir is None:
            # Removed when this object goes, or at exit: the kernel needs no shutdown hook.
            self._stage = private_mkdtemp("sandbox-kernel-data-")
            weakref.finalize(self, shutil.rmtree, self._stage, ignore_errors=True)
            policy = policy.with_overrides(mount_data_dir=self._stage)
        self.settings = settings.model_copy(update={"policy": policy})
        """The kernel's settings with /data mounted: the session must start with these."""

    def plan(self, code: str) -> CellPlan:
        """What `code` becomes: guest code, or a host answer (usage error, refusal, listing)."""
        stripped = code.strip()
        first, _, body = stripped.partition("\n")
        if first == "%%sql" or first.startswith("%%sql "):
            return self._sql(first[len("%%sql") :], body)
        if (first == "%dataset" or first.startswith("%dataset ")) and not body:
            return self._dataset(first[len("%dataset") :].strip())
        refusal = self.refusal(code)
        return CellPlan(code, refusal)

    def refusal(self, code: str) -> MagicResult | None:
        """Why the guarded mode refuses `code`; None when it may run (or the mode is off)."""
        if not self.guarded:
            return None
        if self._guard_error is not None or self._guard is None:
            message = self._guard_error or "guarded mode: no guard lists"
            return MagicResult(error=message, ename="PYTHON_POLICY_VIOLATION")
        from sandbox_kernel.runner.guard import check_code

        report = check_code(code, self._guard)
        if report.allowed:
            return None
        return MagicResult(
            error=report.summary(),
            ename="PYTHON_POLICY_VIOLATION",
            traceback=("PYTHON_POLICY_VIOLATION: refused by the guarded mode", *report.details()),
        )

    # -- %%sql -------------------------------------------------------------------------------

    def _sql(self, options: str, sql: str) -> CellPlan:
        from sandbox_kernel.runner import adapter
        from sandbox_kernel.runner.sql import check_sql

        try:
            out, max_rows = _sql_options(options)
        except ValueError as exc:
            return _usage(f"%%sql: {exc}; {_SQL_USAGE}")
        if not sql.strip():
            return _usage(f"%%sql: no query; {_SQL_USAGE}")
        check = check_sql(sql)
        if check.violation is not None:
            message = f"%%sql: line {check.line}: {check.violation}"
            return CellPlan("", MagicResult(error=message, ename="SQL_POLICY_VIOLATION"))
        return CellPlan(adapter.sql_magic_cell(sql, check.identifiers, max_rows, out))

    # -- %dataset ----------------------------------------------------------------------------

    def _dataset(self, dataset_id: str) -> CellPlan:
        from sandbox_kernel.runner import adapter
        from sandbox_kernel.runner.datasets import DatasetRegistry

        if guest_can_write(self.registry_path, self.settings.workspace):
            return _usage(
                f"%dataset: the dataset registry {self.registry_path.name} lies inside the "
                "workspace, which the sandboxed code can write: keep it outside "
                "(SANDBOX_KERNEL_DATASETS)"
            )
        try:
            registry = DatasetRegistry.load(self.registry_path)
            if not dataset_id:
                return CellPlan("", MagicResult(text=_listing(registry)))
            dataset = registry.get(dataset_id)
            tables = self._stage_tables(dataset)
        except (RunnerError, OSError) as exc:
            return _usage(f"%dataset: {exc}")
        return CellPlan(adapter.dataset_cell(tables, dataset.id))

    def _stage_tables(self, dataset: Dataset) -> dict[str, str]:
        """The dataset's tables as guest paths under /data, staged there when needed."""
        policy = self.settings.policy
        data = policy.guest_data_path
        tables = dataset.tables()
        if self._stage is None:
            root = Path(policy.mount_data_dir or "").resolve()
            if not dataset.folder.is_relative_to(root):
                raise RunnerError(
                    f"the policy mounts its own data folder at {data}, and dataset "
                    f"{dataset.id!r} is not inside it"
                )
            inside = dataset.folder.relative_to(root).as_posix()
            prefix = f"{data}/{inside}" if inside != "." else data
            return {t.name: f"{prefix}/{t.file}" for t in tables}
        target = self._stage / dataset.id
        shutil.rmtree(target, ignore_errors=True)  # tables of an earlier load, now gone
        target.mkdir()
        for table in tables:
            _link_or_copy(dataset.folder / table.file, target / f"{table.name}.csv")
        return {t.name: f"{data}/{dataset.id}/{t.name}.csv" for t in tables}


def _sql_options(options: str) -> tuple[str, int]:
    out, max_rows = "", SQL_MAX_ROWS
    words = shlex.split(options)
    while words:
        word = words.pop(0)
        if word in ("--out", "-o") and words:
            out = words.pop(0)
            if not out.isidentifier() or out.startswith("_"):
                raise ValueError(f"--out needs a variable name, not {out!r}")
        elif word == "--max-rows" and words and words[0].isdigit() and int(words[0]) > 0:
            max_rows = int(words.pop(0))
        else:
            raise ValueError(f"unknown or incomplete option {word!r}")
    return out, max_rows


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link when the folders share a file system (instant, no space), else a copy.
    Links are never followed: the registry lists regular files only."""
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copyfile(source, target, follow_symlinks=False)


def _listing(registry: DatasetRegistry) -> str:
    if not len(registry):
        return "no dataset is registered\n"
    lines = []
    for dataset in registry:
        try:
            tables = ", ".join(t.name for t in dataset.tables())
        except RunnerError as exc:
            tables = f"unusable: {exc}"
        lines.append(f"{dataset.id}: {dataset.description or '(no description)'}")
        lines.append(f"    tables: {tables}")
    return "\n".join(lines) + "\n\nload one with %dataset ID\n"


def _usage(message: str) -> CellPlan:
    return CellPlan("", MagicResult(error=message))
