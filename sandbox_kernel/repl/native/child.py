"""The native backend's child: a plain CPython that runs cells for NativeReplSandbox. UNSAFE.

Started by sandbox_kernel/repl/native/session.py as

    python -u -P native/child.py DRIVER_PATH REQUESTS_FD REPLIES_FD

with stdin on /dev/null and fd 1 and 2 on pipes the parent reads. JSON-RPC 2.0, one object per
line, runs over the two extra pipes (REQUESTS_FD: parent -> child, REPLIES_FD: child -> parent),
so nothing a cell prints can be taken for a message. At start the child loads the cell driver
(sandbox_kernel/guest/driver.py) by file path, installs it in a fresh `__main__` with a door of
its own, and sends the notification `ready`. Then (methods: the Method enum below):

    parent -> child   turn, params {"source": "<python>"}: run it in __main__
                      -> result {"status": 0}, or an error object (code -32000, TURN_FAILED)
    child -> parent   door, params {"frame": "<base64 request frame>"}, sent while a turn runs
                      -> result "<base64 answer frame>"

Door calls from a cell's other threads are served only while a turn runs (between turns they
wait for the next one), one at a time; their time.sleep is a real sleep in the child.

SIGINT (the parent's soft cancel) is KeyboardInterrupt in cell code, as in any CPython; during
a door exchange it waits until the answer is in, then sets the driver's interrupt flag (the
driver raises at its next check) unless the answer already was a KeyboardInterrupt, so a
message is never cut in half and one cancel is one interrupt; between turns it is dropped (a
cancel that came too late must not hit the next cell). A cell's own SIGINT handler is kept
from turn to turn and left alone during exchanges.

Must import only the standard library: never sandbox_kernel (-P keeps this file's folder off
sys.path, and the driver is loaded by its path).
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import importlib.util
import itertools
import json
import os
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable
from enum import StrEnum, auto
from typing import Any, BinaryIO, Final

JSONRPC: Final = "2.0"
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
TURN_FAILED: Final = -32000  # the turn's source raised
BUSY: Final = -32001  # a request that came while a door call waited for its answer
DRIVER_MODULE: Final = "sandbox_kernel_driver"
_SMALL_FRAME_BYTES: Final = 4096
_REAL_SLEEP: Final = time.sleep  # saved before the driver patches time.sleep


class Method(StrEnum):
    """The protocol's JSON-RPC methods (their values are the lower-case names)."""

    TURN = auto()  # parent -> child: run one turn's source
    DOOR = auto()  # child -> parent: one door request frame
    READY = auto()  # child -> parent, a notification: the driver is installed


Message = dict[str, Any]
SignalHandler = Callable[[int, types.FrameType | None], Any] | int | signal.Handlers | None


def _ignore(signum: int, frame: types.FrameType | None) -> None:
    """SIGINT between turns: a cancel that came after its cell ended."""


class Channel:
    """The child's end of the JSON-RPC pipes.

    Threads of a cell may call the door too (llm_query from a thread pool): one lock makes each
    exchange whole, and a turn request read by a door call while the parent was idle is kept
    for the serve loop.
    """

    def __init__(self, reader: BinaryIO, writer: BinaryIO) -> None:
        self._reader = reader  # readline() -> one line, b"" at EOF
        self._writer = writer  # write() and flush()
        self._lock = threading.RLock()
        self._stash: list[Message] = []
        self._ids = itertools.count(1)
        self._deferred = False
        self.on_interrupt: Callable[[], None] | None = None  # a SIGINT that came mid-exchange
        self.user_handler: SignalHandler = signal.default_int_handler

    # -- framing -------------------------------------------------------------------------

    def send(self, message: Message) -> None:
        line = json.dumps({"jsonrpc": JSONRPC, **message}, ensure_ascii=False)
        with self._lock:
            self._writer.write(line.encode("utf-8") + b"\n")
            self._writer.flush()

    def _receive(self) -> Message | None:
        """The next message (None at EOF); lines that are not JSON objects are answered."""
        while True:
            line = self._reader.readline()
            if not line:
                return None
            try:
                message = json.loads(line)
            except ValueError as exc:
                self.send({"id": None, "error": {"code": PARSE_ERROR, "message": str(exc)}})
                continue
            if isinstance(message, dict):
                return message
            self._error(None, INVALID_REQUEST, "a message is a JSON object")

    def _error(self, request_id: Any, code: int, text: str, data: Any = None) -> None:
        error: Message = {"code": code, "message": text}
        if data is not None:
            error["data"] = data
        self.send({"id": request_id, "error": error})

    # -- the door ------------------------------------------------------------------------

    def door(self, frame: bytes) -> bytes:
        """The driver's door: one request frame to the parent, its answer back."""
        on_main = threading.current_thread() is threading.main_thread()
        if not on_main and _op(frame) == "sleep":
            return _sleep_here(frame)
        guard = on_main and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        if guard:
            signal.signal(signal.SIGINT, self._defer)
        try:
            answer = self._exchange(frame)
        finally:
            if guard:
                signal.signal(signal.SIGINT, signal.default_int_handler)
        if on_main and self._deferred:
            self._deferred = False
            if self.on_interrupt is not None and not _is_interrupt(answer):
                self.on_interrupt()
        return answer

    def _defer(self, signum: int, frame: types.FrameType | None) -> None:
        self._deferred = True

    def _exchange(self, frame: bytes) -> bytes:
        with self._lock:
            request_id = next(self._ids)
            params = {"frame": base64.b64encode(frame).decode("ascii")}
            self.send({"id": request_id, "method": Method.DOOR, "params": params})
            while True:
                message = self._receive()
                if message is None:
                    raise BrokenPipeError("the host closed the session")
                if "method" in message:
                    if message.get("method") == Method.TURN and not self._stash:
                        self._stash.append(message)  # sent while the parent was idle
                    elif "id" in message:
                        self._error(message["id"], BUSY, "a host call is waiting for its answer")
                elif message.get("id") == request_id:
                    return _door_answer(message)

    # -- turns ---------------------------------------------------------------------------

    def serve(self, namespace: dict[str, Any]) -> int:
        """Run turns until the parent closes the pipe."""
        while True:
            with self._lock:
                message = self._stash.pop() if self._stash else self._receive()
            if message is None:
                return 0
            if "method" in message:
                self._handle(message, namespace)

    def _handle(self, message: Message, namespace: dict[str, Any]) -> None:
        request_id = message.get("id")
        method = message.get("method")
        if message.get("jsonrpc") != JSONRPC or not isinstance(method, str):
            self._error(request_id, INVALID_REQUEST, "not a JSON-RPC 2.0 request")
            return
        if "id" not in message:
            return  # a notification: the parent sends none that need work
        if method != Method.TURN:
            self._error(request_id, METHOD_NOT_FOUND, f"no method {method!r}")
            return
        params = message.get("params")
        source = params.get("source") if isinstance(params, dict) else None
        if not isinstance(source, str):
            self._error(request_id, INVALID_PARAMS, "turn needs params.source, a str")
            return
        failure = self.run_turn(source, namespace)
        _flush_streams()
        if failure is None:
            self.send({"id": request_id, "result": {"status": 0}})
        else:
            self._error(request_id, TURN_FAILED, _describe(failure), _failure_data(failure))

    def run_turn(self, source: str, namespace: dict[str, Any]) -> BaseException | None:
        """Run `source` in __main__ with the cell's SIGINT handler; what it raised, if anything.

        The handler swaps happen inside the try, and the failure is only stored there, so a
        late KeyboardInterrupt cannot escape into the serve loop.
        """
        failure: BaseException | None = None
        handler = self.user_handler
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler if handler is None else handler)
            exec(compile(source, "<sandbox-kernel turn>", "exec"), namespace)
        except BaseException as exc:
            failure = exc
        finally:
            self.user_handler = signal.signal(signal.SIGINT, _ignore)
        return failure


def _op(frame: bytes) -> str | None:
    """A small frame's op; None for a large one (displays, values) or a malformed one."""
    if len(frame) > _SMALL_FRAME_BYTES:
        return None
    try:
        request = json.loads(frame)
    except ValueError:
        return None
    return request.get("op") if isinstance(request, dict) else None


def _sleep_here(frame: bytes) -> bytes:
    """time.sleep in a cell's thread: a real sleep here. Through the door it would hold the
    door (and the parent's one thread) for its whole length; the main thread's sleeps still go
    to the host, where the deadline and a cancel end them."""
    seconds = json.loads(frame).get("seconds")
    if not isinstance(seconds, int | float) or seconds < 0:
        return json.dumps({"error": {"type": "ValueError", "message": "bad sleep"}}).encode()
    _REAL_SLEEP(seconds)
    return b'{"ok": true}'


def _is_interrupt(answer: bytes) -> bool:
    """Whether the host already answered with KeyboardInterrupt (a sleep, input, llm_query
    ended by the cancel): then the deferred SIGINT must not interrupt a second time."""
    if not answer.startswith(b'{"error"'):
        return False
    try:
        error = json.loads(answer)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(error, dict) and error.get("type") == "KeyboardInterrupt"


def _door_answer(message: Message) -> bytes:
    error = message.get("error")
    if error is not None:
        text = error.get("message") if isinstance(error, dict) else error
        raise ConnectionError(f"the host refused the request: {text}")
    result = message.get("result")
    if not isinstance(result, str):
        raise ConnectionError("the host sent a malformed door answer")
    return base64.b64decode(result)


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = "<unprintable>"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _failure_data(exc: BaseException) -> dict[str, Any]:
    try:
        lines = traceback.format_exception(exc)
    except Exception:
        lines = []
    return {"ename": type(exc).__name__, "traceback": "".join(lines)}


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a stream the cell closed or replaced
            stream.flush()


def _fresh_main() -> types.ModuleType:
    """A clean `__main__` for cells, as an interactive interpreter has (not this file's)."""
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    return module


def _load_driver(path: str) -> Any:
    spec = importlib.util.spec_from_file_location(DRIVER_MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the cell driver from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[DRIVER_MODULE] = module
    spec.loader.exec_module(module)
    return module


def serve_cells(channel: Channel, driver_path: str) -> int:
    """Install the driver in a fresh __main__ with the channel's door, say `ready`, and run
    turns until the parent closes the pipe (Pyodide's worker calls this too)."""
    signal.signal(signal.SIGINT, _ignore)
    own_module = sys.modules["__main__"]  # keeps the caller's globals alive
    cells = _fresh_main()
    sys.argv = [""]
    sys.path.insert(0, os.getcwd())  # the workspace, as `python -m` puts the cwd first
    try:
        driver = _load_driver(driver_path).install(door=channel.door, main_module=cells)
    except Exception:
        traceback.print_exc()
        return 1
    channel.on_interrupt = lambda: driver.flag.__setitem__(0, 1)
    channel.send({"method": Method.READY, "params": {"pid": os.getpid(), "python": sys.version}})
    try:
        return channel.serve(vars(cells))
    finally:
        del own_module


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: native/child.py DRIVER_PATH REQUESTS_FD REPLIES_FD", file=sys.stderr)
        return 2
    driver_path, read_fd, write_fd = argv[1], int(argv[2]), int(argv[3])
    for fd in (read_fd, write_fd):
        os.set_inheritable(fd, False)  # never into a cell's subprocesses
    return serve_cells(Channel(os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb")), driver_path)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
