"""What one execution gives back: `SandboxResult`, with `RuntimeType` and `LimitKind`.

A guest's failure (a traceback, an exhausted limit, a trap) is data in a result, never
a host exception.

Must not import anything from the rest of sandbox_kernel except core, nor wasmtime.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from sandbox_kernel.core.descriptions import described

__all__ = ["LimitKind", "RuntimeType", "SandboxResult", "WheelRecord"]


class RuntimeType(StrEnum):
    """The language a sandbox runs. A `str` whose `str()` is its value ("python")."""

    PYTHON = "python"
    JAVASCRIPT = "javascript"

    @classmethod
    def _missing_(cls, value: object) -> RuntimeType | None:
        # RuntimeType("Python") from a CLI flag or a config file.
        if isinstance(value, str):
            for member in cls:
                if member.value == value.lower():
                    return member
        return None


class LimitKind(StrEnum):
    """The limit that stopped an execution."""

    FUEL = "fuel"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT = "output"
    OPEN_FILES = "open_files"
    FILE_SIZE = "file_size"
    TRAP = "trap"
    """A guest crash: stack overflow, `unreachable`, an out-of-bounds access."""


class WheelRecord(BaseModel):
    """A wheel `%pip install` brought into a session: what it is and its SHA-256, as logged."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    filename: str
    sha256: str
    size: int


def _workspace_paths(paths: list[str]) -> list[str]:
    """Sorted, without repeats; each relative to the workspace and inside it."""
    for path in paths:
        pure = PurePosixPath(path)
        if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path:
            raise ValueError(f"{path!r} is not a POSIX path relative to the workspace")
    return sorted(set(paths))


_WorkspacePaths = Annotated[list[str], AfterValidator(_workspace_paths)]


@described
class SandboxResult(BaseModel):
    """The outcome of one execution: output, resource use, files touched, what stopped it.

    `success` is False when the guest raised, exited non-zero, or hit a limit; `error`
    then says why in one line when the guest's own stderr does not (a limit, a trap).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    success: bool
    """True when the code ran to the end without an error."""
    stdout: str = ""
    """Captured stdout, cut at the policy's stdout_max_bytes."""
    stderr: str = ""
    """Captured stderr, cut at the policy's stderr_max_bytes."""
    exit_code: int | None = None
    """The guest's exit status, when it exited (None when it was stopped)."""
    fuel_consumed: int = Field(default=0, ge=0)
    """Fuel units (Wasm instructions) the execution used, start included: what the policy's
    fuel_budget is compared with."""
    startup_fuel: int = Field(default=0, ge=0)
    """Of fuel_consumed, what the guest's start ran before the user's code began (about 23
    million instructions for Python); 0 where the runtime does not report it (JavaScript)."""
    user_fuel: int = Field(default=0, ge=0)
    """Of fuel_consumed, what the user's code ran (from compiling it to its end). The rest,
    fuel_consumed - startup_fuel - user_fuel, is the interpreter's shutdown."""
    memory_used_bytes: int = Field(default=0, ge=0)
    """Size of the guest's linear memory at the end."""
    duration_ms: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Wall-clock time of the execution."""
    files_created: _WorkspacePaths = Field(default_factory=list)
    """Files the execution created, relative to the workspace, POSIX style, sorted."""
    files_modified: _WorkspacePaths = Field(default_factory=list)
    """Files that existed before and changed, relative to the workspace, sorted."""
    workspace_path: Path | None = None
    """The host folder mounted as the workspace."""
    stdout_truncated: bool = False
    """True when stdout was cut at its cap."""
    stderr_truncated: bool = False
    """True when stderr was cut at its cap."""
    limit: LimitKind | None = None
    """The limit that stopped the execution, if one did."""
    runtime: RuntimeType = RuntimeType.PYTHON
    """The language that ran."""
    error: str | None = None
    """One line saying why it failed, when that is not just the guest's own traceback."""

    @property
    def truncated(self) -> bool:
        """True when either stream was cut."""
        return self.stdout_truncated or self.stderr_truncated
