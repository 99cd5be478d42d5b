"""Kernel magics (handled on the host, never by the guest), is_complete and history.

    %policy                  show the session's limits and the policy file they came from
    %policy KEY=VALUE ...    change a limit for this session (fuel_budget, timeout_seconds,
                             stdout_max_bytes, stderr_max_bytes)
    %context PATH            load a workspace file as `context` (text, or bytes if not UTF-8)
    %sandbox                 fuel, memory and time used, the image, rollbacks
    %files [--keep NAME...|--diff NAME]  what the session wrote beside the notebook
                             (files_magic.py)

Every other magic (%time, %who, %matplotlib ...) is IPython's, inside the guest.

Must not import: ipykernel, kernel.py (the kernel passes itself in as a `MagicHost`: the few
things a magic reads, and no more).
"""

from __future__ import annotations

import fnmatch
import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from IPython.core.inputtransformer2 import TransformerManager

from sandbox_kernel.core.errors import PolicyValidationError
from sandbox_kernel.core.policy import ExecutionPolicy

if TYPE_CHECKING:
    from sandbox_kernel.kernel.runlog import RunLog
    from sandbox_kernel.kernel.settings import KernelSettings
    from sandbox_kernel.llm import LLMService
    from sandbox_kernel.repl.sandbox import ReplSandbox

__all__ = ["CONTEXT_MAX_BYTES", "MagicHost", "MagicResult", "handle", "history", "is_complete"]

CONTEXT_MAX_BYTES = 256 * 1024 * 1024  # %context reads no more than the door could carry
_TRANSFORMER = TransformerManager()  # type: ignore[no-untyped-call]  # IPython's, for is_complete

_SESSION_SETTABLE = ("fuel_budget", "timeout_seconds", "stdout_max_bytes", "stderr_max_bytes")


class MagicHost(Protocol):
    """What the kernel's magics read of the kernel: its session, settings, run log and model."""

    repl: ReplSandbox
    settings: KernelSettings
    runlog: RunLog
    llm: LLMService | None
    llm_error: str | None


@dataclass(frozen=True)
class MagicResult:
    text: str = ""  # printed on stdout
    error: str | None = None  # a UsageError, as IPython answers a failed magic
    ename: str = "UsageError"  # data_magics.py refuses cells with its own error types
    traceback: tuple[str, ...] = ()  # the error's lines, when there is more than `error`


def handle(kernel: MagicHost, code: str) -> MagicResult | None:
    """What a magic cell printed or why it failed; None when `code` is not a kernel magic."""
    stripped = code.strip()
    if not stripped.startswith("%") or "\n" in stripped:
        return None
    name, _, rest = stripped[1:].partition(" ")
    handler = _MAGICS.get(name)
    if handler is None:
        return None
    try:
        return MagicResult(text=handler(kernel, rest.strip()))
    except (PolicyValidationError, ValueError, OSError) as exc:
        return MagicResult(error=f"%{name}: {exc}")
    except Exception as exc:  # a magic's failure answers the client, always
        return MagicResult(error=f"%{name}: {type(exc).__name__}: {exc}")


def _policy(kernel: MagicHost, args: str) -> str:
    repl = kernel.repl
    if args:
        changes: dict[str, Any] = {}
        for item in shlex.split(args):
            key, sep, value = item.partition("=")
            if not sep or key not in _SESSION_SETTABLE:
                allowed = ", ".join(_SESSION_SETTABLE)
                raise ValueError(f"use KEY=VALUE with KEY one of {allowed}")
            changes[key] = float(value) if key == "timeout_seconds" else int(value)
        repl.set_limits(repl.config.policy.with_overrides(**changes))
    snapshot = repl.config.policy.snapshot()
    source = kernel.settings.policy_source
    origin = f"policy file: {source}" if source is not None else "policy file: none (defaults)"
    return origin + "\n" + "".join(f"{key}: {value}\n" for key, value in snapshot.items())


def _context(kernel: MagicHost, args: str) -> str:
    if not args:
        raise ValueError("usage: %context PATH (a file under the workspace)")
    root = kernel.settings.workspace.resolve()
    relative = args.removeprefix(kernel.repl.config.policy.guest_mount_path + "/")
    try:  # a link loop the guest planted is a RuntimeError on Python 3.11, an OSError later
        path = (root / relative).resolve()
    except (RuntimeError, OSError):
        path = None
    if path is None or not path.is_relative_to(root) or not path.is_file():
        raise ValueError(f"{args} is not a file in the workspace")
    raw = _read_capped(path, CONTEXT_MAX_BYTES)
    try:
        value: str | bytes = raw.decode("utf-8")
    except UnicodeDecodeError:
        value = raw
    kernel.repl.initialize(context=value)
    return f"context: {len(value):,} {'characters' if isinstance(value, str) else 'bytes'}\n"


def _read_capped(path: Path, limit: int) -> bytes:
    """The file's bytes, opened without following a last-moment link and without waiting (a
    FIFO's open blocks until a writer comes); ValueError for anything but a regular file or
    past `limit` (a sparse file the guest made can claim terabytes)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    descriptor = os.open(path, flags)
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path.name} is larger than {limit:,} bytes")
    return data


def _sandbox(kernel: MagicHost, args: str) -> str:
    repl = kernel.repl
    usage = repl.usage()
    lines = [
        f"image: {usage['image']}",
        f"executions: {usage['executions']}  rollbacks: {repl.rollbacks}",
        _fuel_line(repl.config.policy, usage),
        f"memory: {usage['memory_bytes']:,} of {repl.config.policy.memory_bytes:,} bytes",
        *_image_line(usage),
        _llm_line(kernel),
        f"run log: {kernel.runlog.path}",
        *_files_line(repl),
    ]
    return "\n".join(lines) + "\n"


def _files_line(repl: ReplSandbox) -> list[str]:
    """What the session changed in the notebook's folder (its layer), when it has one."""
    from sandbox_kernel.kernel.files_magic import files_line

    return files_line(repl)


def _fuel_line(policy: ExecutionPolicy, usage: dict[str, Any]) -> str:
    """Which limit stops a runaway cell, and what was used."""
    time_used = f"time: {usage['duration_ms'] / 1000:.2f} s"
    clock = f"the wall clock ({policy.timeout_seconds:g} s a cell)"
    if not policy.meter_fuel:
        return f"fuel: not metered, {clock} stops a runaway cell  {time_used}"
    return (
        f"fuel used: {usage['fuel_consumed']:,} (budget {policy.fuel_budget:,} a cell, and "
        f"{clock})  {time_used}"
    )


def _image_line(usage: dict[str, Any]) -> list[str]:
    """How the rollback image is kept (the wasm backend only: the native one has none)."""
    if "capture" not in usage:
        return []
    last = usage["last_capture_bytes"]
    return [f"rollback image: {usage['capture']} copied after each execution (last {last:,} bytes)"]


def _llm_line(kernel: MagicHost) -> str:
    service = kernel.llm
    if service is None:
        return f"llm: {kernel.llm_error or 'not configured (SANDBOX_KERNEL_LLM_*)'}"
    used, budget = service.meter.read(), service.meter.budget
    approx = "~" if used.tokens_estimated else ""
    text = (
        f"llm: {service.provider.name}, {used.calls} calls ({used.failed_calls} failed), "
        f"{used.rlm_calls} rlm_query, {used.prompt_chars:,} prompt chars, "
        f"{approx}{used.input_tokens:,} tokens in / {approx}{used.output_tokens:,} out, "
        f"{used.seconds:.2f} s"
    )
    caps = [
        f"{name} {value:,}"
        for name, value in (
            ("calls", budget.max_calls),
            ("prompt chars", budget.max_prompt_chars),
            ("tokens", budget.max_tokens),
        )
        if value is not None
    ]
    return text + (f"; budget: {', '.join(caps)}" if caps else "")


def _files(kernel: MagicHost, args: str) -> str:
    from sandbox_kernel.kernel.files_magic import files_magic

    return files_magic(kernel.repl, args)


_MAGICS = {"policy": _policy, "context": _context, "sandbox": _sandbox, "files": _files}


def is_complete(code: str) -> dict[str, Any]:
    """Jupyter's is_complete_reply, as IPython judges it (magics, indented blocks), on the
    host: no guest code runs for it."""
    status, indent = _TRANSFORMER.check_complete(code)
    if status == "incomplete":
        return {"status": status, "indent": " " * (indent or 0)}
    return {"status": status}


def history(
    entries: list[tuple[int, int, str]],
    access: str,
    n: int | None = None,
    *,
    pattern: str | None = None,
    unique: bool = False,
    start: int | None = None,
    stop: int | None = None,
) -> list[tuple[int, int, str]]:
    """(session, line, source) entries of this kernel's executions, oldest first, as
    IPython's history answers: `tail` the last n, `range` lines start to stop (stop
    excluded), `search` those matching the glob `pattern` (case-sensitive), with `unique`
    keeping only the latest of equal sources, then the last n. Kept in memory, never read
    back from the run log: that file sits in the guest's workspace."""
    if access == "range":
        low, high = start or 0, stop
        return [e for e in entries if e[1] >= low and (high is None or e[1] < high)]
    if access == "search":
        found = [e for e in entries if fnmatch.fnmatchcase(e[2], pattern or "*")]
        if unique:
            latest = {source: line for _, line, source in found}
            found = [e for e in found if latest[e[2]] == e[1]]
        return found[-n:] if n else found
    if access == "tail":
        return entries[-n:] if n else list(entries)
    return []
