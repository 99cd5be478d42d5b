"""Jupyter message contents built from the REPL's models: the one place they are written.

    stream          {"name": "stdout" | "stderr", "text": ...}
    display_data    {"data": {...}, "metadata": {...}, "transient": {"display_id"?}}
    update_display_data  (the same, for an earlier display with that display_id)
    clear_output    {"wait": bool}
    execute_result  {"execution_count": n, "data": {...}, "metadata": {...}}
    error           {"ename", "evalue", "traceback"}      (iopub, and merged into the reply)
    execute_reply   {"status", "execution_count", "user_expressions", "payload"} (+ error)

Rich data comes in as `Shown`, which only the output firewall (firewall.py) makes: a bundle
cannot reach a message around it.

Must not import: ipykernel (contents are plain dicts; the kernel sends them).
"""

from __future__ import annotations

from typing import Any

from sandbox_kernel.kernel.firewall import Shown
from sandbox_kernel.repl.models import CodeExecution, ExecutionStatus

__all__ = [
    "clear_output",
    "display_content",
    "error_content",
    "execute_reply",
    "execute_result_content",
    "stream_content",
]


def stream_content(name: str, text: str) -> dict[str, Any]:
    return {"name": name, "text": text}


def display_content(shown: Shown, transient: dict[str, Any] | None = None) -> dict[str, Any]:
    """display_data and update_display_data; `transient` holds the display_id, if any."""
    return {"data": shown.data, "metadata": shown.metadata, "transient": transient or {}}


def clear_output(wait: bool) -> dict[str, Any]:
    return {"wait": bool(wait)}


def execute_result_content(count: int, shown: Shown) -> dict[str, Any]:
    return {"execution_count": count, "data": shown.data, "metadata": shown.metadata}


def error_content(execution: CodeExecution) -> dict[str, Any] | None:
    """The error message for a failed execution, None when it succeeded."""
    if execution.status is ExecutionStatus.OK:
        return None
    ename = execution.ename or execution.status.value
    evalue = execution.evalue if execution.evalue is not None else (execution.error or "")
    traceback = list(execution.traceback)
    if not traceback and not execution.error_shown:  # the host's own errors (limits) have none
        traceback = [f"{ename}: {evalue}"]
    if execution.status is not ExecutionStatus.ERROR and not execution.rolled_back:
        state = "the session was kept"
        traceback.append(f"[sandbox] {execution.status.value}: {state}")
    return {"ename": ename, "evalue": evalue, "traceback": traceback}


def execute_reply(
    execution: CodeExecution | None,
    count: int,
    user_expressions: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    payload: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The execute_reply content; `error` (from error_content) makes it an error reply."""
    reply: dict[str, Any] = {
        "status": "ok" if error is None else "error",
        "execution_count": count,
        "user_expressions": user_expressions or {},
        "payload": payload or [],
    }
    if error is not None:
        reply.update(error)
    return reply
