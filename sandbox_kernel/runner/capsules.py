"""Run capsules: every runner run, persisted in a SQLite file for a person to audit later.

A capsule holds the request as received, its query type, dataset, the code or SQL, the
policy report of the AST check, the response, timings per step, the limits hit and the
sandbox's limits. One row per run in the table `capsules`: a few columns to list and filter
by, and the whole capsule as JSON.

The file is created 0600 in a 0700 folder (capsules hold code and data); each call opens its
own connection, so one store may be used from several threads and processes.

    sandbox-kernel capsules list [--limit N] [--json]
    sandbox-kernel capsules show ID        (a unique prefix of 6 or more characters will do)

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from sandbox_kernel.runner.errors import CapsuleNotFound

__all__ = ["Capsule", "CapsuleStore", "CapsuleSummary", "new_capsule_id"]

_SCHEMA_VERSION: Final = 1
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS capsules (
    id          TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    query_type  TEXT,
    dataset_id  TEXT,
    status      TEXT NOT NULL,
    error_type  TEXT,
    duration_ms REAL NOT NULL,
    capsule     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS capsules_by_time ON capsules (created_at);
"""
_MIN_PREFIX: Final = 6


def new_capsule_id() -> str:
    return uuid.uuid4().hex[:16]


class CapsuleSummary(BaseModel):
    """A capsule's listing line."""

    model_config = ConfigDict(frozen=True)

    id: str
    created_at: str
    query_type: str | None
    dataset_id: str | None
    status: str
    error_type: str | None
    duration_ms: float


class Capsule(BaseModel):
    """One run, as recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    id: str = Field(default_factory=new_capsule_id)
    created_at: str = Field(
        default_factory=lambda: datetime.now(UTC).isoformat(timespec="milliseconds")
    )
    query_type: str | None = None
    dataset_id: str | None = None
    code: str = ""
    """The Python code or the SQL."""
    request: JsonValue = None
    """The request as received (JSON data), even when it was invalid."""
    policy_report: dict[str, Any] | None = None
    """The AST check's report (Python runs that reached it)."""
    response: dict[str, Any] = Field(default_factory=dict)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    """Milliseconds per step: validate, guard, start, load, query, collect, total."""
    limits_hit: list[str] = Field(default_factory=list)
    sandbox: dict[str, Any] = Field(default_factory=dict)
    """The limits the run had (no host paths)."""

    def summary(self) -> CapsuleSummary:
        error = self.response.get("error") or {}
        return CapsuleSummary(
            id=self.id,
            created_at=self.created_at,
            query_type=self.query_type,
            dataset_id=self.dataset_id,
            status=str(self.response.get("status", "error")),
            error_type=error.get("type") if isinstance(error, dict) else None,
            duration_ms=float(self.timings_ms.get("total", 0.0)),
        )


class CapsuleStore:
    """The capsules in one SQLite file (created on first write)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path).expanduser()

    @contextlib.contextmanager
    def _connect(self, create: bool) -> Iterator[sqlite3.Connection]:
        if create:
            self._create_file()
        elif not self.path.is_file():
            raise CapsuleNotFound(f"no run has been recorded yet ({self.path.name} is absent)")
        connection = sqlite3.connect(self.path, timeout=10)
        try:
            with connection:  # one transaction per call
                if create:
                    connection.executescript(_SCHEMA)
                    connection.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
                elif not connection.execute("PRAGMA user_version").fetchone()[0]:
                    # The first writer made the file and has not made the table yet (the
                    # version is set after the table, in the same call).
                    raise CapsuleNotFound("no run has been recorded yet")
                yield connection
        finally:
            connection.close()

    def _create_file(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileExistsError):
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)

    def record(self, capsule: Capsule) -> str:
        """Store `capsule`; its id."""
        summary = capsule.summary()
        row = (
            capsule.id,
            capsule.created_at,
            capsule.query_type,
            capsule.dataset_id,
            summary.status,
            summary.error_type,
            summary.duration_ms,
            capsule.model_dump_json(),
        )
        with self._connect(create=True) as connection:
            connection.execute("INSERT INTO capsules VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        return capsule.id

    def recent(self, limit: int = 20) -> list[CapsuleSummary]:
        """The newest `limit` capsules, newest first (none when nothing was recorded)."""
        try:
            with self._connect(create=False) as connection:
                rows = connection.execute(
                    "SELECT id, created_at, query_type, dataset_id, status, error_type, "
                    "duration_ms FROM capsules ORDER BY created_at DESC, rowid DESC LIMIT ?",
                    (max(0, limit),),
                ).fetchall()
        except CapsuleNotFound:
            return []
        fields = list(CapsuleSummary.model_fields)
        return [CapsuleSummary(**dict(zip(fields, row, strict=True))) for row in rows]

    def get(self, capsule_id: str) -> Capsule:
        """The capsule with this id, or with this unique prefix (6 characters at least).

        Raises:
            CapsuleNotFound: no capsule, or several, match.
        """
        wanted = capsule_id.strip().lower()
        if len(wanted) < _MIN_PREFIX or not wanted.isalnum():
            raise CapsuleNotFound(f"{capsule_id!r} is not a capsule id (or a prefix of 6+)")
        with self._connect(create=False) as connection:
            rows = connection.execute(
                "SELECT capsule FROM capsules WHERE substr(id, 1, ?) = ? LIMIT 2",
                (len(wanted), wanted),
            ).fetchall()
        if not rows:
            raise CapsuleNotFound(f"no capsule has the id {capsule_id!r}")
        if len(rows) > 1:
            raise CapsuleNotFound(f"several capsules start with {capsule_id!r}: give more of it")
        return Capsule.model_validate_json(rows[0][0])
