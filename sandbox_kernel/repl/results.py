"""CodeExecution from a cell driver's reply: one function every backend builds results with,
from a `TurnRecord` (how the turn ran: its streams, time and fuel), which host/'s TurnOutcome
is and the native backends make as a `ChildTurn`.

Must not import: wasmtime, sandbox_kernel.host, anything Jupyter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sandbox_kernel.core.output import CappedStream
from sandbox_kernel.core.usage import LLMUsage
from sandbox_kernel.repl.models import CodeExecution, ExecutionStatus
from sandbox_kernel.repl.protocol import CellReply

__all__ = [
    "MAX_EVALUE_CHARS",
    "MAX_TRACEBACK_CHARS",
    "REBUILD_NOTE",
    "ROLLBACK_NOTE",
    "ChildTurn",
    "TurnRecord",
    "UsageReading",
    "capped",
    "capped_lines",
    "execution_from_reply",
    "stopped_execution",
]

# What a stopped execution's error says happened to the session.
REBUILD_NOTE = (
    "the session could no longer run cells (this cell, or an earlier one, damaged what the "
    "sandbox needs), so it was rebuilt from scratch: its variables are gone, `context` was "
    "loaded again, files written under /app were kept"
)
ROLLBACK_NOTE = (
    "the session was rolled back to its state before this execution "
    "(files written under /app were kept)"
)
MAX_ENAME_CHARS = 200
MAX_EVALUE_CHARS = 64 * 1024
MAX_TRACEBACK_CHARS = 256 * 1024  # all lines together


class TurnRecord(Protocol):
    """How a turn ran, as results are built from it."""

    @property
    def stdout(self) -> CappedStream: ...

    @property
    def stderr(self) -> CappedStream: ...

    @property
    def duration_ms(self) -> float: ...

    @property
    def fuel_consumed(self) -> int: ...


@dataclass(frozen=True)
class ChildTurn:
    """A turn of a native backend's child process: no fuel is metered there."""

    stdout: CappedStream
    stderr: CappedStream
    duration_ms: float
    fuel_consumed: int = 0


def capped(text: str, limit: int) -> str:
    """`text`, or its first part and a notice saying how much was left out: at most `limit`
    characters in all."""
    if len(text) <= limit:
        return text
    notice = f" [sandbox: {len(text) - limit:,} more characters omitted]"
    return text[: max(0, limit - len(notice))] + notice


def capped_lines(lines: list[str], limit: int) -> list[str]:
    """Traceback lines within `limit` characters in all: the first lines, a notice, and the
    last line (the exception itself), each line capped too."""
    each = [capped(line, MAX_EVALUE_CHARS) for line in lines]
    if sum(len(line) for line in each) <= limit:
        return each
    last = each[-1]
    kept, used = [], len(last) + 100
    for line in each[:-1]:
        if used + len(line) > limit:
            break
        kept.append(line)
        used += len(line)
    omitted = len(each) - 1 - len(kept)
    return [*kept, f"[sandbox: {omitted:,} traceback lines omitted]", last]


def execution_from_reply(reply: CellReply, outcome: TurnRecord, number: int) -> CodeExecution:
    """The outcome of cell `number`, which ended by itself and reported `reply`. The error's
    parts are capped (a cell can raise an exception whose message is 20 MB)."""
    error = reply.error
    status = ExecutionStatus(reply.status)
    if error is not None and error.ename == "MemoryError":
        status = ExecutionStatus.MEMORY
    ename = capped(error.ename, MAX_ENAME_CHARS) if error else None
    evalue = capped(error.evalue, MAX_EVALUE_CHARS) if error else None
    return CodeExecution(
        status=status,
        stdout=outcome.stdout.text(),
        stderr=outcome.stderr.text(),
        error=f"{ename}: {evalue}" if error else None,
        ename=ename,
        evalue=evalue,
        traceback=capped_lines(error.traceback, MAX_TRACEBACK_CHARS) if error else [],
        error_shown=error.shown if error else False,
        result=reply.result,
        result_metadata=reply.result_metadata,
        displays=list(reply.displays),
        payload=list(reply.payload),
        duration_ms=outcome.duration_ms,
        fuel_consumed=outcome.fuel_consumed,
        truncated=outcome.stdout.truncated or outcome.stderr.truncated,
        execution_count=number,
    )


def stopped_execution(
    status: ExecutionStatus,
    ename: str,
    evalue: str,
    outcome: TurnRecord,
    number: int,
    rolled_back: bool = False,
) -> CodeExecution:
    """The outcome of cell `number`, which the host stopped (or which ended without a reply)."""
    return CodeExecution(
        status=status,
        stdout=outcome.stdout.text(),
        stderr=outcome.stderr.text(),
        error=f"{ename}: {evalue}",
        ename=ename,
        evalue=evalue,
        duration_ms=outcome.duration_ms,
        fuel_consumed=outcome.fuel_consumed,
        truncated=outcome.stdout.truncated or outcome.stderr.truncated,
        rolled_back=rolled_back,
        execution_count=number,
    )


class UsageReading:
    """The session's model usage when an execution starts; `attach` puts the difference at
    its end into the execution's result (nothing when no model is configured)."""

    def __init__(self, probe: Callable[[], LLMUsage] | None) -> None:
        self._probe = probe
        self._before = probe() if probe is not None else None

    def attach(self, execution: CodeExecution) -> CodeExecution:
        if self._probe is None or self._before is None:
            return execution
        return execution.model_copy(update={"llm": self._probe() - self._before})
