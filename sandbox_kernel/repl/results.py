"""CodeExecution from a cell driver's reply: one function both backends build results with.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sandbox_kernel.core.usage import LLMUsage
from sandbox_kernel.repl.models import CodeExecution, ExecutionStatus
from sandbox_kernel.repl.protocol import CellReply

if TYPE_CHECKING:
    from sandbox_kernel.host.session import TurnOutcome

__all__ = ["UsageReading", "execution_from_reply", "stopped_execution"]


def execution_from_reply(reply: CellReply, outcome: TurnOutcome, number: int) -> CodeExecution:
    """The outcome of cell `number`, which ended by itself and reported `reply`."""
    error = reply.error
    status = ExecutionStatus(reply.status)
    if error is not None and error.ename == "MemoryError":
        status = ExecutionStatus.MEMORY
    return CodeExecution(
        status=status,
        stdout=outcome.stdout.text(),
        stderr=outcome.stderr.text(),
        error=f"{error.ename}: {error.evalue}" if error else None,
        ename=error.ename if error else None,
        evalue=error.evalue if error else None,
        traceback=list(error.traceback) if error else [],
        result=reply.result,
        result_metadata=reply.result_metadata,
        displays=list(reply.displays),
        duration_ms=outcome.duration_ms,
        fuel_consumed=outcome.fuel_consumed,
        truncated=outcome.stdout.truncated or outcome.stderr.truncated,
        execution_count=number,
    )


def stopped_execution(
    status: ExecutionStatus,
    ename: str,
    evalue: str,
    outcome: TurnOutcome,
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
