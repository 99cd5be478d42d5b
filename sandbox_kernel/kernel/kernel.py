"""SandboxKernel: the ipykernel Kernel subclass behind the `sandbox-python` kernel spec.

A thin adapter: Jupyter messages in, ReplSandbox calls out, message contents from
`messages.py`. The cell runs on a worker thread so the kernel stays responsive (interrupts,
output streamed while the cell runs); magics are handled here, never in the guest.

Must not import: wasmtime (the kernel knows only the REPL).
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any

from ipykernel.kernelbase import Kernel

from sandbox_kernel import __version__
from sandbox_kernel.host.workspace import diff, snapshot
from sandbox_kernel.kernel import magics, messages
from sandbox_kernel.kernel.runlog import RunLog
from sandbox_kernel.kernel.settings import KernelSettings
from sandbox_kernel.repl.models import CodeExecution, ExecutionStatus
from sandbox_kernel.repl.sandbox import ReplSandbox

__all__ = ["SandboxKernel"]

GUEST_PYTHON = "3.15"


class SandboxKernel(Kernel):
    implementation = "sandbox-kernel"
    implementation_version = __version__
    language = "python"
    language_version = GUEST_PYTHON
    language_info = {  # noqa: RUF012 - ipykernel's contract is a class attribute
        "name": "python",
        "version": GUEST_PYTHON,
        "mimetype": "text/x-python",
        "file_extension": ".py",
        "pygments_lexer": "ipython3",
        "codemirror_mode": {"name": "ipython", "version": 3},
        "nbconvert_exporter": "python",
    }
    banner = (
        f"sandbox-kernel {__version__}: Python {GUEST_PYTHON} in a WebAssembly sandbox "
        "(no network, no host files but /app; limits on CPU, time, memory and output)"
    )
    help_links = [  # noqa: RUF012
        {"text": "Python", "url": "https://docs.python.org/3/"},
        {"text": "sandbox-kernel", "url": "https://pypi.org/project/sandbox-kernel/"},
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = KernelSettings.from_environment()
        self.runlog = RunLog(self.settings.workspace / ".sandbox-kernel" / "runs.jsonl")
        self.repl = ReplSandbox(
            self.settings.repl_config(
                on_stdout=lambda line: self._stream("stdout", line),
                on_stderr=lambda line: self._stream("stderr", line),
                on_display=self._display,
                on_input=self._input,
            )
        )
        self._silent = False
        self._history: list[tuple[int, int, str]] = []
        self._ready = threading.Thread(target=self.repl.initialize, name="sandbox-kernel-start")
        self._ready.daemon = True
        self._ready.start()

    # -- output from the running cell (called on the worker thread) --------------------------

    def _stream(self, name: str, text: str) -> None:
        if not self._silent:
            content = messages.stream_content(name, text)
            self.send_response(self.iopub_socket, "stream", content)

    def _display(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        if not self._silent:
            content = messages.display_content(data, metadata)
            self.send_response(self.iopub_socket, "display_data", content)

    def _input(self, prompt: str, password: bool) -> str:
        if password:
            return str(self.getpass(prompt))
        return str(self.raw_input(prompt))

    # -- interrupts: SIGINT (signal mode, and message mode which ipykernel turns into one) ----

    def pre_handler_hook(self) -> None:
        self.saved_sigint_handler = signal.signal(signal.SIGINT, self._on_sigint)

    def post_handler_hook(self) -> None:
        signal.signal(signal.SIGINT, self.saved_sigint_handler)

    def _on_sigint(self, signum: int, frame: object) -> None:
        self.repl.cancel()

    # -- requests ---------------------------------------------------------------------------

    async def do_execute(
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool = False,
        *,
        cell_meta: dict[str, Any] | None = None,
        cell_id: str | None = None,
    ) -> dict[str, Any]:
        count = self.execution_count
        handled = magics.handle(self, code)
        if handled is not None:
            if not silent and handled:
                self._stream("stdout", handled)
            return messages.execute_reply(None, count)
        await asyncio.to_thread(self._ready.join)
        self._silent = silent
        before = snapshot(self.settings.workspace)
        try:
            execution = await asyncio.to_thread(self.repl.execute, code)
        finally:
            self._silent = False
        created, modified = diff(before, snapshot(self.settings.workspace))
        if store_history and not silent:
            self._history.append((0, count, code))
        self.runlog.record(code, execution, files_created=created, files_modified=modified)
        return self._publish(execution, count, silent, user_expressions)

    def _publish(
        self,
        execution: CodeExecution,
        count: int,
        silent: bool,
        user_expressions: dict[str, Any] | None,
    ) -> dict[str, Any]:
        error = messages.error_content(execution)
        if not silent:
            note = messages.limit_note(execution)
            if note:
                self._stream("stderr", note)
            if execution.result:
                content = messages.execute_result_content(count, execution.result)
                self.send_response(self.iopub_socket, "execute_result", content)
            if error is not None:
                self.send_response(self.iopub_socket, "error", error)
        expressions = self._user_expressions(user_expressions or {})
        return messages.execute_reply(execution, count, expressions, error)

    def _user_expressions(self, expressions: dict[str, str]) -> dict[str, Any]:
        results: dict[str, Any] = {}
        for key, expression in expressions.items():
            value = self.repl.execute(f"({expression})")
            if value.status is ExecutionStatus.OK:
                results[key] = {"status": "ok", "data": value.result or {}, "metadata": {}}
            else:
                results[key] = {"status": "error", "ename": value.ename, "evalue": value.evalue}
        return results

    async def do_complete(self, code: str, cursor_pos: int) -> dict[str, Any]:
        await asyncio.to_thread(self._ready.join)
        reply = await asyncio.to_thread(self.repl.complete, code, cursor_pos)
        return reply or {
            "status": "ok",
            "matches": [],
            "cursor_start": cursor_pos,
            "cursor_end": cursor_pos,
            "metadata": {},
        }

    async def do_inspect(
        self, code: str, cursor_pos: int, detail_level: int = 0, omit_sections: Any = ()
    ) -> dict[str, Any]:
        await asyncio.to_thread(self._ready.join)
        reply = await asyncio.to_thread(self.repl.inspect, code, cursor_pos, detail_level)
        return reply or {"status": "ok", "found": False, "data": {}, "metadata": {}}

    async def do_is_complete(self, code: str) -> dict[str, Any]:
        return magics.is_complete(code)

    async def do_history(
        self,
        hist_access_type: str,
        output: bool,
        raw: bool,
        session: int | None = None,
        start: int | None = None,
        stop: int | None = None,
        n: int | None = None,
        pattern: str | None = None,
        unique: bool = False,
    ) -> dict[str, Any]:
        return {"status": "ok", "history": magics.history(self._history, hist_access_type, n)}

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        self.repl.cancel()
        await asyncio.to_thread(self._ready.join)
        self.repl.destroy()
        return {"status": "ok", "restart": restart}
