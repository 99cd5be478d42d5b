"""SandboxKernel: the ipykernel Kernel subclass behind the `sandbox-python` kernel spec.

A thin adapter: Jupyter messages in, ReplSandbox calls out, message contents from
`messages.py`. Magics are handled here, never in the guest.
stop_on_error aborts the requests that arrived before a failed cell's reply, never a later one
(aborts.py).

A cell runs on the event loop's own thread, as ipykernel's IPythonKernel runs one: nothing
the loop does is needed while it runs. Its output is published by a ticker thread through the
IOPub thread (streams.py), input() is answered on a bridge thread (stdin.py), a comm message
that comes meanwhile is delivered after the cell (comms.py), and an interrupt reaches the
session through a pipe that the C-level signal handler writes to at once (interrupts.py),
while the main thread is deep in the guest. A worker thread per cell cost two thread hops,
0.15 ms of a trivial cell's 2.2 ms round trip.

The kernel answers its first kernel_info before it has read its settings: the settings, the
firewall, the magics and the session are made on the start thread once that reply has gone
(`_prepare`, `_start_session`), and every request that needs them waits for that
(`_session_ready`). Their modules (pydantic's models of the policy and the results, the
sanitizers, the model providers: about 100 ms of imports) are imported where they are first
used, so that nothing on the path to the first reply loads them.

Must not import: wasmtime (the kernel knows only the REPL); at module level, anything that
brings pydantic (the paragraph above).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ipykernel._version import kernel_protocol_version
from traitlets import Float

from sandbox_kernel import __version__
from sandbox_kernel.kernel.aborts import AbortsByArrival
from sandbox_kernel.kernel.interrupts import InterruptPipe
from sandbox_kernel.repl.host_view import (
    GUEST_PYTHON,
    files_changed,
    list_files,
    preparing_notice,
)

if TYPE_CHECKING:
    from sandbox_kernel.kernel.comms import KernelComms
    from sandbox_kernel.kernel.data_magics import DataMagics
    from sandbox_kernel.kernel.firewall import OutputFirewall
    from sandbox_kernel.kernel.magics import MagicResult
    from sandbox_kernel.kernel.publisher import Publisher
    from sandbox_kernel.kernel.runlog import RunLog
    from sandbox_kernel.kernel.settings import KernelSettings
    from sandbox_kernel.kernel.stdin import StdinReader
    from sandbox_kernel.llm import LLMService
    from sandbox_kernel.repl.models import CodeExecution, REPLConfig
    from sandbox_kernel.repl.sandbox import ReplSandbox

__all__ = ["SandboxKernel"]

_EXIT_WORDS = frozenset({"exit", "quit", "exit()", "quit()"})
# The shell messages KernelComms handles (comms.py); registered in __init__, so that none that
# comes while the kernel starts meets ipykernel's default handlers.
_COMM_REQUESTS = ("comm_open", "comm_msg", "comm_close", "comm_info_request")
_ASK_EXIT = {"source": "ask_exit", "keepkernel": False}
# How long a kernel_info reply waits for a client's iopub to subscribe (app.py): the sockets of
# a client started with the kernel retry every 100 ms, so this is only reached by a client that
# never subscribes, which then gets its reply this much later.
SUBSCRIBER_WAIT_SECONDS = 2.0
# How long the session's start waits for the kernel's first kernel_info_reply (_start_session):
# a client that never asks gets its session started anyway, before its first cell.
START_WAIT_SECONDS = 1.0
# How long a reply waits for the IOPub thread to send the cell's outputs (_outputs_sent): it
# takes a thread hop (about 0.1 ms); this bounds it when that thread is stuck.
OUTPUTS_SENT_SECONDS = 1.0


def _drop(line: str) -> None:
    """Output of a silent execution goes nowhere."""


class SandboxKernel(AbortsByArrival):
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
    # ipykernel sleeps 0.5 ms before every execute_reply (its FIXME: "the flush doesn't seem
    # to make it to the clients"); this kernel waits instead until the IOPub thread has sent
    # what the cell published (_outputs_sent), as ipykernel's own stdout flush does.
    _execute_sleep = Float(0.0).tag(config=True)

    # Made on the start thread (_prepare), before the session: see the module's docstring.
    settings: KernelSettings
    data: DataMagics  # %dataset, %%sql and the guarded mode; its settings mount /data
    runlog: RunLog
    firewall: OutputFirewall
    out: Publisher
    comms: KernelComms  # ipywidgets: comms both ways, through widgets.py
    llm: LLMService | None
    llm_error: str | None  # why the model settings are unusable (llm_query and %sandbox say it)
    _repl_config: REPLConfig

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._answered: Callable[[], None] | None = None  # a cell's run log line, for later
        self._stdin: StdinReader | None = None
        self._history: list[tuple[int, int, str]] = []
        # What the first cell says while the session starts: a cold compile cache takes about
        # a minute once per machine, which should never look like a hang.
        self._preparing: str | None = None
        self._noticed = threading.Event()  # set once `_preparing` is known
        # The start thread waits for this before its imports (start_session).
        self._may_start = threading.Event()
        self._shutting_down = False
        self._unready: str | None = None  # why the kernel could not make its session
        for msg_type in _COMM_REQUESTS:
            self.shell_handlers[msg_type] = functools.partial(self._comm_request, msg_type)
        self._interrupts = InterruptPipe(self._cancel_running)
        self._ready = threading.Thread(target=self._start_session, name="sandbox-kernel-start")
        self._ready.daemon = True
        self._ready.start()

    def _prepare(self) -> None:
        """On the start thread: the settings (the policy file, the environment) and what the
        kernel builds from them."""
        from sandbox_kernel.kernel.data_magics import DataMagics
        from sandbox_kernel.kernel.runlog import RunLog
        from sandbox_kernel.kernel.settings import KernelSettings

        settings = KernelSettings.from_environment()
        self.data = DataMagics(settings)
        self.settings = self.data.settings
        self.runlog = RunLog(self.settings.run_log)
        policy = self.settings.policy  # the guarded spec never trusts outputs (settings.py)
        self._outputs(policy.trust_outputs, policy.display_max_bytes)
        self.llm_error = self.settings.llm_error
        self.llm = self._llm_service()
        config = self.settings.repl_config(
            on_display_message=self.out.display,
            on_result=self.out.result,
            on_clear_output=self.out.clear_output,
            on_input=self._input,
            on_packages=self.runlog.record_packages,
            on_comm=self.comms.publish,
            on_parent=self.comms.parent,
        )
        if self.llm is not None:
            config = self.llm.configure(config)
        elif self.llm_error is not None:
            config.on_llm_query = config.on_rlm_query = self._llm_unusable
        self._repl_config = config

    def _outputs(self, trusted: bool = False, max_bytes: int | None = None) -> None:
        """The firewall and what publishes through it: outputs, and comms both ways."""
        from sandbox_kernel.kernel.comms import KernelComms
        from sandbox_kernel.kernel.firewall import DEFAULT_MAX_BYTES, OutputFirewall
        from sandbox_kernel.kernel.publisher import Publisher

        limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
        self.firewall = OutputFirewall(trusted, limit)
        self.out = Publisher(self.firewall, self._send_iopub)
        self.comms = KernelComms(self)

    def _unprepared(self, exc: Exception) -> None:
        """What a kernel whose settings could not be read keeps: the default firewall, so that
        its replies still go out, and the reason, which every cell's error then gives."""
        self._unready = f"{type(exc).__name__}: {exc}"
        self.log.error("sandbox-kernel could not read its settings: %s", self._unready)
        self._outputs()
        self.llm = None

    repl: ReplSandbox  # made on the start thread (_start_session)

    def _start_session(self) -> None:
        """On the start thread: whether a cold cache must be announced, then the session and its
        guest. The session is made here, not in __init__, and only once the kernel has
        answered its first kernel_info (or a request needs the session, or START_WAIT_SECONDS
        passed): wasmtime's and the session's imports, 100 ms of work under the GIL, had the
        event loop wait for the GIL as it started and answered (start, 16 of each: 1.07x
        ipykernel's with them competing, 1.04x without)."""
        self._may_start.wait(START_WAIT_SECONDS)
        if self._shutting_down:
            self._noticed.set()
            return
        try:
            self._prepare()
            self._preparing = preparing_notice()
        except Exception as exc:  # a policy file that does not load, say: every cell says why
            self._unprepared(exc)
            return
        finally:
            self._noticed.set()
        from sandbox_kernel.repl.sandbox import ReplSandbox

        self.repl = ReplSandbox(self._repl_config)
        self.repl.initialize()

    def _llm_service(self) -> LLMService | None:
        """The model behind llm_query and rlm_query; each rlm_query step goes to the run log."""
        from sandbox_kernel.llm import LLMConfigError

        if self.llm_error is not None:
            return None
        try:
            return self.settings.llm.service(on_step=self.runlog.record_step)
        except LLMConfigError as exc:  # the kernel still starts; llm_query says what is wrong
            self.llm_error = str(exc)
            return None

    def _llm_unusable(self, *args: object) -> str:
        from sandbox_kernel.llm import LLMConfigError

        raise LLMConfigError(self.llm_error or "llm_query is not configured")

    # -- output from the running cell (called on the worker thread) --------------------------

    def _send_iopub(self, msg_type: str, content: dict[str, Any]) -> None:
        """For the Publisher: one message on IOPub, for the current request."""
        self.send_response(self.iopub_socket, msg_type, content)

    def _send_stream(self, name: str, text: str, parent: dict[str, Any]) -> None:
        """A cell's output, for the request that ran it (from any thread)."""
        from sandbox_kernel.kernel import messages

        if self.session is None:  # shutting down
            return
        content = messages.stream_content(name, text)
        self.session.send(
            self.iopub_socket, "stream", content, parent=parent, ident=self._topic("stream")
        )

    def _input(self, prompt: str, password: bool) -> str:
        """On a bridge helper thread: ask the client, until answered or the cell moves on."""
        from sandbox_kernel.kernel.stdin import StdinReader
        from sandbox_kernel.repl.bridges import stop_check

        if not self._allow_stdin:
            raise EOFError("input() is not available: this client does not send input")
        if self._stdin is None:
            self._stdin = StdinReader(self.session, self.stdin_socket)
        ident = self._get_shell_context_var(self._shell_parent_ident)
        parent = self.get_parent("shell")
        return self._stdin.request(prompt, password, ident, parent, stop_check())

    # -- interrupts (interrupts.py) ----------------------------------------------------------

    def _cancel_running(self) -> bool:
        """Cancel the cell running in the guest; False when none is (no session yet, the
        session starting, or the cell not in the guest yet)."""
        repl = getattr(self, "repl", None)
        return repl is not None and not self._ready.is_alive() and repl.cancel()

    def pre_handler_hook(self) -> None:
        """On the main thread, before each request's handler (ipykernel)."""
        self._interrupts.begin()

    def post_handler_hook(self) -> None:
        self._interrupts.end()

    # -- the session's start ----------------------------------------------------------------

    def _wait_for_start(self, interruptible: bool) -> None:
        """Until the start thread ends, or (`interruptible`) an interrupt comes: the start
        goes on then."""
        while self._ready.is_alive():
            if interruptible and self._interrupts.pending.is_set():
                return
            self._ready.join(0.05)

    async def _session_ready(self, announce: bool = False, interruptible: bool = False) -> None:
        """Wait (off the event loop) for the session to have started; `announce` says so on
        stderr when that means compiling the guest (a cold cache); `interruptible`: an
        interrupt meanwhile raises KeyboardInterrupt (a cell's wait, which never ran)."""
        self._may_start.set()
        if self._ready.is_alive():
            if announce:
                await asyncio.to_thread(self._noticed.wait)
                if self._preparing:
                    self.out.stream("stderr", self._preparing)
            await asyncio.to_thread(self._wait_for_start, interruptible)
        if interruptible and self._interrupts.pending.is_set():
            raise KeyboardInterrupt
        if self._unready is not None:
            raise RuntimeError(f"the sandbox could not start: {self._unready}")
        if getattr(self, "repl", None) is None:
            raise RuntimeError("the sandbox session could not be made (the kernel's log says why)")
        if announce and self.repl.folder_notes:  # the first cell says what the folders are
            notes, self.repl.folder_notes = self.repl.folder_notes, []
            self.out.stream("stderr", "".join(f"[sandbox] {note}\n" for note in notes))

    # -- requests ---------------------------------------------------------------------------

    async def _comm_request(self, msg_type: str, stream: Any, ident: Any, parent: Any) -> None:
        """A comm message or comm_info_request, for KernelComms once the start thread has made
        it (it then waits for the session itself)."""
        if not self._noticed.is_set():
            self._may_start.set()
            await asyncio.to_thread(self._noticed.wait)
        comms = getattr(self, "comms", None)
        if comms is not None:  # none only when shut down before the start
            await comms.handle(msg_type, stream, ident, parent)

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
        """The cell's reply, whatever happens: ipykernel sends none when this raises, and a
        client would wait forever, so a failure of the kernel itself is an error reply."""
        from sandbox_kernel.kernel import magics

        try:
            return await self._execute(code, silent, store_history, user_expressions, allow_stdin)
        except Exception as exc:
            self.log.exception("sandbox-kernel failed to run a cell")
            return self._magic_reply(
                magics.MagicResult(
                    error=f"the kernel could not run this cell: {type(exc).__name__}: {exc}",
                    ename="SandboxKernelError",
                ),
                self.execution_count,
                silent,
            )
        finally:
            self._outputs_sent()

    def _outputs_sent(self) -> None:
        """Wait until the IOPub thread has sent what was published so far (at most
        OUTPUTS_SENT_SECONDS), so that a cell's outputs leave before its reply."""
        thread = getattr(self, "iopub_thread", None)
        if thread is None or not thread.thread.is_alive():
            return
        if not getattr(thread, "_events", True):  # its queue is empty: nothing left to send
            return
        sent = threading.Event()
        thread.schedule(sent.set)
        sent.wait(OUTPUTS_SENT_SECONDS)

    async def _execute(
        self,
        code: str,
        silent: bool,
        store_history: bool,
        user_expressions: dict[str, Any] | None,
        allow_stdin: bool,
    ) -> dict[str, Any]:
        from sandbox_kernel.kernel import magics, messages

        count = self.execution_count
        self._allow_stdin = allow_stdin
        if code.strip() in _EXIT_WORDS:  # as IPython: the client (jupyter console) leaves
            return messages.execute_reply(None, count, payload=[_ASK_EXIT])
        # Before any magic: %context must not be undone by a start that comes after it.
        try:
            await self._session_ready(announce=not silent, interruptible=True)
        except KeyboardInterrupt:  # while the session was starting: the cell never ran
            return self._magic_reply(_interrupted(), count, silent)
        handled = magics.handle(self, code)
        if handled is not None:
            return self._magic_reply(handled, count, silent)
        plan = self.data.plan(code)  # %dataset and %%sql as guest code; the guarded check
        if plan.reply is not None:
            return self._magic_reply(plan.reply, count, silent)
        async with self.comms.ordered(self):  # after comm messages that came first (comms.py)
            self.out.begin(silent, count)
            before = list_files(self.settings.workspace)
            if self._interrupts.pending.is_set():  # before the cell reached the guest
                self.out.silent = False
                return self._magic_reply(_interrupted(), count, silent)
            try:  # on this thread: see the module's docstring
                execution, error, payload = self._run(plan.code, count, silent)
                if not silent:
                    self._say_written()
            finally:
                self.out.silent = False
        if store_history and not silent:
            self._history.append((0, count, code))
        expressions: dict[str, Any] = {}
        if user_expressions:
            expressions = self._user_expressions(user_expressions)
        reply = messages.execute_reply(execution, count, expressions, error, payload)
        removed = list(self.out.removed)

        def record() -> None:  # once the reply has gone (execute_request)
            after = list_files(self.settings.workspace)
            created, modified = files_changed(before, after)
            self.runlog.record(
                code,
                execution,
                files_created=created,
                files_modified=modified,
                files_listed=before.complete and after.complete,
                outputs_removed=removed,
            )

        self._answered = record
        return reply

    async def execute_request(self, stream: Any, ident: Any, parent: Any) -> None:
        """ipykernel's, and then what the cell left for after its reply, so that it does not
        compete with the reply for the CPU: its run log line (with the workspace listed again)
        and the session's rollback image (_run defers it; the next cell waits for it). Both
        come before the idle status that tells a client the request is done."""
        try:
            await super().execute_request(stream, ident, parent)
        finally:
            self.set_parent(ident, parent, channel="shell")  # a comm's may have replaced it
            answered, self._answered = self._answered, None
            if answered is not None:
                try:
                    answered()
                except Exception as exc:  # the cell's output says so; the kernel goes on
                    self.log.exception("sandbox-kernel could not write the run log")
                    self.out.stream(
                        "stderr", f"[sandbox] the run log could not be written: {exc}\n"
                    )
            repl = getattr(self, "repl", None)
            if repl is not None:
                repl.take_image()

    def _run(
        self, code: str, count: int, silent: bool
    ) -> tuple[CodeExecution, dict[str, Any] | None, list[dict[str, Any]]]:
        """The cell, its output batched to this request, then its result and error published
        (the reply waits for the IOPub thread to have sent them: _outputs_sent). Returns the
        execution, its error content and the payloads the reply carries."""
        from sandbox_kernel.kernel.streams import StreamPublisher

        if silent:
            execution = self.repl.execute(code, on_stdout=_drop, on_stderr=_drop, defer_image=True)
        else:
            with StreamPublisher(self._send_stream, self.get_parent("shell")) as streams:
                self.out.streams = streams
                try:
                    execution = self.repl.execute(
                        code, on_stdout=streams.stdout, on_stderr=streams.stderr, defer_image=True
                    )
                finally:
                    self.out.streams = None
        return (execution, *self.out.outcome(execution, count, silent))

    def _say_written(self) -> None:
        """One line on stderr when the cell wrote in the notebook folder's layer (unless the
        settings turn it off)."""
        from sandbox_kernel.kernel.files_magic import written_line

        if not self.settings.files_note:
            return
        try:
            line = written_line(self.repl)
        except OSError as exc:
            line = f"[sandbox] what this cell wrote could not be listed: {exc}\n"
        if line:
            self.out.stream("stderr", line)

    def _magic_reply(self, handled: MagicResult, count: int, silent: bool) -> dict[str, Any]:
        from sandbox_kernel.kernel import messages

        if handled.text and not silent:
            self.out.stream("stdout", handled.text)
        if handled.error is None:
            return messages.execute_reply(None, count)
        traceback = list(handled.traceback) or [handled.error]
        error = {"ename": handled.ename, "evalue": handled.error, "traceback": traceback}
        if not silent:
            self.send_response(self.iopub_socket, "error", error)
        return messages.execute_reply(None, count, error=error)

    async def kernel_info_request(self, stream: Any, ident: Any, parent: Any) -> None:
        """ipykernel's, sent once an iopub subscriber is there (app.py): jupyter console runs
        the next cell as soon as it has this reply and would miss that cell's status."""
        subscribed: threading.Event | None = getattr(self.iopub_thread, "subscribed", None)
        if subscribed is not None and not subscribed.is_set():
            await asyncio.to_thread(subscribed.wait, SUBSCRIBER_WAIT_SECONDS)
        await super().kernel_info_request(stream, ident, parent)
        if not self._may_start.is_set():  # the first: once its idle status has been sent
            asyncio.get_running_loop().call_soon(self._start_after_idle)

    def _start_after_idle(self) -> None:
        """Let the session start once the IOPub thread has sent what is queued (the idle status
        that ends the first kernel_info): a client waits for a quiet iopub after that reply."""
        thread = getattr(self, "iopub_thread", None)
        if thread is None or not thread.thread.is_alive():
            self._may_start.set()
        else:
            thread.schedule(self._may_start.set)

    @property
    def kernel_info(self) -> dict[str, Any]:
        """ipykernel's fields, without the debugger: guest code cannot be debugged from the
        host. Built here rather than filtered from ipykernel's, which imports debugpy to ask
        whether a debugger is available (50 ms, on the path to the first kernel_info_reply)."""
        subshells = getattr(self, "_supports_kernel_subshells", False)
        return {
            "protocol_version": kernel_protocol_version,
            "implementation": self.implementation,
            "implementation_version": self.implementation_version,
            "language_info": self.language_info,
            "banner": self.banner,
            "help_links": self.help_links,
            "supported_features": ["kernel subshells"] if subshells else [],
        }

    def _user_expressions(self, expressions: dict[str, Any]) -> dict[str, Any]:
        """On a worker thread: all of them in one call into the guest (policy limits, ended by
        an interrupt); each answer through the firewall."""
        results: dict[str, Any] = {}
        allowed: dict[str, str] = {}
        for key, expression in expressions.items():
            refused = self.data.refusal(str(expression))  # the guarded mode checks these too
            if refused is not None:
                results[key] = {"status": "error", "ename": refused.ename, "evalue": refused.error}
            else:
                allowed[str(key)] = str(expression)
        for key, answer in self.repl.evaluate(allowed).items():
            results[key] = self.firewall.user_expression_answer(answer)
        return results

    async def do_complete(self, code: str, cursor_pos: int) -> dict[str, Any]:
        reply: object = None
        try:
            await self._session_ready()
            reply = await asyncio.to_thread(self.repl.complete, code, cursor_pos)
        except Exception:  # a reply always goes: no matches
            self.log.exception("sandbox-kernel failed to complete")
        return self.firewall.complete_reply(reply, cursor_pos)

    async def do_inspect(
        self, code: str, cursor_pos: int, detail_level: int = 0, omit_sections: Any = ()
    ) -> dict[str, Any]:
        reply: object = None
        try:
            await self._session_ready()
            reply = await asyncio.to_thread(self.repl.inspect, code, cursor_pos, detail_level)
        except Exception:  # a reply always goes: nothing found
            self.log.exception("sandbox-kernel failed to inspect")
        return self.firewall.inspect_reply(reply)

    async def do_is_complete(self, code: str) -> dict[str, Any]:
        from sandbox_kernel.kernel import magics

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
        from sandbox_kernel.kernel import magics

        entries = magics.history(
            self._history,
            hist_access_type,
            n,
            pattern=pattern,
            unique=unique,
            start=start,
            stop=stop,
        )
        if output:  # (session, line, (input, output)); outputs are not kept
            return {"status": "ok", "history": [(a, b, (code, None)) for a, b, code in entries]}
        return {"status": "ok", "history": entries}

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        # Synchronous on purpose: awaiting a thread here let ipykernel close its iopub thread
        # first, and the control thread then hung publishing 'idle' (the process never left).
        repl = getattr(self, "repl", None)  # none when shut down while it starts
        if repl is not None:
            repl.cancel()
        self._shutting_down = True  # a start still waiting to begin never begins
        self._may_start.set()
        self._ready.join()
        repl = getattr(self, "repl", None)
        if repl is not None:
            repl.destroy()
        self._interrupts.stop()
        llm, runlog = getattr(self, "llm", None), getattr(self, "runlog", None)
        if llm is not None:  # neither exists when shut down before the kernel prepared them
            llm.close()
        if runlog is not None:
            runlog.close()
        return {"status": "ok", "restart": restart}


def _interrupted() -> MagicResult:
    """The reply's error for a cell interrupted before it reached the guest."""
    from sandbox_kernel.kernel.magics import MagicResult

    why = "interrupted before the cell reached the sandbox: it did not run"
    return MagicResult(error=why, ename="KeyboardInterrupt")
