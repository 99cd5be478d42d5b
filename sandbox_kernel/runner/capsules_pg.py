"""Run capsules in PostgreSQL, shared by agent servers on several machines.

    sandbox-kernel serve --database postgresql://user@host:5432/runs

The same table as the SQLite store (capsules.py), made on first use; the capsule's JSON is
kept as text, exactly as written (JSONB would refuse a NUL character a guest printed).
psycopg 3 is the driver (the `postgres` extra). Each thread keeps one connection, opened again
after the server restarts: a write that meets a closed or refused connection is tried again
for up to `retry_seconds`, so a database restarted mid-run loses no capsule.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from sandbox_kernel.runner.capsules import (
    Capsule,
    Capsules,
    CapsuleSummary,
    capsule_row,
    one_capsule,
    schema,
    summaries,
    wanted_id,
)
from sandbox_kernel.runner.errors import RunnerConfigError

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresCapsules"]

_SCHEMA: Final = schema(real="DOUBLE PRECISION", order="seq         BIGSERIAL")
_CONNECT_TIMEOUT_SECONDS: Final = 5
_STATEMENT_TIMEOUT_MS: Final = 10_000


class PostgresCapsules(Capsules):
    """The capsules in a PostgreSQL database."""

    def __init__(self, url: str) -> None:
        try:
            import psycopg  # noqa: F401  (present, or the operator hears how to get it)
        except ImportError:
            raise RunnerConfigError(
                "a postgresql:// capsule database needs psycopg: "
                "pip install 'sandbox-kernel[postgres]'"
            ) from None
        self.url = url
        self._local = threading.local()
        self._schema_made = False
        self._schema_lock = threading.Lock()

    def _transient(self) -> tuple[type[Exception], ...]:
        import psycopg

        return (psycopg.OperationalError, psycopg.InterfaceError)

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
        """This thread's connection in one transaction; dropped when it fails, so the next
        call connects again (a restarted server)."""
        import psycopg

        connection: psycopg.Connection[tuple[object, ...]] | None = getattr(
            self._local, "connection", None
        )
        if connection is None or connection.closed:
            connection = psycopg.connect(
                self.url,
                connect_timeout=_CONNECT_TIMEOUT_SECONDS,
                options=f"-c statement_timeout={_STATEMENT_TIMEOUT_MS}",
            )
            self._local.connection = connection
        try:
            with connection.transaction():
                self._make_schema(connection)
                yield connection
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self._local.connection = None
            connection.close()
            raise

    def _make_schema(self, connection: psycopg.Connection[tuple[object, ...]]) -> None:
        if self._schema_made:
            return
        with self._schema_lock:
            # Two servers making the table at once: the second waits for the first's lock.
            connection.execute("SELECT pg_advisory_xact_lock(7311)")
            for statement in _SCHEMA:
                connection.execute(statement)
            self._schema_made = True

    def _insert(self, capsule: Capsule) -> None:
        row = tuple(v.replace("\0", "") if isinstance(v, str) else v for v in capsule_row(capsule))
        with self._connection() as connection:
            connection.execute(
                "INSERT INTO capsules (id, created_at, query_type, dataset_id, status, "
                "error_type, duration_ms, capsule) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                row,
            )

    def recent(self, limit: int = 20) -> list[CapsuleSummary]:
        with self._connection() as connection:
            rows = connection.execute(
                "SELECT id, created_at, query_type, dataset_id, status, error_type, duration_ms "
                "FROM capsules ORDER BY created_at DESC, seq DESC LIMIT %s",
                (max(0, limit),),
            ).fetchall()
        return summaries(rows)

    def get(self, capsule_id: str) -> Capsule:
        wanted = wanted_id(capsule_id)
        with self._connection() as connection:
            rows = connection.execute(
                "SELECT capsule FROM capsules WHERE left(id, %s) = %s LIMIT 2",
                (len(wanted), wanted),
            ).fetchall()
        return one_capsule(capsule_id, [str(row[0]) for row in rows])

    def count(self) -> int:
        """How many capsules are stored (for operators and tests)."""
        with self._connection() as connection:
            row = connection.execute("SELECT count(*) FROM capsules").fetchone()
        count = row[0] if row else 0
        return count if isinstance(count, int) else 0
