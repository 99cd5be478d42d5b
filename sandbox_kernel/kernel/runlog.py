"""The run log: one JSON line per execution of a workspace, for a person to audit later.

Each line: time, execution count, the code, status, the limit hit (if any), fuel, duration,
output bytes, files changed, rolled back or not, and the model calls it made. Each step of an
rlm_query loop is a line of its own, "event": "rlm_step" (prompt size, the code the model
wrote, output size, tokens), written as it happens; so is each %pip install, "event":
"pip_install" (every wheel's name, version, file name, size and SHA-256). Written by the host
only: the file lives outside the workspace (see settings.py), and is still opened without
following links.

Must not import: anything Jupyter.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sandbox_kernel.core.results import WheelRecord
from sandbox_kernel.llm.rlm import RLMStep
from sandbox_kernel.repl.models import CodeExecution
from sandbox_kernel.repl.results import capped

__all__ = ["RunLog"]

MAX_CODE_CHARS = 1_000_000
MAX_FIELD_CHARS = 64 * 1024
MAX_LIST_ITEMS = 1_000


class RunLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd = -1  # kept open between lines; opened again if the file is removed

    def record(self, code: str, execution: CodeExecution, **extra: Any) -> None:
        entry = {
            "ts": _now(),
            "execution_count": execution.execution_count,
            "code": code,
            "status": execution.status.value,
            "error": execution.error,
            "fuel_consumed": execution.fuel_consumed,
            "duration_ms": round(execution.duration_ms, 3),
            "stdout_bytes": len(execution.stdout.encode()),
            "stderr_bytes": len(execution.stderr.encode()),
            "truncated": execution.truncated,
            "rolled_back": execution.rolled_back,
            "llm": execution.llm.model_dump() if execution.llm is not None else None,
            **extra,
        }
        self._write(entry)

    def record_step(self, step: RLMStep) -> None:
        self._write({"ts": _now(), "event": "rlm_step", **step.model_dump()})

    def record_packages(self, wheels: list[WheelRecord]) -> None:
        """The wheels a %pip install fetched, with their SHA-256 (host/packages.py)."""
        entry = {"ts": _now(), "event": "pip_install"}
        self._write({**entry, "wheels": [wheel.model_dump() for wheel in wheels]})

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _write(self, entry: dict[str, Any]) -> None:
        entry = {key: _capped(key, value) for key, value in entry.items()}
        line = json.dumps(entry, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            if self._fd >= 0 and os.fstat(self._fd).st_nlink == 0:  # removed: start a new one
                os.close(self._fd)
                self._fd = -1
            if self._fd < 0:
                self._fd = self._open()
            os.write(self._fd, line.encode("utf-8"))

    def _open(self) -> int:
        """Open for appending through a folder opened without following links: the log's
        folder is in the guest's workspace, so the guest could have replaced it with a link.
        The descriptor is kept, so a link made later changes nothing."""
        folder = self.path.parent
        with contextlib.suppress(FileExistsError):  # a file or a link there: refused below
            folder.mkdir(parents=True, exist_ok=True)
        nofollow = getattr(os, "O_NOFOLLOW", 0)
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | nofollow)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | nofollow | os.O_CLOEXEC
            return os.open(self.path.name, flags, 0o600, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)


def _capped(key: str, value: Any) -> Any:
    """A line stays readable, whatever a cell (or a model) made: long text is cut, lists of
    names are shortened."""
    if isinstance(value, str):
        return capped(value, MAX_CODE_CHARS if key == "code" else MAX_FIELD_CHARS)
    if isinstance(value, list) and len(value) > MAX_LIST_ITEMS:
        return [*value[:MAX_LIST_ITEMS], f"[sandbox: {len(value) - MAX_LIST_ITEMS:,} more]"]
    return value


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
