"""BaseSandbox: the contract of a one-shot sandbox, and the run every runtime shares.

A one-shot execution writes the code into the workspace, starts a fresh guest on it under the
policy's limits, and returns a SandboxResult: what was printed, how it ended, which limit (if
any) stopped it, what it cost, and which workspace files it created or changed. The guest's
own failures are data in the result; only misuse by the caller (bad arguments, a sandbox asked
to run twice at once, a missing image) raises.

Each runtime supplies the image-specific parts: its module, argv, preopens, entry point, and
how to read its own failure (a Python MemoryError, say).

Must not import: sandbox_kernel.repl, anything Jupyter, wasmtime directly (host/ does that).
"""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from pathlib import Path

from sandbox_kernel.core.errors import SandboxBusyError
from sandbox_kernel.core.logging import SandboxLogger, SecurityEventKind
from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.core.results import LimitKind, RuntimeType, SandboxResult
from sandbox_kernel.core.scratch import ScratchFolder
from sandbox_kernel.host.guest_run import RunLimits, RunOutcome, RunSpec
from sandbox_kernel.host.run_guard import GuardLimits
from sandbox_kernel.host.wasi_config import Preopen
from sandbox_kernel.host.workspace import diff, snapshot, write_file_nofollow

__all__ = ["BaseSandbox", "limits_from_policy"]

_LIMIT_EVENTS = {
    LimitKind.FUEL: SecurityEventKind.FUEL_EXHAUSTION,
    LimitKind.TIMEOUT: SecurityEventKind.TIMEOUT,
    LimitKind.MEMORY: SecurityEventKind.MEMORY_LIMIT,
    LimitKind.TRAP: SecurityEventKind.TRAP,
    LimitKind.OPEN_FILES: SecurityEventKind.OPEN_FILES,
    LimitKind.FILE_SIZE: SecurityEventKind.FILE_SIZE,
}


def limits_from_policy(policy: ExecutionPolicy) -> RunLimits:
    return RunLimits(
        fuel=policy.fuel_budget,
        memory_bytes=policy.memory_bytes,
        timeout_seconds=policy.timeout_seconds,
        stdout_max_bytes=policy.stdout_max_bytes,
        stderr_max_bytes=policy.stderr_max_bytes,
        guard=GuardLimits(
            max_open_files=policy.max_open_files,
            max_file_bytes=policy.max_file_bytes,
            workspace_max_bytes=policy.workspace_max_bytes,
        ),
    )


# The names a limit goes by on stderr; OutOfFuel is wasmtime's own name for its trap.
_LIMIT_NAMES = {
    LimitKind.FUEL: "OutOfFuel",
    LimitKind.TIMEOUT: "Timeout",
    LimitKind.MEMORY: "MemoryLimit",
    LimitKind.TRAP: "Trap",
    LimitKind.OPEN_FILES: "OpenFilesLimit",
    LimitKind.FILE_SIZE: "FileSizeLimit",
}


def _fuel_text(outcome: RunOutcome, budget: int, reports_start: bool) -> str:
    """Out of fuel, and where: a budget the interpreter's start or shutdown used up is set too
    small for any code, which is worth saying."""
    text = f"out of fuel: the policy allows {budget:,} instructions"
    if outcome.user_fuel is not None:  # the code ended: its shutdown ran out
        return (
            f"{text}; the code ended (it ran {outcome.user_fuel:,}) but the interpreter's "
            f"shutdown did not (its start ran {outcome.startup_fuel:,})"
        )
    if outcome.startup_fuel == 0 and reports_start:
        return f"{text}, all used by the interpreter's start before the code began"
    return text


def _append_within(text: str, line: str, cap: int) -> str:
    """`text` then `line`, at most `cap` bytes (UTF-8): `text` gives way, never `line`."""
    if text and not text.endswith("\n"):
        line = "\n" + line
    room = cap - len(line.encode())
    if room <= 0:
        return line.encode()[:cap].decode("utf-8", "ignore")
    head = text.encode()
    if len(head) > room:
        text = head[:room].decode("utf-8", "ignore")
    return text + line


class BaseSandbox(ABC):
    """A one-shot sandbox: each `execute` runs in a fresh guest over the same workspace."""

    runtime: RuntimeType
    code_filename: str
    reports_start = False  # whether runs say where the user's code began (startup_fuel)

    def __init__(
        self,
        policy: ExecutionPolicy | None = None,
        workspace: Path | str | None = None,
        logger: SandboxLogger | None = None,
    ) -> None:
        self.policy = policy if policy is not None else ExecutionPolicy()
        root = Path(workspace) if workspace is not None else self.policy.mount_host_dir
        self.workspace = root.expanduser().resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)
        data = self.policy.mount_data_dir
        if data is not None and not Path(data).is_dir():
            raise FileNotFoundError(f"mount_data_dir {data} is not a folder")
        self.logger = logger if logger is not None else SandboxLogger()
        self._busy = threading.Lock()

    @abstractmethod
    def execute(self, code: str, *, inject_setup: bool | None = None) -> SandboxResult:
        """Run `code` in a fresh guest and report how it went. `inject_setup` overrides the
        sandbox's own setting for this call (None keeps it); runtimes without a setup refuse
        True."""

    @abstractmethod
    def validate_code(self, code: str) -> bool:
        """Whether `code` parses, without running any of it."""

    @abstractmethod
    def _launch(self, spec: RunSpec, inject_setup: bool) -> RunOutcome:
        """Run the image on `spec`, completing its argv, environment and preopens."""

    def _run_file(self, code: str, inject_setup: bool = True) -> SandboxResult:
        """Write `code` to the workspace, run it, and build the result (the shared flow)."""
        if not isinstance(code, str):
            raise TypeError(f"code must be str, not {type(code).__name__}")
        if not self._busy.acquire(blocking=False):
            raise SandboxBusyError("this sandbox is already running an execution")
        run_id = uuid.uuid4().hex[:12]
        try:
            self.logger.execution_start(
                self.runtime, self.policy, run_id=run_id, workspace=str(self.workspace)
            )
            write_file_nofollow(self.workspace / self.code_filename, code.encode("utf-8"))
            before = snapshot(self.workspace, exclude=frozenset({self.code_filename}))
            # The guest's /tmp: private to this run, removed after it (links are not followed).
            with ScratchFolder("sandbox-kernel-tmp-") as scratch:
                outcome = self._launch(self._spec(Path(scratch)), inject_setup)
            after = snapshot(self.workspace, exclude=frozenset({self.code_filename}))
            result = self._result(outcome, *diff(before, after))
            self._log_execution_metrics(result, run_id=run_id, refusals=outcome.refusals)
            return result
        finally:
            self._busy.release()

    def _spec(self, scratch: Path) -> RunSpec:
        preopens = [Preopen(self.workspace, self.policy.guest_mount_path, writable=True)]
        if self.policy.mount_data_dir is not None:
            data = Path(self.policy.mount_data_dir).resolve()
            preopens.append(Preopen(data, self.policy.guest_data_path, writable=False))
        granted = [p.guest for p in preopens]
        if not any(g == "/tmp" or g.startswith("/tmp/") for g in granted):
            preopens.append(Preopen(scratch, "/tmp", writable=True))
        return RunSpec(
            argv=(),
            env=self.policy.guest_env(),
            preopens=preopens,
            limits=limits_from_policy(self.policy),
        )

    def _classify(self, outcome: RunOutcome) -> LimitKind | None:
        """Which limit ended the run; runtimes refine it from their own output."""
        if outcome.limit is not None:
            return outcome.limit
        if outcome.exit_code != 0 and outcome.refusals:
            kind = outcome.refusals[0][0]
            return LimitKind.OPEN_FILES if kind == "open_files" else LimitKind.FILE_SIZE
        return None

    def _result(
        self, outcome: RunOutcome, created: list[str], modified: list[str]
    ) -> SandboxResult:
        limit = self._classify(outcome)
        success = outcome.exit_code == 0 and limit is None
        error = None if success else self._error_text(outcome, limit)
        stderr = outcome.stderr.text()
        if limit is not None and error is not None:  # the seed's users read stderr for it
            line = f"[sandbox] {_LIMIT_NAMES[limit]}: {error}\n"
            stderr = _append_within(stderr, line, self.policy.stderr_max_bytes)
        return SandboxResult(
            success=success,
            stdout=outcome.stdout.text(),
            stderr=stderr,
            exit_code=outcome.exit_code,
            fuel_consumed=outcome.fuel_consumed,
            **self._fuel_split(outcome),
            memory_used_bytes=outcome.memory_used_bytes,
            duration_ms=outcome.duration_ms,
            files_created=created,
            files_modified=modified,
            workspace_path=self.workspace,
            stdout_truncated=outcome.stdout.truncated,
            stderr_truncated=outcome.stderr.truncated,
            limit=limit,
            runtime=self.runtime,
            error=error,
        )

    def _fuel_split(self, outcome: RunOutcome) -> dict[str, int]:
        """startup_fuel and user_fuel: from the run's markers; a runtime that marks its start
        and never got there spent it all starting; one that cannot mark counts all as user's."""
        consumed, startup = outcome.fuel_consumed, min(outcome.startup_fuel, outcome.fuel_consumed)
        if self.reports_start and startup == 0:
            return {"startup_fuel": consumed, "user_fuel": 0}
        if outcome.user_fuel is not None:  # both markers: the code alone
            return {"startup_fuel": startup, "user_fuel": max(0, outcome.user_fuel)}
        return {"startup_fuel": startup, "user_fuel": consumed - startup}  # stopped inside it

    def _error_text(self, outcome: RunOutcome, limit: LimitKind | None) -> str | None:
        p = self.policy
        texts = {
            LimitKind.FUEL: _fuel_text(outcome, p.fuel_budget, self.reports_start),
            LimitKind.TIMEOUT: f"timed out: the policy allows {p.timeout_seconds:g} s",
            LimitKind.MEMORY: f"out of memory: the policy allows {p.memory_bytes:,} bytes",
            LimitKind.TRAP: f"the guest crashed: {outcome.trap_message}",
            LimitKind.OPEN_FILES: f"too many open files: the policy allows {p.max_open_files}",
            LimitKind.FILE_SIZE: "file size or write budget exceeded: "
            f"files up to {p.max_file_bytes:,} bytes, {p.workspace_max_bytes:,} bytes written",
        }
        if limit is not None:
            return texts.get(limit)
        return self._failure_summary(outcome)

    def _failure_summary(self, outcome: RunOutcome) -> str:
        """One line saying why a run that hit no limit failed; runtimes name the error."""
        return f"exited with status {outcome.exit_code}"

    def _log_execution_metrics(
        self,
        result: SandboxResult,
        run_id: str | None = None,
        refusals: list[tuple[str, str]] | None = None,
    ) -> None:
        """Log the run's completion and every security-relevant thing it met."""
        if result.limit is not None:
            detail = result.error or result.limit.value
            self.logger.security_event(_LIMIT_EVENTS[result.limit], detail, run_id=run_id)
        if result.truncated:
            self.logger.security_event(
                SecurityEventKind.OUTPUT_TRUNCATED, "output cut at the policy's cap", run_id=run_id
            )
        for kind, detail in dict(refusals or []).items():
            self.logger.security_event(kind, detail, run_id=run_id)
        self.logger.execution_complete(
            result.success,
            result.duration_ms,
            result.fuel_consumed,
            run_id=run_id,
            runtime=self.runtime.value,
            limit=result.limit.value if result.limit else None,
            memory_used_bytes=result.memory_used_bytes,
        )
