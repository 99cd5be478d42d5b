"""`SandboxLogger`: structured events, one JSON object per line, and `SecurityEventKind`.

Each event goes to a stdlib logger (INFO; security events at WARNING) with its JSON
line as the message, and, when asked, to a text stream and to a file, so a session can
be audited line by line. Values whose key names a secret are replaced by "[redacted]".

Must not import anything from the rest of sandbox_kernel except core, nor wasmtime.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import deque
from collections.abc import Mapping
from datetime import UTC, date, datetime
from enum import Enum, StrEnum
from pathlib import Path, PurePath
from typing import Any, Final, TextIO

from pydantic import BaseModel

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.core.results import RuntimeType

__all__ = ["MAX_EVENTS", "REDACTED", "SandboxLogger", "SecurityEventKind"]

MAX_EVENTS: Final = 1000
"""How many recent events `SandboxLogger.events` keeps."""

REDACTED: Final = "[redacted]"

# Lower-case fragments of field names whose values never reach a log.
_SECRET_KEY_MARKERS: Final = (
    "api_key",
    "apikey",
    "token",
    "secret",
    "password",
    "credential",
    "authorization",
)
_RESERVED: Final = ("event", "ts", "run_id")


class SecurityEventKind(StrEnum):
    """Why a security event was logged: a limit hit or an access refused."""

    FUEL_EXHAUSTION = "fuel_exhaustion"
    MEMORY_LIMIT = "memory_limit"
    TIMEOUT = "timeout"
    OUTPUT_TRUNCATED = "output_truncated"
    FS_DENIED = "fs_denied"
    OPEN_FILES = "open_files"
    FILE_SIZE = "file_size"
    TRAP = "trap"
    SYMLINK_SKIPPED = "symlink_skipped"


class SandboxLogger:
    """Emits structured events for executions and security incidents.

    Events go to `logging.getLogger(name)` (or the given `logger`), and are also appended
    to `stream` and to the file at `path` when those are given, one flushed line each.
    Safe to share between threads.
    """

    def __init__(
        self,
        name: str = "sandbox_kernel",
        *,
        stream: TextIO | None = None,
        path: Path | str | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self._logger = logger if logger is not None else logging.getLogger(name)
        self._stream = stream
        self._path = Path(path) if path is not None else None
        self._events: deque[dict[str, object]] = deque(maxlen=MAX_EVENTS)
        self._lock = threading.Lock()

    @property
    def events(self) -> list[dict[str, object]]:
        """The events emitted so far, oldest first (the last MAX_EVENTS)."""
        with self._lock:
            return list(self._events)

    def execution_start(
        self,
        runtime: RuntimeType | str,
        policy: ExecutionPolicy,
        run_id: str | None = None,
        **fields: object,
    ) -> dict[str, object]:
        """Log that an execution starts under `policy` (its snapshot is included)."""
        named = {"runtime": str(runtime), "policy": policy.snapshot()}
        return self._emit("execution_start", logging.INFO, run_id, {**fields, **named})

    def execution_complete(
        self,
        success: bool,
        duration_ms: float,
        fuel_consumed: int,
        run_id: str | None = None,
        **fields: object,
    ) -> dict[str, object]:
        """Log how an execution ended."""
        named = {"success": success, "duration_ms": duration_ms, "fuel_consumed": fuel_consumed}
        return self._emit("execution_complete", logging.INFO, run_id, {**fields, **named})

    def security_event(
        self,
        kind: SecurityEventKind | str,
        detail: str,
        run_id: str | None = None,
        **fields: object,
    ) -> dict[str, object]:
        """Log a limit hit or an access refused, at WARNING."""
        named = {"kind": str(kind), "detail": detail}
        return self._emit("security_event", logging.WARNING, run_id, {**fields, **named})

    def emit(
        self,
        event: str,
        /,
        *,
        level: int = logging.INFO,
        run_id: str | None = None,
        **fields: object,
    ) -> dict[str, object]:
        """Log any event; returns the dict written (JSON types only, secrets redacted).

        `event`, `ts` and `run_id` are set here; fields of those names are dropped.
        """
        return self._emit(event, level, run_id, fields)

    def _emit(
        self, event: str, level: int, run_id: str | None, fields: Mapping[str, object]
    ) -> dict[str, object]:
        record: dict[str, object] = {"event": event, "ts": _now(), "run_id": run_id}
        extra = {key: value for key, value in fields.items() if key not in _RESERVED}
        record.update(_clean_mapping(extra))
        line = json.dumps(record, ensure_ascii=False, allow_nan=False)
        with self._lock:
            self._events.append(record)
            self._write(line)
        self._logger.log(level, line, extra={"event": record})
        return record

    def _write(self, line: str) -> None:
        """Append `line` to the stream and the file; an I/O failure must not stop a run."""
        if self._stream is not None:
            try:
                self._stream.write(line + "\n")
                self._stream.flush()
            except (OSError, ValueError) as exc:  # ValueError: the stream was closed
                self._logger.error("could not write a sandbox event to the stream: %s", exc)
        if self._path is not None:
            try:
                with self._path.open("a", encoding="utf-8") as file:
                    file.write(line + "\n")
            except OSError as exc:
                self._logger.error("could not write a sandbox event to %s: %s", self._path, exc)


def _now() -> str:
    """UTC time as ISO 8601 with milliseconds: 2025-01-31T12:00:00.123Z."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _is_secret_key(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_KEY_MARKERS)


def _clean_mapping(mapping: Mapping[Any, object]) -> dict[str, object]:
    return {
        str(_clean(key)): REDACTED if _is_secret_key(str(key)) else _clean(value)
        for key, value in mapping.items()
    }


def _clean(value: object) -> object:
    """`value` as JSON types: enums as their value, paths as text, anything else as repr."""
    if isinstance(value, Enum):
        return _clean(value.value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, date):  # datetime too
        return value.isoformat()
    if isinstance(value, BaseModel):
        return _clean(value.model_dump(mode="json"))
    if isinstance(value, Mapping):
        return _clean_mapping(value)
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    if isinstance(value, set | frozenset):
        return [_clean(item) for item in sorted(value, key=repr)]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return repr(value)
