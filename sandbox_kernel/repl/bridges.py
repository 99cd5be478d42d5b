"""The host's side of the door: answers to the cell driver's requests, within budgets.

One `Bridge` per session. It runs on the thread inside the guest's turn, so every answer is
bounded: waits (sleep, a model's answer, input) end at the cell's deadline or at a cancel; a
callback's failure becomes an exception inside the guest; request counts and bytes per
execution are capped. Nothing here raises into the door except `StopTurn`, which ends a turn
whose deadline or hard cancel came while the host was waiting (the session makes it a trap).

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox_kernel.core.runtime_folder import private_temp_folder
from sandbox_kernel.core.scratch import ScratchFolder
from sandbox_kernel.core.stops import StopTurn
from sandbox_kernel.host import GUEST_PYTHON
from sandbox_kernel.repl import protocol
from sandbox_kernel.repl.models import CommMessage, DisplayMessage, REPLConfig
from sandbox_kernel.repl.protocol import CellReply, error_answer, ok_answer

__all__ = ["Bridge", "escalate_after", "stop_check"]

_WAIT_SLICE_SECONDS = 0.01
MAX_PIP_INSTALLS = 10  # %pip install requests per execution (each runs pip on the host)
# The driver's own bookkeeping: counted against the per-execution budgets like every request,
# and taken only when the host asked for it (the cell's one report, the one value a call of
# ours waits for, the context while it is loaded, hello while the driver installs, the image's
# objects while a warm image is made). Guest code can call the door too: a report nobody asked
# for is refused and never kept.
_BOOKKEEPING = frozenset({"hello", "done", "value", "context", "image"})
# The bridge whose request a callback is answering (set in the callback's context).
_SERVING: contextvars.ContextVar[Bridge | None] = contextvars.ContextVar(
    "sandbox_kernel_serving", default=None
)


def stop_check() -> Callable[[], bool]:
    """For a bridge callback that works long (an rlm_query loop runs a whole session): a check
    that turns True once the execution it answers was interrupted or ran out of time. Called
    outside a callback, a check that stays False."""
    bridge = _SERVING.get()
    if bridge is None:
        return lambda: False
    deadline, execution = bridge.deadline, bridge.execution
    soft, hard = bridge.soft_cancel, bridge.hard_cancel

    def stopped() -> bool:  # a later execution clears the events: it also ends this one
        if bridge.execution != execution or time.monotonic() >= deadline:
            return True
        return soft.is_set() or hard.is_set()

    return stopped


class Bridge:
    """Answers door requests for one session."""

    def __init__(self, config: REPLConfig, context: Callable[[], object]) -> None:
        self.config = config
        self._context = context
        self.soft_cancel = threading.Event()
        self.hard_cancel = threading.Event()
        self.deadline = float("inf")
        self.replies: dict[int, CellReply] = {}
        self.flag_magic: bytes | None = None
        self.values: dict[str, tuple[bool, Any]] = {}
        self.calls = 0
        self.bytes = 0
        self.pip_runs = 0  # %pip installs in this execution
        self.execution = 0  # counts begin(): which execution a callback serves
        # What the host waits for now (see _BOOKKEEPING); None: nothing of that kind.
        self.expected_cell: int | None = None
        self.expected_value: str | None = None
        self.expecting_context = False
        self.expecting_hello = False
        # While a warm image is made: what makes its listed objects immortal (the session's
        # make_immortal); None, and an image request is refused.
        self.immortalize: Callable[[int, int, int], int] | None = None
        self._helper: concurrent.futures.ThreadPoolExecutor | None = None
        # %pip: the wheels the last `pip` request fetched (by SHA-256), in a private folder.
        self._downloads: ScratchFolder | None = None
        self._wheels: dict[str, Path] = {}

    def begin(self, timeout_seconds: float) -> None:
        """A new execution: fresh budgets, deadline and cancel state."""
        self.deadline = time.monotonic() + timeout_seconds
        self.execution += 1
        self.calls = 0
        self.bytes = 0
        self.pip_runs = 0
        self.soft_cancel.clear()
        self.hard_cancel.clear()
        self._wheels = {}  # a wheel is fetched in the execution that asked for it
        self.expect()

    def expect(
        self,
        cell: int | None = None,
        value: str | None = None,
        context: bool = False,
        hello: bool = False,
        image: Callable[[int, int, int], int] | None = None,
    ) -> None:
        """What bookkeeping the running turn may send: its cell's report, the value a call of
        ours waits for, the context, the driver's hello, the warm image's objects (`image`
        makes them immortal). begin() expects nothing."""
        self.expected_cell, self.expected_value = cell, value
        self.expecting_context, self.expecting_hello = context, hello
        self.immortalize = image

    # -- the door ----------------------------------------------------------------------------

    def __call__(self, frame: bytes) -> bytes:
        """One request in, one answer out; only a turn stop escapes."""
        try:
            request = protocol.decode_request(frame)
        except (ValueError, UnicodeDecodeError) as exc:
            return error_answer("ValueError", f"malformed door request: {exc}")
        self.calls += 1
        self.bytes += len(frame)
        if request["op"] in _BOOKKEEPING:
            # Awaited ones pass even past the budgets (a cell that spent them still reports);
            # the rest never reach a handler.
            if not self._awaited(request):
                return error_answer("RuntimeError", f"unexpected {request['op']} request")
            return self._dispatch(request)
        if self.calls > self.config.max_bridge_calls:
            limit = self.config.max_bridge_calls
            return error_answer(
                "RuntimeError", f"too many host requests in one execution ({limit})"
            )
        if self.bytes > self.config.max_bridge_bytes:
            limit = self.config.max_bridge_bytes
            return error_answer("RuntimeError", f"host requests exceeded {limit:,} bytes")
        answer = self._dispatch(request)
        self.bytes += len(answer)
        return answer

    def _dispatch(self, request: dict[str, Any]) -> bytes:
        handler = getattr(self, f"_op_{request['op']}", None)
        if handler is None:
            return error_answer("ValueError", f"unknown door request {request['op']!r}")
        answer: bytes = handler(request)
        return answer

    # -- driver bookkeeping ------------------------------------------------------------------

    def _awaited(self, request: dict[str, Any]) -> bool:
        op = request["op"]
        if op == "done":
            return request.get("cell") == self.expected_cell and self.expected_cell is not None
        if op == "value":
            return request.get("name") == self.expected_value and self.expected_value is not None
        if op == "context":
            return self.expecting_context
        if op == "image":
            return self.immortalize is not None
        return op == "hello" and self.expecting_hello

    def _op_hello(self, request: dict[str, Any]) -> bytes:
        self.expecting_hello = False
        self.flag_magic = bytes.fromhex(str(request.get("flag_magic", "")))
        return ok_answer()

    def _op_image(self, request: dict[str, Any]) -> bytes:
        """A part of the warm image's objects, made immortal while the driver waits for the
        answer (so each is alive): how many were."""
        immortalize = self.immortalize
        if immortalize is None:  # not awaited: never reached (_awaited)
            return error_answer("RuntimeError", "unexpected image request")
        try:
            fields = (int(request["address"]), int(request["count"]), int(request["static"]))
            written = immortalize(*fields)
        except (KeyError, TypeError, ValueError) as exc:  # ImageLayoutError is a ValueError
            return error_answer("ValueError", f"the image's objects were not made immortal: {exc}")
        return ok_answer(written)

    def _op_done(self, request: dict[str, Any]) -> bytes:
        try:
            reply = CellReply.model_validate(request["reply"])
        except (ValueError, KeyError) as exc:
            return error_answer("ValueError", f"malformed cell report: {exc}")
        self.replies[int(request["cell"])] = reply
        self.expected_cell = None  # one report per cell
        return ok_answer()

    def _op_value(self, request: dict[str, Any]) -> bytes:
        self.values[str(request["name"])] = (bool(request.get("found")), request.get("value"))
        self.expected_value = None  # one value per call
        return ok_answer()

    def _op_context(self, request: dict[str, Any]) -> bytes:
        return protocol.binary_answer(self._context())

    def _op_display(self, request: dict[str, Any]) -> bytes:
        try:
            message = DisplayMessage(
                data=dict(request.get("data") or {}),
                metadata=dict(request.get("metadata") or {}),
                transient=dict(request.get("transient") or {}),
                update=request.get("update") is True,
            )
        except (TypeError, ValueError) as exc:
            return error_answer("ValueError", f"malformed display: {_describe(exc)}")
        try:
            if self.config.on_display_message is not None:
                self.config.on_display_message(message)
            elif self.config.on_display is not None:
                self.config.on_display(message.data, message.metadata)
        except Exception as exc:
            return error_answer("RuntimeError", f"on_display failed: {_describe(exc)}")
        return ok_answer()

    def _op_result(self, request: dict[str, Any]) -> bytes:
        """The cell's result, shown when IPython's display hook gives it (also in the reply)."""
        data, metadata = request.get("data"), request.get("metadata") or {}
        if not isinstance(data, dict) or not isinstance(metadata, dict):
            return error_answer("ValueError", "malformed result")
        try:
            if self.config.on_result is not None:
                self.config.on_result(data, metadata)
        except Exception as exc:
            return error_answer("RuntimeError", f"on_result failed: {_describe(exc)}")
        return ok_answer()

    def _op_comm(self, request: dict[str, Any]) -> bytes:
        """A guest comm's message for the frontend (comm_open, comm_msg, comm_close)."""
        try:
            message = CommMessage.model_validate(request)
        except ValueError as exc:
            return error_answer("ValueError", f"malformed comm message: {_describe(exc)}")
        if self.config.on_comm is not None:
            try:
                self.config.on_comm(message)
            except Exception as exc:
                return error_answer("RuntimeError", f"on_comm failed: {_describe(exc)}")
        return ok_answer()

    def _op_parent(self, request: dict[str, Any]) -> bytes:
        """Which request the guest is answering ({"header": ...}; {} outside a kernel)."""
        callback = self.config.on_parent
        return ok_answer(callback() if callback is not None else {})

    def _op_clear_output(self, request: dict[str, Any]) -> bytes:
        callback = self.config.on_clear_output
        if callback is not None:
            try:
                callback(request.get("wait") is True)
            except Exception as exc:
                return error_answer("RuntimeError", f"on_clear_output failed: {_describe(exc)}")
        return ok_answer()

    # -- waits -------------------------------------------------------------------------------

    def _op_sleep(self, request: dict[str, Any]) -> bytes:
        seconds = request.get("seconds")
        if not isinstance(seconds, int | float) or seconds < 0:
            return error_answer("ValueError", "sleep length must be a non-negative number")
        until = time.monotonic() + float(seconds)
        while (left := until - time.monotonic()) > 0:
            interrupted = self._check_waiting()
            if interrupted is not None:
                return interrupted
            time.sleep(min(left, _WAIT_SLICE_SECONDS))
        return ok_answer()

    def _check_waiting(self) -> bytes | None:
        """While the host waits for the guest: a soft cancel answers KeyboardInterrupt; the
        deadline or a hard cancel ends the turn."""
        if self.hard_cancel.is_set():
            raise StopTurn("cancelled")
        if time.monotonic() >= self.deadline:
            raise StopTurn("timeout")
        if self.soft_cancel.is_set():
            return error_answer("KeyboardInterrupt", "interrupted")
        return None

    def _wait_for(self, work: Callable[[], Any]) -> Any:
        """Run `work` on the helper thread, waiting in slices as `_op_sleep` does.

        One helper thread serves the session's calls (a new thread per call cost 0.3 ms and,
        on a busy machine, a few ms of scheduling); a call the guest stops waiting for (an
        interrupt, the deadline) keeps that thread, and the next call gets a new one.
        """
        pool = self._helper
        if pool is None:
            pool = self._helper = concurrent.futures.ThreadPoolExecutor(1, "sandbox-kernel-bridge")
        # The callback sees the caller's context variables (Jupyter's parent message), and
        # which bridge it serves (stop_check).
        context = contextvars.copy_context()
        context.run(_SERVING.set, self)
        future = pool.submit(context.run, work)
        try:
            while True:
                try:
                    return future.result(timeout=_WAIT_SLICE_SECONDS)
                except concurrent.futures.TimeoutError:
                    interrupted = self._check_waiting()
                    if interrupted is not None:
                        self._abandon(pool)
                        return _Interrupted(interrupted)
        except StopTurn:
            self._abandon(pool)
            raise

    def _abandon(self, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        """Leave a call running on its own: its answer will be dropped."""
        if self._helper is pool:
            self._helper = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Release the helper thread (the session is being destroyed)."""
        pool, self._helper = self._helper, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        downloads, self._downloads, self._wheels = self._downloads, None, {}
        if downloads is not None:
            downloads.cleanup()

    def _op_input(self, request: dict[str, Any]) -> bytes:
        callback = self.config.on_input
        if callback is None:
            return error_answer("EOFError", "input() is not available: this session has no input")
        prompt, password = str(request.get("prompt", "")), bool(request.get("password"))
        try:
            return self._answer(lambda: callback(prompt, password), "input", str, reraise=True)
        except EOFError as exc:  # no input to be had: the builtin's own error, inside
            return error_answer("EOFError", str(exc) or "EOF when reading a line")

    def _op_llm_query(self, request: dict[str, Any]) -> bytes:
        callback = self.config.on_llm_query
        if callback is None:
            return error_answer("RuntimeError", "llm_query is not configured for this session")
        prompt = str(request.get("prompt", ""))
        return self._answer(lambda: callback(prompt), "llm_query", str)

    def _op_llm_query_batched(self, request: dict[str, Any]) -> bytes:
        callback = self.config.on_llm_query
        if callback is None:
            return error_answer("RuntimeError", "llm_query is not configured for this session")
        prompts = [str(p) for p in request.get("prompts") or []]
        # Each prompt is a host call of its own: the batch must fit what is left of the budget.
        limit = self.config.max_bridge_calls
        if self.calls - 1 + len(prompts) > limit:
            return error_answer(
                "RuntimeError",
                f"llm_query_batched of {len(prompts):,} prompts would pass the limit of "
                f"{limit:,} host requests in one execution ({self.calls - 1:,} made)",
            )
        self.calls += len(prompts) - 1

        def all_answers() -> list[str]:
            stop = stop_check()  # the execution ended: the prompts not yet sent never are

            def one(prompt: str) -> str:
                if stop():
                    raise RuntimeError("the execution ended before this prompt was sent")
                return callback(prompt)

            workers = max(1, min(self.config.llm_concurrency, len(prompts)))
            with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
                return [str(a) for a in pool.map(one, prompts)]

        return self._answer(all_answers, "llm_query_batched", list)

    def _op_rlm_query(self, request: dict[str, Any]) -> bytes:
        callback = self.config.on_rlm_query
        if callback is None:
            return error_answer("RuntimeError", "rlm_query is not configured for this session")
        task = str(request.get("task", ""))
        ctx = request.get("ctx") if request.get("has_ctx") else self._context()
        return self._answer(lambda: callback(task, ctx), "rlm_query", str)

    # -- %pip (host/packages.py) ----------------------------------------------------------

    def _op_pip(self, request: dict[str, Any]) -> bytes:
        """Choose and download the wheels of `pip install <args>`; the guest then fetches each
        with `wheel` and unpacks it. Answers {"log": [...], "wheels": [...]} or with "error"."""
        # Imported here: packaging and the resolver are needed only by %pip.
        from sandbox_kernel.host.packages import (
            InstalledDist,
            PackageError,
            WheelFetcher,
            parse_pip_args,
        )

        if not self.config.packages:
            return error_answer(
                "PermissionError",
                "%pip install is off in this session (REPLConfig.packages; the guarded kernel "
                "never has it): only the sandbox image's packages can be imported",
            )
        # Each install runs pip on the host, outside the guest's fuel: a few per cell.
        self.pip_runs += 1
        if self.pip_runs > MAX_PIP_INSTALLS:
            return ok_answer(
                {"log": [], "error": f"at most {MAX_PIP_INSTALLS} %pip installs in one cell"}
            )
        try:
            parsed = parse_pip_args(list(request.get("args") or []))
            installed = {
                str(name): InstalledDist.model_validate(dist)
                for name, dist in dict(request.get("installed") or {}).items()
            }
            markers = dict(request.get("environment") or {})
            environment = {str(key): str(value) for key, value in markers.items()}
        except PackageError as exc:
            return ok_answer({"log": [], "error": str(exc)})
        except (TypeError, ValueError) as exc:
            return error_answer("ValueError", f"malformed pip request: {_describe(exc)}")
        folder = self._wheel_folder()
        log: list[str] = []
        deadline = self.deadline

        def fetch() -> dict[str, Any]:
            fetcher = WheelFetcher(
                folder,
                python_version=GUEST_PYTHON,
                max_bytes=self.config.max_package_bytes,
                stop=stop_check(),
                deadline=deadline,
                log=log.append,
                index_url=self.config.package_index_url,
            )
            try:
                wheels = fetcher.resolve(parsed, installed, environment)
            except PackageError as exc:
                return {"log": log, "error": str(exc)}
            self._wheels = {wheel.sha256: folder / wheel.filename for wheel in wheels}
            if wheels and self.config.on_packages is not None:
                self.config.on_packages(wheels)
            return {"log": log, "wheels": [wheel.model_dump() for wheel in wheels]}

        return self._answer(fetch, "pip", dict)

    def _op_wheel(self, request: dict[str, Any]) -> bytes:
        """A wheel the last `pip` answer named, as bytes (a binary answer)."""
        path = self._wheels.get(str(request.get("sha256")))
        if path is None:
            return error_answer("ValueError", "no such wheel was fetched for this execution")
        return protocol.binary_answer(path.read_bytes())

    def _wheel_folder(self) -> Path:
        """A fresh host-private folder for one request's wheels (the last one's removed)."""
        if self._downloads is None:
            self._downloads = private_temp_folder("sandbox-kernel-wheels-")
        root = Path(self._downloads.name)
        for old in root.iterdir():
            shutil.rmtree(old, ignore_errors=True)
        self._wheels = {}
        return Path(tempfile.mkdtemp(dir=root))

    def _answer(
        self, work: Callable[[], Any], name: str, kind: type, reraise: bool = False
    ) -> bytes:
        """The callback's value as an answer; its failure as a RuntimeError inside the guest
        (`reraise`: an EOFError goes to the caller, which knows what it means)."""
        try:
            value = self._wait_for(work)
        except StopTurn:
            raise
        except Exception as exc:
            # A callback that gave up because the execution was interrupted (input() does):
            # the guest hears of the interrupt, not of the callback's way of stopping.
            interrupted = self._check_waiting()
            if interrupted is not None:
                return interrupted
            if isinstance(exc, EOFError) and reraise:
                raise
            return error_answer("RuntimeError", f"{name} failed: {_describe(exc)}")
        if isinstance(value, _Interrupted):
            return value.answer
        if not isinstance(value, kind):
            return error_answer("TypeError", f"{name} callback returned {type(value).__name__}")
        return ok_answer(value)


class _Interrupted:
    def __init__(self, answer: bytes) -> None:
        self.answer = answer


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def escalate_after(
    seconds: float,
    still_running: Callable[[], bool],
    hard_stop: Callable[[], None],
    lock: threading.Lock,
) -> threading.Timer:
    """The second stage of a cancel: after `seconds`, if the same execution still runs, stop
    it the hard way. The check and the stop happen under `lock`, which the session also holds
    while it marks an execution ended: otherwise a stop checked for one cell could land on the
    next (an interrupt storm once timed out the cell after it). A daemon timer, so it never
    holds the interpreter open."""

    def fire() -> None:
        with lock:
            if still_running():
                hard_stop()

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer
