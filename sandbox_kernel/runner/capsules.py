"""Run capsules: every runner run, persisted in a database for a person to audit later.

A capsule holds the request as received, its query type, dataset, the code or SQL, the
policy report of the AST check, the response, timings per step, the limits hit and the
sandbox's limits. One row per run in the table `capsules`: a few columns to list and filter
by, and the whole capsule as JSON. A capsule is written whole in one statement, or not at all.

Two stores, one interface (`Capsules`):

- `CapsuleStore`: a SQLite file (the default), in WAL mode so that readers never wait for a
  writer and several processes (the agent server's workers, or servers on one machine) share
  it. The file is created 0600 in a 0700 folder (capsules hold code and data); each call
  opens its own connection, so one store may be used from several threads and processes.
- `PostgresCapsules` (capsules_pg.py): a PostgreSQL database named by a URL, which servers on
  several machines share.

A write that meets a database it cannot reach (restarting, locked) is tried again for up to
`retry_seconds`; the capsule's id is the caller's to choose (`Capsule.id`), and writing an id
twice keeps the first capsule, so a run's capsule written again (by the server, for a worker
that died after writing it) is never doubled.

    sandbox-kernel capsules list [--limit N] [--json]
    sandbox-kernel capsules show ID        (a unique prefix of 6 or more characters will do)

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import abc
import contextlib
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from sandbox_kernel.runner.errors import CapsuleNotFound

__all__ = [
    "Capsule",
    "CapsuleStore",
    "CapsuleSummary",
    "CapsuleUnavailable",
    "Capsules",
    "new_capsule_id",
]

_SCHEMA_VERSION: Final = 1


def schema(real: str = "REAL", order: str = "") -> list[str]:
    """The statements that make the capsules table and its index, in a database's dialect:
    its name for a double (`real`), and a column that keeps the insertion order (`order`,
    PostgreSQL's; SQLite has its rowid)."""
    extra = f",\n    {order}" if order else ""
    return [
        "CREATE TABLE IF NOT EXISTS capsules (\n"
        "    id          TEXT PRIMARY KEY,\n"
        "    created_at  TEXT NOT NULL,\n"
        "    query_type  TEXT,\n"
        "    dataset_id  TEXT,\n"
        "    status      TEXT NOT NULL,\n"
        "    error_type  TEXT,\n"
        f"    duration_ms {real} NOT NULL,\n"
        f"    capsule     TEXT NOT NULL{extra}\n"
        ")",
        "CREATE INDEX IF NOT EXISTS capsules_by_time ON capsules (created_at)",
    ]


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
    """Milliseconds per step: validate, guard, digest, start, load, query, collect, total (load
    is 0 when the run started from its dataset's warm image, digest the check of its files)."""
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


class CapsuleUnavailable(OSError):
    """The capsule database could not be reached within the retry time."""


class Capsules(abc.ABC):
    """Where capsules are kept: record, list the newest, read one."""

    retry_seconds: float = 15.0
    """How long a write keeps trying a database it cannot reach (restarting, locked)."""

    def record(self, capsule: Capsule) -> str:
        """Store `capsule` (an id already stored keeps its first capsule); its id.

        Raises:
            CapsuleUnavailable: the database could not be reached within retry_seconds.
        """
        deadline = time.monotonic() + self.retry_seconds
        pause = 0.05
        while True:
            try:
                self._insert(capsule)
                return capsule.id
            except self._transient() as exc:
                if time.monotonic() + pause > deadline:
                    raise CapsuleUnavailable(f"the capsule was not recorded: {exc}") from exc
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    @abc.abstractmethod
    def _insert(self, capsule: Capsule) -> None: ...

    @abc.abstractmethod
    def _transient(self) -> tuple[type[Exception], ...]:
        """The errors a write is tried again after."""

    @abc.abstractmethod
    def recent(self, limit: int = 20) -> list[CapsuleSummary]:
        """The newest `limit` capsules, newest first (none when nothing was recorded)."""

    @abc.abstractmethod
    def get(self, capsule_id: str) -> Capsule:
        """The capsule with this id, or with this unique prefix (6 characters at least).

        Raises:
            CapsuleNotFound: no capsule, or several, match.
        """


CapsuleRow = tuple[str, str, str | None, str | None, str, str | None, float, str]


def capsule_row(capsule: Capsule) -> CapsuleRow:
    """The row a capsule is stored as: its listing columns, then the whole capsule as JSON."""
    summary = capsule.summary()
    return (
        capsule.id,
        capsule.created_at,
        capsule.query_type,
        capsule.dataset_id,
        summary.status,
        summary.error_type,
        summary.duration_ms,
        capsule.model_dump_json(),
    )


def wanted_id(capsule_id: str) -> str:
    """A capsule id or prefix as stored (lower case).

    Raises:
        CapsuleNotFound: it is not one.
    """
    wanted = capsule_id.strip().lower()
    if len(wanted) < _MIN_PREFIX or not wanted.isalnum() or not wanted.isascii():
        raise CapsuleNotFound(f"{capsule_id!r} is not a capsule id (or a prefix of 6+)")
    return wanted


def one_capsule(capsule_id: str, found: list[str]) -> Capsule:
    """The one capsule whose JSON `found` holds for `capsule_id`."""
    if not found:
        raise CapsuleNotFound(f"no capsule has the id {capsule_id!r}")
    if len(found) > 1:
        raise CapsuleNotFound(f"several capsules start with {capsule_id!r}: give more of it")
    return Capsule.model_validate_json(found[0])


class CapsuleStore(Capsules):
    """The capsules in one SQLite file (created on first write), in WAL mode."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path).expanduser()

    def _transient(self) -> tuple[type[Exception], ...]:
        return (sqlite3.OperationalError,)  # "database is locked" past the busy timeout

    @contextlib.contextmanager
    def _connect(self, create: bool) -> Iterator[sqlite3.Connection]:
        if create:
            self._create_file()
        elif not self.path.is_file():
            raise CapsuleNotFound(f"no run has been recorded yet ({self.path.name} is absent)")
        connection = sqlite3.connect(self.path, timeout=10)
        try:
            if create:  # WAL (kept in the file): readers never wait for a writer; NORMAL:
                # a commit is not synced to disk by itself (the WAL is, at checkpoints), which
                # cost a fifth of a small run; a crash of the machine may lose the last runs,
                # never corrupt the file.
                connection.execute("PRAGMA journal_mode = WAL")
                connection.execute("PRAGMA synchronous = NORMAL")
            with connection:  # one transaction per call
                if create:
                    for statement in schema():
                        connection.execute(statement)
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

    def _insert(self, capsule: Capsule) -> None:
        with self._connect(create=True) as connection:
            connection.execute(
                "INSERT OR IGNORE INTO capsules VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                capsule_row(capsule),
            )

    def recent(self, limit: int = 20) -> list[CapsuleSummary]:
        try:
            with self._connect(create=False) as connection:
                rows = connection.execute(
                    "SELECT id, created_at, query_type, dataset_id, status, error_type, "
                    "duration_ms FROM capsules ORDER BY created_at DESC, rowid DESC LIMIT ?",
                    (max(0, limit),),
                ).fetchall()
        except CapsuleNotFound:
            return []
        return summaries(rows)

    def get(self, capsule_id: str) -> Capsule:
        wanted = wanted_id(capsule_id)
        with self._connect(create=False) as connection:
            rows = connection.execute(
                "SELECT capsule FROM capsules WHERE substr(id, 1, ?) = ? LIMIT 2",
                (len(wanted), wanted),
            ).fetchall()
        return one_capsule(capsule_id, [row[0] for row in rows])


def summaries(rows: Iterable[Sequence[Any]]) -> list[CapsuleSummary]:
    fields = list(CapsuleSummary.model_fields)
    return [CapsuleSummary(**dict(zip(fields, row, strict=True))) for row in rows]
