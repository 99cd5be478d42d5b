"""The cell driver: the guest side of the door protocol (sandbox_kernel/repl/protocol.py).

Runs INSIDE the sandbox's CPython. The host execs this source into a fresh module named
"sandbox_kernel_driver" and calls `install()`, which binds a `Driver` in `__main__` (and in
builtins) as `__sandbox_kernel__`; from then on the host enters the guest only with one-call
turns such as `__sandbox_kernel__.run_cell(3, 'x = 1')`. Unit tests run it under host CPython
3.11, so it uses no newer syntax.

What cells see: `context` in __main__; display, input, llm_query, llm_query_batched,
rlm_query, chunk_text and search_context in builtins; time.sleep and getpass.getpass go
through the door.

Soft interrupt: byte 0 of a 17-byte bytearray is the flag; the other 16 bytes are a random
pattern sent in `hello`, by which the host finds the flag in linear memory and sets it. Loops
in cell code and every door helper check it and raise KeyboardInterrupt.

Must import only the standard library at module level (numpy, pandas and matplotlib are found
in sys.modules when an object could come from them); never imports sandbox_kernel.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import datetime
import io
import json
import linecache
import math
import operator
import os
import pprint
import re
import sys
import time
import tokenize
import traceback
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "DRIVER_NAME",
    "FLAG_NAME",
    "Driver",
    "chunk_text",
    "forget_finders",
    "format_bundle",
    "install",
    "plain_text",
    "to_plain",
]

DRIVER_NAME = "__sandbox_kernel__"  # protocol.DRIVER_NAME
FLAG_NAME = "__sandbox_kernel_flag__"
MAX_DEPTH = 20  # to_plain: deeper containers become a marker string
MAX_ITEMS = 100_000  # to_plain: elements converted before the rest is cut with a marker
# The exceptions a host answer may name (protocol.ERROR_TYPES); anything else is RuntimeError.
_ERRORS: dict[str, type[BaseException]] = {
    kind.__name__: kind
    for kind in (
        KeyboardInterrupt,
        EOFError,
        RuntimeError,
        ValueError,
        TypeError,
        TimeoutError,
        ConnectionError,
        PermissionError,
        MemoryError,
    )
}
_RICH_REPRS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
)
_CHECK_SOURCE = f"if {FLAG_NAME}[0]: {DRIVER_NAME}.interrupted()"
# Tokens that can follow a cell's last statement without being part of it.
_TRIVIA = {tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}
# What the reactor's turns and run_cell themselves use: put back when a cell replaces them.
_KEPT_BUILTINS = ("__import__", "compile", "exec", "eval", "repr", "isinstance", "len")
_KEPT_HELPERS = ("display", "input")  # the sandbox's, in builtins: as IPython keeps display
_KEPT_LINECACHE = ("cache", "_interactive_cache", "getline")
_LONGEST_SLEEP_SECONDS = 9.2e9  # what fits time.sleep's int64 nanoseconds
_MISSING = object()
# The shell's methods the driver calls: an instance attribute of that name is a cell's, removed.
_SHELL_METHODS = frozenset({"run_cell", "run_cell_async", "transform_cell", "run_ast_nodes"})
_NO_CTX = object()
# The driver's own voice, taken when it is loaded: a cell may rebind print, or set sys.stdout
# and sys.stderr to None or close them, and the driver must still run and report the next cell.
_PRINT = builtins.print
_STREAMS = {"stdout": sys.stdout, "stderr": sys.stderr}
_FDS = {"stdout": 1, "stderr": 2}


def install(
    door: Callable[[bytes], bytes] | None = None,
    main_module: Any = None,
    *,
    workdir: str | None = None,
    shell: bool = False,
    library: str | None = None,
    packages: str | None = None,
    package_data: dict[str, str] | None = None,
) -> Driver:
    """Create the session's driver, bind it and its helpers, say hello to the host.

    `door` defaults to the guest's `_host.call`; `main_module` to sys.modules["__main__"].
    A driver already bound in that module is uninstalled first, so patches never stack.
    `workdir` becomes the working directory; `shell` runs cells through IPython (the module
    sandbox_kernel_shell, loaded before this call); `library` (IPython's) and `packages` (the
    session's own, %pip install) are searched after the image's packages; `package_data` maps a
    package to a folder of files its wheel ships that the image left out.
    """
    if door is None:
        import _host  # the WebAssembly guest's builtin door module

        door = _host.call
    main = sys.modules["__main__"] if main_module is None else main_module
    previous = vars(main).get(DRIVER_NAME)
    if callable(getattr(previous, "uninstall", None)):
        previous.uninstall()
    driver = Driver(door, main)
    driver.bind()
    imports = sys.modules.get("sandbox_kernel_imports")
    if imports is not None:  # corrections to the image's packages (imports.py)
        imports.after_import("numpy", sys.modules["sandbox_kernel_numpy"].patch)
        for package, folder in (package_data or {}).items():
            imports.after_import(package, imports.extend_path(folder))
    for folder in (library, packages):
        if folder is not None and folder not in sys.path:
            sys.path.append(folder)
    driver.packages = packages
    if workdir is not None:
        os.chdir(workdir)
    if shell:
        if "" not in sys.path:  # as ipykernel: modules in the working folder are importable
            sys.path.insert(0, "")
        driver.start_shell()
    with memoryview(driver.flag) as view:  # hex of the pattern without copying its bytes
        magic = view[1:].hex()
    driver.request("hello", flag_magic=magic)
    return driver


class _ClassMethods:
    """A class's methods as keep() found them, put back after a cell that replaced them; names
    in `foreign` a cell may not add to the class (they would shadow a base class's)."""

    def __init__(self, cls: type, foreign: frozenset[str] = frozenset()) -> None:
        self.cls = cls
        self.methods = {name: value for name, value in vars(cls).items() if callable(value)}
        self._items = self.methods.items()
        self._foreign = foreign - self.methods.keys()

    def put_back(self) -> list[str]:
        """What was put back, by name. Every cell comes here: the usual answer, nothing
        changed, is one containment test of the kept (name, method) pairs in the class's, in
        C (a third of looking each name up)."""
        namespace = vars(self.cls)
        added = [name for name in self._foreign if name in namespace]
        if not added and self._items <= namespace.items():
            return []
        repaired = []
        for name, value in self.methods.items():
            if namespace.get(name) is not value:
                setattr(self.cls, name, value)
                repaired.append(f"{self.cls.__name__}.{name}")
        for name in added:
            delattr(self.cls, name)
            repaired.append(f"{self.cls.__name__}.{name}")
        return repaired


def forget_finders(folder: str) -> None:
    """Make imports look at `folder` (and the folders in it) afresh: its files changed.
    Narrower than importlib.invalidate_caches(), which also empties zipimport's directory
    cache of the standard library's zip (pkgutil.iter_modules then fails on it)."""
    for path in list(sys.path_importer_cache):
        if path == folder or path.startswith(folder + "/"):
            del sys.path_importer_cache[path]


def _new_flag() -> bytearray:
    flag = bytearray(17)
    flag[1:] = os.urandom(16)
    for i in range(1, 17):
        flag[i] ^= 0xA5  # in place, so the final pattern lives in this bytearray only
    return flag


class Driver:
    """One session's driver: runs cells, answers the host's calls, holds the interrupt flag."""

    def __init__(self, door: Callable[[bytes], bytes], main_module: Any) -> None:
        self.door = door
        self.main = main_module
        self.flag = _new_flag()  # never resized: the host holds its address
        self.displays: list[dict[str, Any]] = []  # the running cell's, in order
        self._undo: list[Callable[[], None]] = []
        self.shell: Any = None  # IPython's shell (shell.py), when cells run through it
        self.packages: str | None = None  # the session's %pip folder
        self._outcome: dict[str, Any] = {}  # what the shell reported for the running cell
        self._shell_suspect = False  # a cell failed: probe the shell before the next one
        # What running cells needs, as keep() found it at install (repair() puts it back).
        self._kept: list[tuple[Any, str, Any]] = []
        self._methods = _ClassMethods(Driver)
        self._shell_kept: list[_ClassMethods] = []
        self._shell_names: frozenset[str] = frozenset()  # the shell class's methods, by name

    # -- the door ------------------------------------------------------------------------

    def request(self, op: str, **fields: Any) -> Any:
        """Send one request through the door and return the answer's value, or raise its error."""
        return self._unwrap(op, _loads(self._send(op, fields)))

    def _send(self, op: str, fields: dict[str, Any]) -> bytes:
        message = {"op": op, **fields}
        frame = json.dumps(message, ensure_ascii=False, default=_not_jsonable).encode("utf-8")
        try:
            return self.door(frame)
        except ConnectionRefusedError as exc:
            raise RuntimeError(f"no sandbox host is bound to answer {op}") from exc
        except OSError as exc:
            raise RuntimeError(f"the sandbox host failed to answer {op}") from exc

    @staticmethod
    def _unwrap(op: str, answer: Any) -> Any:
        if isinstance(answer, dict):
            if "ok" in answer:
                return answer["ok"]
            error = answer.get("error")
            if isinstance(error, dict):
                kind = _ERRORS.get(str(error.get("type")), RuntimeError)
                raise kind(str(error.get("message", "")))
        raise RuntimeError(f"the sandbox host sent a malformed answer to {op}")

    def call_binary(self, op: str, **fields: Any) -> bytes:
        """A request from user code whose answer is bytes (a wheel): a binary answer."""
        self.check_interrupt()
        value = self._binary(op, fields)
        if not isinstance(value, bytes):
            raise RuntimeError(f"the sandbox host sent a malformed answer to {op}")
        self.check_interrupt()
        return value

    def _binary(self, op: str, fields: dict[str, Any]) -> Any:
        """The value of a binary answer (protocol.binary_answer): a JSON header line, then the
        payload; an error comes as the usual JSON answer and is raised."""
        raw = self._send(op, fields)
        end = raw.find(b"\n")
        header = _loads(raw[:end] if end >= 0 else raw)
        if not isinstance(header, dict) or "kind" not in header or end < 0:
            self._unwrap(op, header)  # raises the host's error, if that is what came
            raise RuntimeError(f"the sandbox host sent a malformed answer to {op}")
        payload = memoryview(raw)[end + 1 :]  # a view: a large payload is not copied again
        if header.get("length") != len(payload):
            raise RuntimeError(f"the sandbox host sent an answer of the wrong length to {op}")
        kind = header["kind"]
        if kind == "none":
            return None
        if kind == "str":
            return str(payload, "utf-8")
        if kind == "bytes":
            return bytes(payload)
        if kind == "json":
            return json.loads(str(payload, "utf-8"))
        raise RuntimeError(f"the sandbox host sent an answer of unknown kind {kind!r} to {op}")

    def call(self, op: str, **fields: Any) -> Any:
        """A request from user code: a safe point for the soft interrupt before and after."""
        self.check_interrupt()
        value = self.request(op, **fields)
        self.check_interrupt()
        return value

    # -- interrupt -----------------------------------------------------------------------

    def check_interrupt(self) -> None:
        """Raise KeyboardInterrupt (once) if the host has asked for a soft interrupt."""
        if self.flag[0]:
            self.interrupted()

    def interrupted(self) -> None:
        """Clear the flag and raise KeyboardInterrupt (called by the checks put in cell loops)."""
        self.flag[0] = 0
        raise KeyboardInterrupt

    # -- cells ---------------------------------------------------------------------------

    def run_cell(self, n: int, source: str) -> None:
        """Run cell `n`, whose text is `source`, and report the outcome with `done`."""
        self.flag[0] = 0
        self.displays = []
        _forget_turns()
        if self.shell is not None:
            if self._shell_suspect:
                self._check_shell()
            reply = self._run_in_shell(n, source)
        else:
            reply = self._run_plain(n, source)
        self.repair()
        _flush_streams()
        reply["displays"] = self.displays
        self.request("done", cell=n, reply=reply)

    def _run_plain(self, n: int, source: str) -> dict[str, Any]:
        status, error, value = "ok", None, None
        result: dict[str, Any] | None = None
        metadata: dict[str, Any] = {}
        try:
            value = self._execute(n, source)
            if value is not None:
                result, metadata = format_bundle(value)
        except KeyboardInterrupt as exc:
            status, error = "cancelled", self._error(exc)
        except BaseException as exc:  # whatever the cell raised, SystemExit too, is its outcome
            status, error = "error", self._error(exc)
        self._flush_figures(shown=value)
        return {"status": status, "error": error, "result": result, "result_metadata": metadata}

    def _run_in_shell(self, n: int, source: str) -> dict[str, Any]:
        """The cell through IPython (transforms, magics, display hook, tracebacks), numbered
        as the host numbers it so In[n] and Out[n] match the client's prompt."""
        shell = self.shell
        self._outcome = {}
        if shell.execution_count != n:  # a traitlet: setting it notifies, so only when it moves
            shell.execution_count = n
        try:
            ran = shell.run_cell(source, store_history=True)
            failure = ran.error_before_exec or ran.error_in_exec
        except BaseException as exc:  # IPython's own machinery failed: still a reply
            failure = exc
            self._outcome["error"] = self._error(exc)
            self._restart_shell(exc)
        error = self._outcome.get("error")
        if failure is None:
            status, error = "ok", None
            if self._outcome.get("error"):  # a formatter's failure, shown, the cell went on
                _warn("\n".join(self._outcome["error"]["traceback"]))
        else:
            status = "cancelled" if isinstance(failure, KeyboardInterrupt) else "error"
            if error is None and _is_usage_error(failure):  # IPython put it on stderr
                name, value = type(failure).__name__, _safe_str(failure)
                error = {"ename": name, "evalue": value, "traceback": [], "shown": True}
            elif error is None:
                error = self._error(failure)
            self._shell_suspect = True  # probed before the next cell: the reply goes first
        payload = list(shell.payload_manager.read_payload())
        if payload:
            shell.payload_manager.clear_payload()
        return {
            "status": status,
            "error": error,
            "result": self._outcome.get("result"),
            "result_metadata": self._outcome.get("result_metadata", {}),
            "payload": payload,
        }

    def start_shell(self) -> None:
        """IPython's shell over __main__ (shell.py), and what repair() keeps of it."""
        self.shell = sys.modules["sandbox_kernel_shell"].start(self, self.main)
        self.keep()

    def _check_shell(self) -> None:
        """After a failed cell, before the next: can the shell still run one? A silent `pass`
        says; a shell that cannot is started again (and the next cell's output says so). Not
        at the failed cell's end, where it cost an interrupt's reply 0.3-0.5 ms."""
        self._shell_suspect = False
        kept, shell = self._outcome, self.shell
        try:
            probe = shell.run_cell("pass", store_history=False, silent=True)
            broken = probe.error_before_exec or probe.error_in_exec
            for part in ("displayhook", "display_pub", "history_manager"):
                if (
                    broken is None
                    and getattr(getattr(shell, part, None), "shell", None) is not shell
                ):
                    broken = RuntimeError(f"get_ipython().{part} was taken apart")
        except BaseException as exc:  # what broke the shell is the answer
            broken = exc
        finally:
            self._outcome = kept
        if broken is not None:
            self._restart_shell(broken)

    def _restart_shell(self, exc: BaseException) -> None:
        """A shell that failed outside the cell's code is replaced (variables stay; In and
        Out start again), and the user is told."""
        try:
            type(self.shell).clear_instance()
            self.start_shell()
        except Exception as failure:  # the next cell reports it again; the host rebuilds
            exc = failure
        _warn(
            f"[sandbox] IPython's shell failed ({_describe(exc)}) and was started again: "
            "variables are kept, In and Out start afresh"
        )

    # -- what the shell reports (shell.py) -------------------------------------------------

    def set_result(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        self._outcome["result"], self._outcome["result_metadata"] = data, metadata

    def set_error(self, etype: Any, evalue: Any, stb: list[str]) -> None:
        name = getattr(etype, "__name__", None) or type(evalue).__name__
        evalue_text = _safe_str(evalue) if isinstance(evalue, BaseException) else str(evalue)
        self._outcome["error"] = {"ename": name, "evalue": evalue_text, "traceback": list(stb)}

    def publish_display(self, message: dict[str, Any]) -> None:
        """A display, or an update of one by its display_id, shown now (after what the cell
        printed before it)."""
        _flush_streams()
        self._send_display(message)

    def clear_output(self, wait: bool = False) -> None:
        _flush_streams()
        self.call("clear_output", wait=bool(wait))

    @staticmethod
    def loop_checks() -> ast.NodeTransformer:
        """The transformer that puts the soft interrupt's check into every loop of a cell."""
        return _LoopChecks()

    def _execute(self, n: int, source: str) -> Any:
        """Run the cell in __main__; the value of its last expression (None if it has none)."""
        filename = f"<cell-{n}>"
        lines = io.StringIO(source).readlines()  # split as the compiler counts lines
        linecache.cache[filename] = (len(source), None, lines, filename)
        tree = _LoopChecks().visit(ast.parse(source, filename))
        last = None
        if (
            tree.body
            and isinstance(tree.body[-1], ast.Expr)
            and not _ends_with_semicolon(lines, tree.body[-1])
        ):
            last = compile(ast.Expression(body=tree.body.pop().value), filename, "eval")
        namespace = vars(self.main)
        exec(compile(tree, filename, "exec"), namespace)
        if last is None:
            return None
        value = eval(last, namespace)
        if value is not None:
            namespace["_"] = value
        return value

    def _error(self, exc: BaseException) -> dict[str, Any]:
        """The error reply for `exc`, its traceback cut to the user's own frames."""
        if isinstance(exc, SyntaxError) and exc.text is None and exc.filename and exc.lineno:
            # Compiling an AST gives no source line; the cell's is in linecache.
            exc.text = linecache.getline(exc.filename, exc.lineno) or None
        try:
            report = traceback.TracebackException.from_exception(exc)
            _prune(report)
            lines = "".join(report.format()).splitlines()
        except Exception as failure:  # an unformattable traceback must not lose the reply
            lines = [f"{type(exc).__name__}: (no traceback: {_describe(failure)})"]
        return {"ename": type(exc).__name__, "evalue": _safe_str(exc), "traceback": lines}

    def _flush_figures(self, shown: object) -> None:
        """Show and close pyplot's open figures, as the inline backend does after a cell."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        try:
            for number in pyplot.get_fignums():
                figure = pyplot.figure(number)
                if figure is not shown:  # already the cell's result
                    png = base64.b64encode(_figure_png(figure)).decode("ascii")
                    data = {"image/png": png, "text/plain": plain_text(figure)}
                    self._send_display({"data": data, "metadata": {}})
        except Exception as exc:  # a figure that cannot be drawn is reported, the reply still goes
            _warn(f"could not show a matplotlib figure: {_describe(exc)}")
        finally:
            try:
                pyplot.close("all")
            except Exception as exc:  # as above
                _warn(f"could not close matplotlib figures: {_describe(exc)}")

    # -- calls from the host -------------------------------------------------------------

    def load_context(self) -> None:
        """Fetch the session's context (a binary answer) and bind it as `context` in __main__."""
        value = self._binary("context", {})
        self.main.context = value
        # A session starts here (fresh, or from a warm image made before %pip installed
        # anything): imports must look at the session's package folder as it is now.
        if self.packages is not None:
            forget_finders(self.packages)
        if self.shell is not None:  # ours, not the user's: %who leaves it out
            self.shell.user_ns_hidden["context"] = value

    def get_variable(self, name: str) -> None:
        """Send `name`'s value in __main__, as plain JSON data (see to_plain), to the host."""
        namespace = vars(self.main)
        found = isinstance(name, str) and name in namespace
        value = to_plain(namespace[name]) if found else None
        self.request("value", name=name, found=found, value=value)

    def ping(self) -> None:
        """Answer the host's health check: this driver still runs and reaches the door."""
        self.repair()
        self.request("value", name="__ping__", found=True, value="pong")

    def complete(self, code: str, cursor_pos: int) -> None:
        """Send Jupyter's complete_reply content for `code` at `cursor_pos` to the host (no
        matches when the objects involved fail: a raising __dir__ is the user's own)."""
        self.flag[0] = 0
        introspect = sys.modules["sandbox_kernel_introspect"]
        try:
            reply = introspect.complete(vars(self.main), code, cursor_pos)
        except Exception:
            reply = {"matches": [], "cursor_start": cursor_pos, "cursor_end": cursor_pos}
        self.request("value", name="__complete__", found=True, value=reply)

    def inspect(self, code: str, cursor_pos: int, detail: int = 0) -> None:
        """Send Jupyter's inspect_reply content for the name at `cursor_pos` to the host."""
        self.flag[0] = 0
        introspect = sys.modules["sandbox_kernel_introspect"]
        try:
            reply = to_plain(introspect.inspect_object(vars(self.main), code, cursor_pos, detail))
        except Exception:
            reply = {"found": False}
        self.request("value", name="__inspect__", found=True, value=reply)

    def evaluate(self, expressions: dict[str, str]) -> None:
        """Send Jupyter's user_expressions to the host: for each {name: source}, its MIME
        bundle or its error. An interrupt ends the evaluation: the rest are left out."""
        self.flag[0] = 0
        results: dict[str, Any] = {}
        namespace = vars(self.main)
        for key, source in expressions.items():
            try:
                value = eval(compile(source, "<user_expression>", "eval"), namespace)
                data, metadata = format_bundle(value)
                results[key] = {"status": "ok", "data": data, "metadata": metadata}
            except KeyboardInterrupt:
                break
            except BaseException as exc:  # whatever an expression raises is its answer
                error = {"ename": type(exc).__name__, "evalue": _safe_str(exc)}
                results[key] = {"status": "error", **error, "traceback": []}
        self.request("value", name="__expressions__", found=True, value=results)

    # -- what cells call -----------------------------------------------------------------

    def display(
        self, *objs: Any, raw: bool = False, metadata: dict[str, Any] | None = None
    ) -> None:
        """Show each object below the cell now, as Jupyter's display() does.

        raw=True: each object is already a MIME bundle, {mime type: data}.
        """
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"display() metadata must be a dict, not {type(metadata).__name__}")
        for obj in objs:
            if not raw:
                data, extra = format_bundle(obj)
            elif isinstance(obj, dict):
                data, extra = {}, {}
                for mime, value in obj.items():
                    _put(data, str(mime), value)
            else:
                raise TypeError(
                    f"display(raw=True) takes MIME bundle dicts, not {type(obj).__name__}"
                )
            self._send_display({"data": data, "metadata": {**extra, **(metadata or {})}})

    def _send_display(self, message: dict[str, Any]) -> None:
        self.call("display", **message)
        self.displays.append(message)

    def input(self, prompt: object = "") -> str:
        """Read a line from the user (the notebook's input box), as the builtin input() does."""
        _flush_streams()
        return self.call("input", prompt=str(prompt), password=False)

    def getpass(self, prompt: str = "Password: ", stream: object = None) -> str:
        """Read a line from the user without echoing it, as getpass.getpass() does."""
        _flush_streams()
        return self.call("input", prompt=str(prompt), password=True)

    def sleep(self, seconds: float) -> None:
        """time.sleep through the host: bounded by the cell's deadline, ended by interrupts."""
        if isinstance(seconds, float):
            value = seconds
        else:
            try:
                value = float(operator.index(seconds))
            except TypeError:
                name = type(seconds).__name__
                raise TypeError(f"'{name}' object cannot be interpreted as an integer") from None
        if math.isnan(value):
            raise ValueError("Invalid value NaN (not a number)")
        if value < 0:
            raise ValueError("sleep length must be non-negative")
        if value > _LONGEST_SLEEP_SECONDS:
            raise OverflowError("sleep length is too large")
        if value == 0:  # a yield, nothing to wait for: spare the host a request
            self.check_interrupt()
            return
        self.call("sleep", seconds=value)

    def llm_query(self, prompt: str) -> str:
        """Ask the session's language model one question; its answer."""
        _need_str("llm_query", "prompt", prompt)
        return self.call("llm_query", prompt=prompt)

    def llm_query_batched(self, prompts: list[str]) -> list[str]:
        """Ask the language model several independent questions at once; answers in order."""
        if not isinstance(prompts, list | tuple):
            raise TypeError(
                f"llm_query_batched() takes a list of str, not {type(prompts).__name__}"
            )
        for i, prompt in enumerate(prompts):
            _need_str("llm_query_batched", f"prompts[{i}]", prompt)
        if not prompts:
            return []
        return self.call("llm_query_batched", prompts=list(prompts))

    def rlm_query(self, task: str, ctx: Any = _NO_CTX) -> str:
        """Hand `task` (and, optionally, a JSON-able `ctx`) to a recursive language-model run."""
        _need_str("rlm_query", "task", task)
        if ctx is _NO_CTX:
            return self.call("rlm_query", task=task, has_ctx=False, ctx=None)
        return self.call("rlm_query", task=task, has_ctx=True, ctx=ctx)

    def search_context(
        self,
        pattern: str,
        window: int = 200,
        *,
        ignore_case: bool = True,
        max_matches: int = 100,
        text: Any = None,
    ) -> list[dict[str, Any]]:
        """Find a regular expression in `text` (default: `context`), with text around each match.

        Each match is {"start", "end", "match", "text"}: offsets of the match and the text from
        `window` characters before it to `window` after. Patterns use re.MULTILINE, and
        re.IGNORECASE unless ignore_case=False. A str is searched as is; a list of str element by
        element (matches then carry the element's "index"); bytes as UTF-8 (bad bytes replaced);
        anything else, such as a dict, as its JSON text.
        """
        _need_str("search_context", "pattern", pattern)
        for name, number in (("window", window), ("max_matches", max_matches)):
            _need_int("search_context", name, number)
            if number < 0:
                raise ValueError(f"search_context() {name} must be >= 0, not {number}")
        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        try:
            regex = re.compile(pattern, flags)
        except re.error as exc:
            raise ValueError(
                f"search_context(): bad regular expression {pattern!r}: {exc}"
            ) from exc
        source = getattr(self.main, "context", None) if text is None else text
        if source is None:
            raise ValueError("search_context(): there is no context; pass text=...")
        found: list[dict[str, Any]] = []
        for index, haystack in _haystacks(source):
            for match in regex.finditer(haystack):
                if len(found) >= max_matches:
                    return found
                start, end = match.span()
                hit = {"start": start, "end": end, "match": match.group()}
                hit["text"] = haystack[max(0, start - window) : end + window]
                if index is not None:
                    hit["index"] = index
                found.append(hit)
        return found

    # -- the driver's own state ------------------------------------------------------------

    def keep(self) -> None:
        """Remember what the sandbox needs to run the next cell, to put it back after a cell
        that replaced it (the memory image is taken after each cell: a broken driver in it
        would come back with every rollback)."""
        self._kept = [
            *((vars(builtins), name, vars(builtins)[name]) for name in _KEPT_BUILTINS),
            *((vars(builtins), name, vars(builtins).get(name)) for name in _KEPT_HELPERS),
            *((vars(linecache), name, vars(linecache).get(name)) for name in _KEPT_LINECACHE),
            (vars(builtins), DRIVER_NAME, self),
            (vars(builtins), FLAG_NAME, self.flag),
            (vars(self.main), DRIVER_NAME, self),
            (sys.modules, "sandbox_kernel_driver", sys.modules.get("sandbox_kernel_driver")),
        ]
        self._methods = _ClassMethods(Driver)
        self._shell_kept = []
        self._shell_names = frozenset()
        if self.shell is not None:  # its class and IPython's: methods a cell could replace
            shell_class = type(self.shell)
            self._shell_kept = [_ClassMethods(c, _SHELL_METHODS) for c in shell_class.__mro__[:2]]
            self._shell_names = frozenset(
                n for n in dir(shell_class) if callable(getattr(shell_class, n, None))
            )

    def repair(self) -> None:
        """Put back what keep() remembered, and say so on stderr."""
        repaired = []
        for space, name, value in self._kept:
            if value is not None and space.get(name, _MISSING) is not value:
                space[name] = value
                repaired.append(name)
        own = vars(self)
        for name in sorted(own.keys() & self._methods.methods.keys()):
            del own[name]
            repaired.append(f"{DRIVER_NAME}.{name}")
        repaired.extend(self._methods.put_back())
        repaired.extend(self._repair_shell())
        repaired.extend(_mend_streams())
        if repaired:
            _warn(
                "[sandbox] this cell replaced what the sandbox needs to run cells ("
                + ", ".join(repaired)
                + "): it was put back"
            )

    def _repair_shell(self) -> list[str]:
        """Put back the shell's methods: on its class, and where the instance shadows one."""
        repaired = [name for kept in self._shell_kept for name in kept.put_back()]
        shell = self.shell
        if shell is not None and not self._shell_names.isdisjoint(vars(shell)):
            attributes = vars(shell)
            for name in sorted(attributes.keys() & self._shell_names):
                if not callable(attributes[name]) or name in _SHELL_METHODS:
                    del attributes[name]
                    repaired.append(f"get_ipython().{name}")
        return repaired

    # -- install -------------------------------------------------------------------------

    def bind(self) -> None:
        """Put the driver and the helpers where cells find them; uninstall() undoes it all."""
        helpers = {
            DRIVER_NAME: self,  # also here, so a cell that rebinds the name keeps loops working
            FLAG_NAME: self.flag,
            "display": self.display,
            "input": self.input,
            "llm_query": self.llm_query,
            "llm_query_batched": self.llm_query_batched,
            "rlm_query": self.rlm_query,
            "chunk_text": chunk_text,
            "search_context": self.search_context,
        }
        for name, value in helpers.items():
            self._patch(builtins, name, value)
        self._patch(self.main, DRIVER_NAME, self)
        if "context" not in vars(self.main):
            self._patch(self.main, "context", None)
        self._patch(time, "sleep", self.sleep)
        try:
            import getpass
        except ImportError:  # an image without it: nothing to patch
            pass
        else:
            self._patch(getpass, "getpass", self.getpass)
        backend = os.environ.get("MPLBACKEND")
        os.environ["MPLBACKEND"] = "Agg"  # before any cell imports matplotlib
        self._undo.append(lambda: _restore_env("MPLBACKEND", backend))
        self.keep()
        for stream in (sys.stdout, sys.stderr):  # so output streams while a cell runs
            try:
                buffered = stream.line_buffering
                stream.reconfigure(line_buffering=True)
            except Exception:  # a stream that is not a TextIOWrapper stays as it is
                continue
            self._undo.append(lambda s=stream, b=buffered: s.reconfigure(line_buffering=b))

    def uninstall(self) -> None:
        """Undo bind(): builtins, __main__, time.sleep, getpass, MPLBACKEND, stdout/stderr."""
        while self._undo:
            self._undo.pop()()

    def _patch(self, target: Any, name: str, value: Any) -> None:
        old = vars(target).get(name, _MISSING)
        setattr(target, name, value)
        self._undo.append(lambda: _restore(target, name, old))


def _restore(target: Any, name: str, old: Any) -> None:
    if old is _MISSING:
        vars(target).pop(name, None)
    else:
        setattr(target, name, old)


def _restore_env(name: str, old: str | None) -> None:
    if old is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = old


class _LoopChecks(ast.NodeTransformer):
    """Puts a soft-interrupt check first in the body of every loop of a cell."""

    def _check(self, node: ast.For | ast.AsyncFor | ast.While) -> ast.AST:
        self.generic_visit(node)
        check = ast.parse(_CHECK_SOURCE).body[0]
        for part in ast.walk(check):  # the loop's own first line, so tracebacks name user lines
            ast.copy_location(part, node.body[0])
        node.body.insert(0, check)
        return node

    visit_For = visit_AsyncFor = visit_While = _check


def _ends_with_semicolon(lines: list[str], node: ast.stmt) -> bool:
    """Whether a ';' follows the cell's last statement (IPython's "do not show the value")."""
    end_line = node.end_lineno or node.lineno
    tail = lines[end_line - 1].encode("utf-8")[node.end_col_offset :].decode("utf-8")
    rest = tail + "".join(lines[end_line:])  # only ';', comments and blank lines remain
    last = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(rest).readline):
            if token.type not in _TRIVIA and token.type != tokenize.ENDMARKER:
                last = token
    except (tokenize.TokenError, SyntaxError):
        return False
    return last is not None and last.string == ";"


def _prune(report: traceback.TracebackException) -> None:
    """Keep the user's frames: from the first cell frame on (none if there is no cell frame),
    minus the sandbox's own frames and what they called (user_frames)."""
    for item in chain(report):
        frames = list(item.stack)
        first = next((i for i, f in enumerate(frames) if _is_cell(f.filename)), len(frames))
        frames = frames[first:]
        keep = user_frames([frame.filename for frame in frames], _is_cell)
        item.stack[:] = [frame for frame, kept in zip(frames, keep, strict=True) if kept]


def chain(first: Any) -> Iterator[Any]:
    """`first` and what is chained to it (__cause__, __context__, an exception group's
    members), each once: exceptions, or the reports traceback.TracebackException makes."""
    pending: list[Any] = [first]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        pending += [item.__cause__, item.__context__, *(getattr(item, "exceptions", None) or ())]


def user_frames(filenames: list[str], is_cell: Callable[[str], bool]) -> list[bool]:
    """Which frames of a traceback (their files, outermost first) are the user's: not the
    sandbox's own (its guest modules), nor what they called (json, ...) until code of a cell
    runs again. A helper the user called (display, llm_query, time.sleep) then ends the
    traceback as a built-in function would."""
    kept, inside = [], False
    for name in filenames:
        if name == _OWN_FILE or name.startswith(_OWN_PREFIX):
            inside = True
        elif is_cell(name):
            inside = False
        kept.append(not inside)
    return kept


def _is_cell(filename: str) -> bool:
    return filename.startswith("<cell-")


def _forget_turns() -> None:
    """Drop the sources the reactor keeps for its turns' tracebacks (`<turn N>` in
    linecache._interactive_cache): user tracebacks are cut to the cells' frames, so they were
    only a copy of every cell's text, kept for the session's life."""
    cache = vars(linecache).get("_interactive_cache")
    if type(cache) is not dict:  # a Python without it, or a cell's replacement (repaired later)
        return
    for key in [k for k in cache if type(k) is tuple and k and type(k[0]) is str]:
        if key[0].startswith("<turn "):
            del cache[key]


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr, *_STREAMS.values()):
        # A stream the cell closed or replaced has nothing left to flush.
        with contextlib.suppress(Exception):
            stream.flush()


def _usable(stream: Any) -> bool:
    try:
        return callable(getattr(stream, "write", None)) and not getattr(stream, "closed", False)
    except Exception:  # a property that raises: not a stream to write to
        return False


def _own_stream(name: str) -> Any:
    """The sandbox's own stdout or stderr; opened again on its descriptor if a cell closed it
    (the standard streams never close their descriptor)."""
    stream = _STREAMS[name]
    if not _usable(stream):
        raw = io.FileIO(_FDS[name], "w", closefd=False)
        stream = io.TextIOWrapper(
            raw, encoding="utf-8", errors="backslashreplace", line_buffering=True
        )
        _STREAMS[name] = stream
    return stream


def _mend_streams() -> list[str]:
    """sys.stdout and sys.stderr put back when a cell left them unusable (None, closed, no
    write): IPython writes to both as it runs a cell. A stream of the cell's own (a StringIO
    that captures) is kept, as in ipykernel."""
    mended = []
    for name in _STREAMS:
        if not _usable(getattr(sys, name, None)):
            setattr(sys, name, _own_stream(name))
            mended.append(f"sys.{name}")
    return mended


def _warn(text: str) -> None:
    """A line for the user on the sandbox's own stderr, whatever a cell did to print, to
    sys.stderr or to sys.__stderr__."""
    with contextlib.suppress(Exception):
        _PRINT(text, file=_own_stream("stderr"), flush=True)


# -- MIME bundles --------------------------------------------------------------------------


def format_bundle(obj: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MIME bundle (data, metadata) Jupyter shows for `obj`, built as IPython builds it.

    Rich reprs are looked up on the type. `_repr_mimebundle_` wins for the types it gives; a
    rich repr that raises or returns None is skipped; bytes are base64'd; text/plain is always
    there; a matplotlib Figure gives image/png.
    """
    data: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    bundle = _call_repr(obj, "_repr_mimebundle_", include=None, exclude=None)
    if isinstance(bundle, tuple) and len(bundle) == 2:
        bundle, extra = bundle
        metadata.update(extra if isinstance(extra, dict) else {})
    for mime, value in (bundle if isinstance(bundle, dict) else {}).items():
        _put(data, str(mime), value)
    for method, mime in _RICH_REPRS:
        if mime not in data:
            value = _call_repr(obj, method)
            if isinstance(value, tuple) and len(value) == 2:
                value, metadata[mime] = value
            _put(data, mime, value)
    figures = sys.modules.get("matplotlib.figure")
    if "image/png" not in data and figures is not None and isinstance(obj, figures.Figure):
        try:
            _put(data, "image/png", _figure_png(obj))
        except Exception as exc:  # shown as text only, with the reason on stderr
            _warn(f"could not draw the figure: {_describe(exc)}")
    data.setdefault("text/plain", plain_text(obj))
    return data, metadata if _is_jsonable(metadata) else {}


def plain_text(obj: object) -> str:
    """repr(obj), pretty-printed for containers; a description if repr itself fails."""
    try:
        text = repr(obj)
        if isinstance(obj, dict | list | tuple | set | frozenset) and 80 < len(text) < 100_000:
            text = pprint.pformat(obj, sort_dicts=False)
        return text
    except Exception as exc:
        return f"<{type(obj).__name__} object (repr failed: {_describe(exc)})>"


def _call_repr(obj: object, name: str, **kwargs: Any) -> Any:
    """Call the rich repr `name` as defined on obj's type (never an instance attribute)."""
    for klass in type(obj).__mro__:
        if name in vars(klass):
            attr = vars(klass)[name]
            break
    else:
        return None
    try:
        getter = getattr(type(attr), "__get__", None)
        method = getter(attr, obj, type(obj)) if getter is not None else attr
        return method(**kwargs)
    except Exception:  # a broken rich repr is skipped, as IPython does
        return None


def _put(data: dict[str, Any], mime: str, value: Any) -> None:
    """Add one rich repr's value; None (no repr) and what JSON cannot carry are left out."""
    if value is None:
        return
    if isinstance(value, bytes | bytearray | memoryview):
        value = base64.b64encode(value).decode("ascii")
    if isinstance(value, str) or (mime.endswith("json") and _is_jsonable(value)):
        data[mime] = value


def _figure_png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


# -- plain data ----------------------------------------------------------------------------


def to_plain(obj: object, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> Any:
    """`obj` as JSON data: what get_variable sends the host.

    None, bool, int, str as they are; floats, with nan and inf as None; bytes as
    {"__bytes__": base64}; list, tuple, set as lists; dicts with str keys (others repr'd);
    dates and times as ISO text; numpy scalars and arrays, pandas Series and DataFrames (as
    records) by their values; anything else as its repr. Past `max_depth` levels a container
    becomes "<too deep>"; past `max_items` elements the rest becomes one "<truncated...>" marker.
    """
    return _Plain(max_items).convert(obj, max_depth)


class _Plain:
    """One conversion's state: how many elements may still be converted."""

    def __init__(self, max_items: int) -> None:
        self.left = max_items
        self.marker = f"<truncated: more than {max_items} items>"

    def convert(self, obj: Any, depth: int) -> Any:
        if obj is None or isinstance(obj, bool | int | str):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else None
        if isinstance(obj, bytes | bytearray | memoryview):
            return {"__bytes__": base64.b64encode(obj).decode("ascii")}
        if isinstance(obj, datetime.date | datetime.time):
            return obj.isoformat()
        if depth <= 0:
            return "<too deep>"
        if isinstance(obj, dict):
            return self._dict(obj, depth - 1)
        if isinstance(obj, list | tuple | set | frozenset):
            return self._list(obj, depth - 1)
        return self._foreign(obj, depth)

    def _list(self, items: Any, depth: int) -> list[Any]:
        out = []
        for item in items:
            if self.left <= 0:
                out.append(self.marker)
                break
            self.left -= 1
            out.append(self.convert(item, depth))
        return out

    def _dict(self, items: dict[Any, Any], depth: int) -> dict[str, Any]:
        out = {}
        for key, item in items.items():
            if self.left <= 0:
                out["<truncated>"] = self.marker
                break
            self.left -= 1
            out[key if isinstance(key, str) else plain_text(key)] = self.convert(item, depth)
        return out

    def _foreign(self, obj: Any, depth: int) -> Any:
        """numpy and pandas objects (only if those modules are loaded); repr for the rest."""
        numpy, pandas = sys.modules.get("numpy"), sys.modules.get("pandas")
        room = self.left + 1  # one more than fits, so the marker shows
        if numpy is not None and isinstance(obj, numpy.generic):
            return self.convert(obj.item(), depth)
        if numpy is not None and isinstance(obj, numpy.ndarray):
            if obj.ndim == 0:
                return self.convert(obj.item(), depth)
            per_row = max(1, obj.size // max(1, len(obj)))
            return self._list(obj[: room // per_row + 1].tolist(), depth - 1)
        if pandas is not None and isinstance(obj, pandas.DataFrame):
            rows = obj.head(room // max(1, len(obj.columns)) + 1)
            return self._list(rows.to_dict(orient="records"), depth - 1)
        if pandas is not None and isinstance(obj, pandas.Series):
            return self._list(obj.head(room).tolist(), depth - 1)
        return plain_text(obj)


# -- helpers for cells ---------------------------------------------------------------------


def chunk_text(text: str, size: int = 4000, overlap: int = 200) -> list[str]:
    """Cut `text` into windows of `size` characters, each sharing `overlap` with the previous.

    Chunk i starts at i * (size - overlap); the last one may be shorter and ends the text.
    """
    _need_str("chunk_text", "text", text)
    _need_int("chunk_text", "size", size)
    _need_int("chunk_text", "overlap", overlap)
    if size <= 0:
        raise ValueError(f"chunk_text() size must be > 0, not {size}")
    if not 0 <= overlap < size:
        raise ValueError(
            f"chunk_text() needs 0 <= overlap < size, got overlap={overlap}, size={size}"
        )
    chunks = []
    for start in range(0, len(text), size - overlap):
        chunks.append(text[start : start + size])
        if start + size >= len(text):
            break
    return chunks


def _haystacks(source: Any) -> list[tuple[int | None, str]]:
    if isinstance(source, str):
        return [(None, source)]
    if isinstance(source, list) and all(isinstance(item, str) for item in source):
        return list(enumerate(source))
    if isinstance(source, bytes | bytearray):
        return [(None, source.decode("utf-8", "replace"))]
    return [(None, json.dumps(source, ensure_ascii=False, default=str))]


def _need_str(function: str, name: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{function}() {name} must be a str, not {type(value).__name__}")


def _need_int(function: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{function}() {name} must be an int, not {type(value).__name__}")


def _not_jsonable(obj: object) -> Any:
    """json.dumps' fallback: say clearly what cannot go to the host, and what can."""
    hint = " (decode it first, e.g. data.decode())" if isinstance(obj, bytes | bytearray) else ""
    raise TypeError(
        f"cannot send an object of type {type(obj).__name__} to the host{hint}: only JSON data "
        "goes through (str, int, float, bool, None, and lists and dicts of them)"
    )


def _is_jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:  # shown as a malformed answer by the caller
        return None


def _is_usage_error(exc: BaseException) -> bool:
    """IPython's UsageError (a magic's), which IPython shows as one line on stderr."""
    errors = sys.modules.get("IPython.core.error")
    return errors is not None and isinstance(exc, errors.UsageError)


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ fails still gets reported
        return f"<unprintable {type(exc).__name__}>"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_safe_str(exc)}"


# This file's name as the host compiled it, and the names of all the sandbox's guest modules
# (repl/guest_sources.py): their frames are cut from user tracebacks.
_OWN_FILE = _describe.__code__.co_filename
_OWN_PREFIX = "<sandbox-kernel "
