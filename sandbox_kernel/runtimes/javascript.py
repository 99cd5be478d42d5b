"""JavaScriptSandbox: one-shot QuickJS-NG in WebAssembly, run as `qjs --std /app/user_code.js`.

The same contract as PythonSandbox: console.log on stdout, an uncaught error or a syntax
error on stderr with success False, fuel, memory, wall-clock and output limits, file deltas
in the workspace. `std` and `os` (the `qjs:std` and `qjs:os` modules) are also globals, as
`qjs --std` gives them; a file that parses as a module runs as one (as `qjs file.js` does).

Known differences from the `qjs` command, all from the reactor build (it exports no event
loop): promise continuations and `os.setTimeout` callbacks still pending when the script's
synchronous part ends are dropped unless a top-level `await` waits for them; a final partial
line written with `std.out.puts` (no newline) is not flushed; unhandled rejections are not
reported. `console.log` output is always complete.

Must not import: sandbox_kernel.repl, anything Jupyter, wasmtime directly.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from sandbox_kernel.core.logging import SandboxLogger
from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.core.results import LimitKind, RuntimeType, SandboxResult
from sandbox_kernel.host import qjs_abi
from sandbox_kernel.host.artifacts import JavaScriptImage, javascript_image
from sandbox_kernel.host.engine import get_engine
from sandbox_kernel.host.guest_run import RunOutcome, RunSpec, run_guest
from sandbox_kernel.host.wasi_config import Preopen
from sandbox_kernel.runtimes.base import BaseSandbox, limits_from_policy

__all__ = ["JavaScriptSandbox"]

# Parse /src/code.js as a script, then as a module; exit 1 with the error if neither parses.
_CHECKER = (
    "const src = std.loadFile('/src/code.js');"
    "function parse(options) { try { std.evalScript(src, options); return null; }"
    " catch (e) { return e; } }"
    "const asScript = parse({compile_only: true});"
    "const asModule = asScript && parse({compile_only: true, compile_module: true});"
    "if (asScript && asModule) { std.err.puts(String(asModule) + '\\n'); std.exit(1); }"
)


class JavaScriptSandbox(BaseSandbox):
    """Runs JavaScript in a fresh QuickJS-NG guest per `execute`."""

    runtime = RuntimeType.JAVASCRIPT
    code_filename = "user_code.js"

    def __init__(
        self,
        policy: ExecutionPolicy | None = None,
        workspace: Path | str | None = None,
        logger: SandboxLogger | None = None,
        *,
        wasm_binary_path: Path | str | None = None,
    ) -> None:
        super().__init__(policy, workspace, logger)
        self.image: JavaScriptImage = javascript_image(wasm_binary_path)
        self._engine = get_engine()

    def execute(self, code: str, *, inject_setup: bool | None = None) -> SandboxResult:
        """Run `code` in a fresh guest. JavaScript has no setup to inject: `inject_setup`
        may be None or False (as a caller of any runtime may pass), never True."""
        if inject_setup is not None and inject_setup is not False:
            raise ValueError("JavaScriptSandbox has no setup to inject (inject_setup=True)")
        return self._run_file(code, inject_setup=False)

    def validate_code(self, code: str) -> bool:
        """Whether `code` parses as a script or as a module, judged by the guest's own parser
        (`std.evalScript` with `compile_only`) in a separate guest that sees only a read-only
        copy of the code: nothing of it runs, and the workspace is not touched."""
        if not isinstance(code, str):
            return False
        with tempfile.TemporaryDirectory(prefix="sandbox-kernel-jscheck-") as folder:
            Path(folder, "code.js").write_text(code, encoding="utf-8")
            spec = RunSpec(
                argv=(),
                env={},
                preopens=[Preopen(Path(folder), "/src", writable=False)],
                limits=limits_from_policy(self.policy),
            )
            entry = qjs_abi.script_entry(["--std", "-e", _CHECKER])
            outcome = run_guest(self._engine, self._module(), spec, entry)
        return outcome.exit_code == 0 and outcome.limit is None

    def _module(self) -> Any:  # a wasmtime.Module; runtimes do not import wasmtime
        return self._engine.module(self.image.binary, self.image.binary_sha256)

    def _launch(self, spec: RunSpec, inject_setup: bool) -> RunOutcome:
        script = f"{self.policy.guest_mount_path}/{self.code_filename}"
        spec = dataclasses.replace(spec, argv=("qjs", script))
        return run_guest(
            self._engine, self._module(), spec, qjs_abi.script_entry(["--std", script])
        )

    def _classify(self, outcome: RunOutcome) -> LimitKind | None:
        limit = super()._classify(outcome)
        if limit is None and outcome.exit_code not in (0, None) and _out_of_memory(outcome):
            return LimitKind.MEMORY
        return limit

    def _failure_summary(self, outcome: RunOutcome) -> str:
        """The uncaught error's first line (`Error: boom`), or the status."""
        text = outcome.stderr.data().decode("utf-8", errors="replace").strip()
        if outcome.exit_code == 1 and text:
            return f"uncaught exception: {text.splitlines()[0].strip()}"
        return super()._failure_summary(outcome)


def _out_of_memory(outcome: RunOutcome) -> bool:
    text = outcome.stderr.data().decode("utf-8", errors="replace")
    return "out of memory" in text.lower()
