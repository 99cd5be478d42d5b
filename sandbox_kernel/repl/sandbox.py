"""ReplSandbox: one persistent CPython-in-WebAssembly session that never loses its state.

    initialize(context=None)   start the guest (from a warm image when one is configured),
                               install the cell driver, bind `context`
    execute(code)              run a cell; a CodeExecution comes back whatever happens
    get_variable(name)         a value from the session, as plain Python
    cancel()                   soft interrupt now (KeyboardInterrupt at the next safe point),
                               hard stop with rollback after `interrupt_grace_seconds`
    destroy()                  release the guest

After every execution that ends by itself, the session's memory image is brought up to date on
a background thread (the session is idle then): only the pages the execution wrote are copied
into it where the host watches writes (host/write_watch), the whole memory elsewhere. The next
execution waits for that copy. A hard stop (fuel, deadline, trap, hard interrupt) restores the
image into a fresh instance, so variables from earlier executions survive and the result says
rolled_back=True.

Must not import: wasmtime (host/ does that), anything Jupyter.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sandbox_kernel.core.errors import SandboxAbandoned, SandboxExecutionError
from sandbox_kernel.core.results import LimitKind
from sandbox_kernel.core.runtime_folder import private_temp_folder
from sandbox_kernel.core.scratch import ScratchFolder
from sandbox_kernel.host.artifacts import python_image
from sandbox_kernel.host.memory_image import MemoryImage
from sandbox_kernel.host.overlay import Overlay, OverlayRefused
from sandbox_kernel.host.session import GuestSession, SessionConfig, TurnLimits, TurnOutcome
from sandbox_kernel.repl import files as layer_view
from sandbox_kernel.repl import warm
from sandbox_kernel.repl.bridged import BridgedSession
from sandbox_kernel.repl.folders import session_folders
from sandbox_kernel.repl.guest_sources import (
    driver_source,
    install_source,
    warm_imports,
)
from sandbox_kernel.repl.lines import LineSplitter
from sandbox_kernel.repl.models import (
    CodeExecution,
    ExecutionStatus,
    REPLConfig,
)
from sandbox_kernel.repl.protocol import DRIVER_NAME, run_cell_turn
from sandbox_kernel.repl.queries import GuestCalls, Streams
from sandbox_kernel.repl.results import (
    REBUILD_NOTE,
    ROLLBACK_NOTE,
    UsageReading,
    execution_from_reply,
    stopped_execution,
)
from sandbox_kernel.runtimes.base import limits_from_policy

__all__ = ["ReplSandbox"]

# Sessions alive in this process: destroyed at interpreter exit, before the host's own hook
# closes any remaining Store (atexit runs hooks in reverse order of registration, and this
# module registers after host/). A session left running at exit (its capture thread copying
# memory, its store open) could otherwise crash the interpreter in wasmtime's teardown.
_LIVE: weakref.WeakSet[ReplSandbox] = weakref.WeakSet()


@atexit.register
def _destroy_live_sessions() -> None:
    for session in list(_LIVE):
        with contextlib.suppress(Exception):  # exit must go on whatever one session does
            session.cancel()
            session.destroy()


_SETUP_FUEL = 50_000_000_000  # installing the driver and warm-start imports
_SETUP_TIMEOUT_SECONDS = 300.0
_SETUP_OUTPUT_BYTES = 1_000_000  # what a failed setup says, for its error
# Our own calls into the guest (completion, inspection, variables): their output is dropped.
HELPER_OUTPUT_BYTES = 64 * 1024


class ReplSandbox(GuestCalls, BridgedSession):
    """A persistent sandboxed Python session (the wasm backend)."""

    def __init__(self, config: REPLConfig | None = None) -> None:
        super().__init__(config)
        self._session: GuestSession | None = None
        self._image: MemoryImage | None = None  # the session before the running execution
        # One long-lived thread updates the memory image after each execution (a new thread
        # per cell cost up to 2 ms); `_capture` is the copy in flight.
        self._copier = concurrent.futures.ThreadPoolExecutor(1, "sandbox-kernel-capture")
        self._capture: concurrent.futures.Future[None] | None = None
        # An execute(defer_image=True) left the session's image for take_image().
        self._image_pending = False
        self._scratch: ScratchFolder | None = None
        self._abandoned = False  # abandon(): no turn runs any more
        self._destroyed = False
        self.rollbacks = 0
        self.overlay: Overlay | None = None  # the notebook folder's, when it is shown as one
        self.folder_notes: list[str] = []  # what the user should hear about the folders
        self.written = layer_view.WrittenSince(None)  # what the cells wrote into the layer
        self._made_workspace = False  # made by this session: removed at the end if still empty
        self.rebuilds = 0  # sessions started again because a cell broke the driver
        # Cells in a row whose driver never reported: a second one means the state the
        # rollbacks return to cannot run cells (an earlier cell damaged it), so it is rebuilt.
        self._unanswered = 0
        self._totals = {"executions": 0, "fuel_consumed": 0, "duration_ms": 0.0}
        _LIVE.add(self)

    # -- lifecycle ---------------------------------------------------------------------------

    def initialize(self, context: object = None) -> None:
        """Start the guest (once) and bind `context` inside it."""
        with self._lock:
            if self._destroyed:
                raise SandboxExecutionError("this session was destroyed")
            if self._session is None:
                self._start()
            self._context = context
            self._load_context()
            if self.config.rollback_images or self._image is None:
                self._image = self._session_or_fail().capture(into=self._image)

    def _load_context(self) -> None:
        """Bind `context` in the guest. Guest code takes part (the guest's json), so this runs
        as our other calls into the guest do; a failure leaves the session as it was."""
        session = self._session_or_fail()
        outcome = self._bounded_turn(f"{DRIVER_NAME}.load_context()", context=True)
        if outcome.trapped:
            execution = self._rolled_back(session, outcome, self._count)
            raise SandboxExecutionError(f"the context could not be loaded: {execution.evalue}")
        if outcome.status != 0:
            detail = outcome.stderr.text().strip().splitlines()
            reason = detail[-1] if detail else f"status {outcome.status}"
            raise SandboxExecutionError(f"the context could not be loaded: {reason}")

    def _start(self) -> None:
        policy = self.config.policy
        self._made_workspace = self._made_workspace or not self.workspace.exists()
        self.workspace.mkdir(parents=True, exist_ok=True)
        self._scratch = private_temp_folder("sandbox-kernel-repl-")
        folders = session_folders(self.config, self.workspace, Path(self._scratch.name))
        preopens, workdir, self.overlay = folders.preopens, folders.workdir, folders.overlay
        self.folder_notes = folders.notes
        self.written = layer_view.WrittenSince(self.overlay)
        ipython = self.config.ipython
        config = SessionConfig(
            preopens=preopens,
            env=policy.guest_env(),
            memory_bytes=policy.memory_bytes,
            guard=limits_from_policy(policy).guard,
            write_guard=self.overlay,
            meter_fuel=policy.meter_fuel,
            watch_writes=self.config.rollback_images,
        )
        image = python_image()
        self._session = GuestSession(image, config, self.bridge)
        layout = warm.layout_of(preopens)  # an image is only valid for the same folders
        # IPython is worth an image by itself: importing it costs seconds.
        wanted = self.config.warm_start_modules or (("IPython",) if ipython else ())
        workspace = policy.guest_mount_path
        driver = driver_source(ipython, workspace, workdir) + warm_imports(wanted, ipython)
        setup = self.config.warm_setup if wanted else None
        if setup is not None:  # the setup's own image first: nothing left to do
            prepared = f"{driver}\n# {setup.key}\n{setup.source}"
            if self._restored(warm.load(image, prepared, wanted, layout, setup.label)):
                return
        if not self._restored(warm.load(image, driver, wanted, layout)):
            self._setup_turn(install_source(workspace, ipython, workdir), hello=True)
            if self.bridge.flag_magic is not None:
                self._session.locate_flag(self.bridge.flag_magic)
            if wanted:
                self._setup_turn(warm_imports(wanted, ipython), image=self._session.make_immortal)
                warm.save(image, driver, wanted, self._session, layout)
        if setup is not None:  # bounded as a cell is: it reads data the operator chose
            self._setup_turn(setup.source, policy.timeout_seconds, policy.fuel_budget)
            warm.save(image, prepared, wanted, self._session, layout, setup.label)

    def _restored(self, saved: MemoryImage | None) -> bool:
        """Start from `saved` when there is one and it fits the policy's memory."""
        if saved is None or saved.size > self.config.policy.memory_bytes:
            return False
        self._session_or_fail().restore(saved)
        self._image = saved  # the session's memory now: later captures patch it
        return True

    def _setup_turn(
        self,
        source: str,
        timeout_seconds: float = _SETUP_TIMEOUT_SECONDS,
        fuel: int = _SETUP_FUEL,
        *,
        hello: bool = False,
        image: Callable[[int, int, int], int] | None = None,
    ) -> None:
        """A turn of our own code (driver install, warm imports, a warm setup): it must
        succeed. `hello` and `image`: the bookkeeping it sends (Bridge.expect)."""
        session = self._session_or_fail()
        self._join_capture()  # never enter the guest while its memory is being copied
        self.bridge.begin(timeout_seconds)
        self.bridge.expect(hello=hello, image=image)
        limits = TurnLimits(
            fuel=fuel,
            timeout_seconds=timeout_seconds,
            stdout_max_bytes=_SETUP_OUTPUT_BYTES,
            stderr_max_bytes=_SETUP_OUTPUT_BYTES,
        )
        outcome = session.turn(source, limits)
        if outcome.status != 0:
            detail = outcome.stderr.text() or outcome.trap_message or f"status {outcome.status}"
            raise SandboxExecutionError(f"the sandbox session could not start: {detail}")

    def _session_or_fail(self) -> GuestSession:
        if self._destroyed:
            raise SandboxExecutionError("this session was destroyed")
        if self._session is None:
            raise SandboxExecutionError("the session is not initialized")
        return self._session

    def destroy(self) -> None:
        """Release the guest and its memory; the session cannot run again."""
        with self._lock:
            self._join_capture()
            self._copier.shutdown(wait=True)
            self._release_session()
            self._destroyed = True
            if self._made_workspace:
                layer_view.remove_if_empty(self.workspace)
            self.bridge.close()
            self.bridge.replies.clear()
            self.bridge.values.clear()

    def _release_session(self) -> None:
        """Close the guest, forget its image and remove its scratch folder."""
        if self._session is not None:
            self._session.close()
        self._session, self._image, self._image_pending = None, None, False
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    # -- executions --------------------------------------------------------------------------

    def execute(
        self,
        code: str,
        *,
        on_stdout: Callable[[str], None] | None = None,
        on_stderr: Callable[[str], None] | None = None,
        defer_image: bool = False,
    ) -> CodeExecution:
        """Run one cell. `on_stdout`/`on_stderr`, when given, replace the config's line
        callbacks for this execution only (a kernel routes each cell's output to its request).

        After a cell the session's rollback image is updated on a thread of its own. With
        `defer_image`, that starts at take_image() instead (or, at the latest, before the
        session next runs anything): a kernel sends its reply first, which the copy would
        otherwise compete with for the CPU (3 ms of an interrupt's reply)."""
        if not isinstance(code, str):
            raise TypeError(f"code must be str, not {type(code).__name__}")
        reading = UsageReading(self.config.llm_usage)
        return reading.attach(self._execute(code, on_stdout, on_stderr, defer_image))

    def _execute(
        self,
        code: str,
        on_stdout: Callable[[str], None] | None,
        on_stderr: Callable[[str], None] | None,
        defer_image: bool,
    ) -> CodeExecution:
        with self._lock:
            if self._session is None and not self._destroyed:
                self.initialize()
            session = self._session_or_fail()
            self._join_capture()
            self._refresh_folder()
            self._count += 1
            number = self._count
            outcome = self._run_cell(session, number, code, on_stdout, on_stderr)
            self._totals["executions"] += 1
            self._totals["fuel_consumed"] += outcome.fuel_consumed
            self._totals["duration_ms"] += outcome.duration_ms
            reply = self.bridge.replies.pop(number, None)
            if outcome.trapped or reply is None:
                execution = self._rolled_back(session, outcome, number)
                if not outcome.trapped:
                    self._unanswered += 1
                    if self._unanswered > 1 or not self._driver_answers():
                        return self._rebuilt(outcome, number)
                return execution
            self._unanswered = 0
            self._image_pending = defer_image and self.config.rollback_images
            if not defer_image and self.config.rollback_images:
                self._start_capture(session)
            return execution_from_reply(reply, outcome, number)

    def _refresh_folder(self) -> None:
        """The notebook folder's files added or replaced by the user since the last cell,
        shown before this one (as on ipykernel); a folder that can no longer be shown this
        way keeps the layer it had."""
        if self.overlay is None:
            return
        try:
            self.overlay.refresh()
        except (OverlayRefused, OSError) as exc:
            self.folder_notes.append(f"the notebook's folder was not brought up to date: {exc}")

    def _run_cell(
        self,
        session: GuestSession,
        number: int,
        code: str,
        on_stdout: Callable[[str], None] | None,
        on_stderr: Callable[[str], None] | None,
    ) -> TurnOutcome:
        with self._streamed(on_stdout, on_stderr) as limits:
            return self._cancellable_turn(session, run_cell_turn(number, code), limits, cell=number)

    @contextlib.contextmanager
    def _streamed(
        self, on_stdout: Callable[[str], None] | None, on_stderr: Callable[[str], None] | None
    ) -> Iterator[TurnLimits]:
        """The policy's limits for a turn whose output goes to the callbacks (else to the
        config's), as whole lines or as it comes (stream_partial_lines)."""
        config, policy = self.config, self.config.policy
        stdout_callback = on_stdout or config.on_stdout
        stderr_callback = on_stderr or config.on_stderr
        partial = config.stream_partial_lines
        out = LineSplitter(stdout_callback, partial=partial) if stdout_callback else None
        err = LineSplitter(stderr_callback, partial=partial) if stderr_callback else None
        try:
            yield TurnLimits(
                fuel=policy.fuel_budget,
                timeout_seconds=policy.timeout_seconds,
                stdout_max_bytes=policy.stdout_max_bytes,
                stderr_max_bytes=policy.stderr_max_bytes,
                on_stdout=out.feed if out else None,
                on_stderr=err.feed if err else None,
            )
        finally:
            for splitter in (out, err):
                if splitter is not None:
                    splitter.flush()

    def _cancellable_turn(
        self, session: GuestSession, source: str, limits: TurnLimits, **expect: Any
    ) -> TurnOutcome:
        """A turn cancel() may stop (a cell's, or a call of ours into guest code): fresh
        budgets and deadline, `expect` says what bookkeeping it may send."""
        self.bridge.begin(limits.timeout_seconds)
        self.bridge.expect(**expect)
        try:
            with self._turn_running():
                # Read after _running is set, as abandon() sets the mark before it reads
                # _running: either this turn sees the mark, or abandon() sees the turn and
                # cancels it.
                if self._abandoned:
                    raise SandboxAbandoned
                return session.turn(source, limits)
        finally:
            self.bridge.expect()

    def _rolled_back(
        self, session: GuestSession, outcome: TurnOutcome, number: int
    ) -> CodeExecution:
        status, reason = self._hard_status(outcome)
        if self._image is not None:
            session.restore(self._image)
            self.rollbacks += 1
        evalue = f"{reason}; {ROLLBACK_NOTE}"
        ename = "KeyboardInterrupt" if status is ExecutionStatus.CANCELLED else "SandboxLimitError"
        rolled_back = self._image is not None
        return stopped_execution(status, ename, evalue, outcome, number, rolled_back)

    def _driver_answers(self) -> bool:
        """After a cell whose driver never reported (and no trap explains it): does the
        session, rolled back, still answer? A cell can damage what runs cells."""
        found, value = self._host_call("__ping__", f"{DRIVER_NAME}.ping()")
        return found and value == "pong"

    def _rebuilt(self, outcome: TurnOutcome, number: int) -> CodeExecution:
        """Start the session again from scratch (the warm image, then the context) and say so:
        its variables are gone; files under the workspace are kept."""
        self._release_session()
        self.rebuilds += 1
        self._unanswered = 0
        self.initialize(self._context)
        return stopped_execution(
            ExecutionStatus.ERROR, "SandboxSessionRebuilt", REBUILD_NOTE, outcome, number
        )

    def _hard_status(self, outcome: TurnOutcome) -> tuple[ExecutionStatus, str]:
        policy, config = self.config.policy, self.config
        if self._hard_requested or outcome.stopped_by == "cancelled":
            return ExecutionStatus.CANCELLED, "interrupted (the cell did not stop by itself)"
        if outcome.limit is LimitKind.FUEL:
            return (
                ExecutionStatus.OUT_OF_FUEL,
                f"out of fuel after {policy.fuel_budget:,} instructions",
            )
        if outcome.limit is LimitKind.TIMEOUT:
            return ExecutionStatus.TIMEOUT, f"timed out after {config.policy.timeout_seconds:g} s"
        session = self._session
        if session is not None and session.memory_bytes() > policy.memory_bytes - (1 << 20):
            return ExecutionStatus.MEMORY, f"out of memory ({policy.memory_bytes:,} bytes)"
        if outcome.trapped:
            return ExecutionStatus.ERROR, f"the guest crashed ({outcome.trap_message})"
        return ExecutionStatus.ERROR, "the cell driver stopped answering"

    # -- images ------------------------------------------------------------------------------

    def _start_capture(self, session: GuestSession) -> None:
        previous = self._image

        def capture() -> None:
            # The image before the last cell is no longer needed: it becomes the image after it.
            self._image = session.capture(into=previous)

        self._capture = self._copier.submit(capture)

    def take_image(self, wait: bool = False) -> None:
        """Start updating the rollback image that execute(defer_image=True) left for later
        (nothing when there is none); with `wait`, and wait until it is done."""
        with self._lock:
            pending, self._image_pending = self._image_pending, False
            if pending and self._session is not None:
                self._start_capture(self._session)
            if wait:
                self._join_capture()

    def _join_capture(self) -> None:
        if self._image_pending:
            self.take_image()
        if self._capture is not None:
            capture, self._capture = self._capture, None
            capture.result()

    # -- interrupt ---------------------------------------------------------------------------

    def _stoppable(self) -> bool:
        return self._session is not None

    def _soft_stop(self) -> None:
        if (session := self._session) is not None:
            session.soft_interrupt()

    def _hard_stop(self) -> None:
        if (session := self._session) is not None:
            session.hard_stop()  # the turn traps; the session is rolled back

    def abandon(self) -> None:
        """Stop for good, for a session whose caller has gone away: the running execution is
        cancelled as by cancel(), and every later call that would run guest code raises
        SandboxAbandoned instead. Unlike cancel(), this holds for a call already made that has
        not reached the guest yet (waiting for the session's lock or its rollback image).
        destroy() still releases the session."""
        self._abandoned = True
        self.cancel()

    def usage(self) -> dict[str, Any]:
        """What the session has used so far: executions, fuel, time, memory, its image."""
        session = self._session
        return {
            **self._totals,
            "memory_bytes": session.memory_bytes() if session is not None else 0,
            "image": session.image.binary.name if session is not None else None,
            "rollbacks": self.rollbacks,
            # what the rollback image copies after each execution
            "capture": "pages written" if session and session.watching else "whole memory",
            "last_capture_bytes": session.last_capture_bytes if session is not None else 0,
        }

    # -- the files the session wrote beside the notebook (repl/files.py) -----------------------

    def files(self) -> list[layer_view.FileChange]:
        """What the session created, changed and deleted in the notebook's folder, compared
        with the user's (its copy-on-write layer); NoLayer without one."""
        return layer_view.changed_files(self.overlay, self.written.kept)

    def keep_files(self, names: list[str], force: bool = False) -> list[layer_view.KeptFile]:
        """Copy the session's files `names` beside the notebook (never over a file of the
        user's unless `force`, never a hidden name, a link, or without `force` a name that
        other programs run as code or configuration)."""
        return layer_view.keep_files(self.overlay, names, force, self.written.kept)

    def diff_file(self, name: str) -> str:
        """A unified diff from the user's text file `name` to the session's."""
        return layer_view.diff_file(self.overlay, name)

    def _host_call(self, key: str, call: str, streams: Streams | None = None) -> tuple[bool, Any]:
        """A call of ours into the guest that runs the user's objects' code (their __dir__,
        __repr__, properties, a widget's handlers): under the policy's fuel and time, ended
        by cancel() as a cell is. Its output is dropped, or with `streams` (stdout and
        stderr callbacks) shown, and what it changed kept in the rollback image, as a
        cell's. A guest failure is (False, None), never an exception (after abandon(),
        SandboxAbandoned: the caller's doing); a hard stop rolls the session back as a
        cell's does."""
        with self._lock:
            if self._session is None:
                self.initialize()
            session = self._session_or_fail()
            if streams is None:
                outcome = self._bounded_turn(call, value=key)
            else:
                self._join_capture()
                with self._streamed(*streams) as limits:
                    outcome = self._cancellable_turn(session, call, limits, value=key)
            found, value = self.bridge.values.pop(key, (False, None))
            if outcome.trapped:
                self._rolled_back(session, outcome, self._count)
                return False, None
            if streams is not None and self.config.rollback_images:
                self._start_capture(session)
            return found, value

    def _bounded_turn(self, source: str, **expect: Any) -> TurnOutcome:
        """A turn of ours that runs guest code: the policy's fuel and time, cancel() ends it,
        its output is dropped; `expect` says what bookkeeping it may send."""
        session = self._session_or_fail()
        self._join_capture()
        policy = self.config.policy
        limits = TurnLimits(
            fuel=policy.fuel_budget,
            timeout_seconds=policy.timeout_seconds,
            stdout_max_bytes=HELPER_OUTPUT_BYTES,
            stderr_max_bytes=HELPER_OUTPUT_BYTES,
        )
        return self._cancellable_turn(session, source, limits, **expect)
