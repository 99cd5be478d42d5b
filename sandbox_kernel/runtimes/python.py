"""PythonSandbox: one-shot CPython 3.15 in WebAssembly, run as `python /app/user_code.py`.

The code is written to the workspace unchanged, so a traceback names /app/user_code.py and the
user's own line numbers. With `inject_setup` (the default) the guest's sys.path also holds
/app and /app/site-packages (after the stdlib, which they cannot shadow), so workspace modules
and packages unpacked there import. The setup is a `-c` prelude that then runs the file, not
lines prepended to it, which would shift every line number and break a leading
`from __future__ import`. `inject_setup=False` leaves sys.path as the image has it: the image
runs isolated, without even the script's folder.

Must not import: sandbox_kernel.repl, anything Jupyter, wasmtime directly.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from sandbox_kernel.core.logging import SandboxLogger
from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.core.results import LimitKind, RuntimeType, SandboxResult
from sandbox_kernel.host import python_abi
from sandbox_kernel.host.artifacts import PythonImage, python_image
from sandbox_kernel.host.engine import get_engine
from sandbox_kernel.host.guest_run import RunOutcome, RunSpec, run_guest
from sandbox_kernel.runtimes.base import BaseSandbox

__all__ = ["PythonSandbox"]

# A failed run whose memory grew to within this of the cap ran out of memory.
_MEMORY_SLACK_BYTES = 1 << 20


class PythonSandbox(BaseSandbox):
    """Runs Python code in a fresh WebAssembly CPython per `execute`."""

    runtime = RuntimeType.PYTHON
    code_filename = "user_code.py"
    reports_start = True

    def __init__(
        self,
        policy: ExecutionPolicy | None = None,
        workspace: Path | str | None = None,
        logger: SandboxLogger | None = None,
        *,
        inject_setup: bool = True,
        wasm_binary_path: Path | str | None = None,
    ) -> None:
        super().__init__(policy, workspace, logger)
        self.inject_setup = inject_setup
        # Checked now, so a missing or tampered image fails here and not mid-notebook.
        self.image: PythonImage = python_image(wasm_binary_path)
        self._engine = get_engine()

    def execute(self, code: str, *, inject_setup: bool | None = None) -> SandboxResult:
        """Run `code` in a fresh guest. `inject_setup` (None: the sandbox's own setting)
        says whether /app and /app/site-packages join sys.path for this run."""
        if inject_setup is not None and not isinstance(inject_setup, bool):
            raise TypeError(
                f"inject_setup must be a bool or None, not {type(inject_setup).__name__}"
            )
        setup = self.inject_setup if inject_setup is None else inject_setup
        return self._run_file(code, setup)

    def validate_code(self, code: str) -> bool:
        """Whether `code` compiles (host-side `compile`, nothing runs). Guest syntax is 3.15's,
        so code using syntax newer than the host's Python is judged by the host's grammar."""
        if not isinstance(code, str):
            return False
        try:
            compile(code, self.code_filename, "exec", flags=ast.PyCF_ONLY_AST)
        except (SyntaxError, ValueError):
            return False
        return True

    def _launch(self, spec: RunSpec, inject_setup: bool) -> RunOutcome:
        module = self._engine.module(self.image.binary, self.image.binary_sha256)
        app = self.policy.guest_mount_path
        extra = (app, f"{app}/site-packages") if inject_setup else ()
        spec = dataclasses.replace(
            spec,
            argv=python_abi.script_argv(f"{app}/{self.code_filename}", extra),
            env={**python_abi.BASE_ENV, **spec.env},
            preopens=[*python_abi.image_preopens(self.image), *spec.preopens],
            start_path=self.code_filename,  # opened under /app by the runner
        )
        return run_guest(self._engine, module, spec, python_abi.run_main)

    def _classify(self, outcome: RunOutcome) -> LimitKind | None:
        limit = super()._classify(outcome)
        failed = outcome.exit_code not in (0, None)
        near_cap = outcome.memory_used_bytes > self.policy.memory_bytes - _MEMORY_SLACK_BYTES
        if limit is None and failed and (near_cap or _ended_in_memory_error(outcome)):
            return LimitKind.MEMORY
        return limit

    def _failure_summary(self, outcome: RunOutcome) -> str:
        """The traceback's last line (`ZeroDivisionError: division by zero`), or the status."""
        lines = _stderr_lines(outcome)
        if outcome.exit_code == 1 and lines:
            return f"uncaught exception: {lines[-1].strip()}"
        return super()._failure_summary(outcome)


def _stderr_lines(outcome: RunOutcome) -> list[str]:
    return outcome.stderr.data().decode("utf-8", errors="replace").strip().splitlines()


def _ended_in_memory_error(outcome: RunOutcome) -> bool:
    """A MemoryError near the end of stderr (CPython may fail again while printing it, and
    end with "lost sys.stderr")."""
    return any(line.startswith("MemoryError") for line in _stderr_lines(outcome)[-5:])
