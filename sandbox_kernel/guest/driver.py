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
import contextlib
import importlib.machinery
import io
import linecache
import os
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any

# The driver's parts, each a guest module of its own, in the order they load: its streams,
# MIME bundles, cell transforms, pure helpers, door client, the calls cells make and its
# binding into the guest. In the sandbox the host loads them first (repl/guest_sources.py's
# GUEST_MODULES); under host CPython (the native backends, the unit tests) they are read from
# this file's folder.
DRIVER_PARTS = (
    ("sandbox_kernel_streams", "streams.py"),
    ("sandbox_kernel_bundles", "bundles.py"),
    ("sandbox_kernel_cells", "cells.py"),
    ("sandbox_kernel_helpers", "helpers.py"),
    ("sandbox_kernel_door", "door.py"),
    ("sandbox_kernel_calls", "calls.py"),
    ("sandbox_kernel_binding", "binding.py"),
)


def _load_part(name: str, file: str) -> None:
    if name in sys.modules:
        return
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), file)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the driver's part {file} from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


for _name, _file in DRIVER_PARTS:
    _load_part(_name, _file)

from sandbox_kernel_binding import Binding  # noqa: E402
from sandbox_kernel_bundles import (  # noqa: E402 - the parts are loaded just above
    figure_png,
    format_bundle,
    plain_text,
    to_message,
    to_plain,
)
from sandbox_kernel_calls import text_of  # noqa: E402
from sandbox_kernel_cells import (  # noqa: E402
    DRIVER_NAME,
    FLAG_NAME,
    LoopChecks,
    ends_with_semicolon,
    forget_turns,
    prune,
)
from sandbox_kernel_helpers import chunk_text  # noqa: E402
from sandbox_kernel_streams import describe, flush_streams, safe_str, warn  # noqa: E402

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
        mmap_module = sys.modules["sandbox_kernel_mmap"]
        imports.after_import("mmap", mmap_module.patch)
        imports.after_import("numpy._core.memmap", mmap_module.patch_memmap)
        imports.after_import("tqdm.std", _without_monitor)
        imports.after_import("os", imports.user_ids)
        comms = sys.modules.get("sandbox_kernel_comms")  # the kernel's sessions (shell.py's)
        if comms is not None:
            imports.after_import("comm", comms.patch)
        for package, folder in (package_data or {}).items():
            imports.after_import(package, imports.extend_path(folder))
    if library is not None and library not in sys.path:
        sys.path.append(library)
    driver.image_path = tuple(path for path in sys.path if path)
    driver.packages = packages
    if workdir is not None:
        os.chdir(workdir)
    if shell:
        with driver.image_only():
            driver.start_shell()
        commands = sys.modules.get("sandbox_kernel_commands")
        if commands is not None and packages is not None:  # `!NAME`: %pip's packages' commands
            commands.PROGRAM_FOLDERS = (packages,)
    # Only now the folders a session's own code can write: what a shared image imports comes
    # from the image's folders alone (image_only, check_image).
    if packages is not None and packages not in sys.path:
        sys.path.append(packages)
    if shell and "" not in sys.path:  # as ipykernel: modules in the working folder import
        sys.path.insert(0, "")
    with memoryview(driver.flag) as view:  # hex of the pattern without copying its bytes
        magic = view[1:].hex()
    driver.request("hello", flag_magic=magic)
    return driver


def _without_monitor(tqdm_std: Any) -> None:
    """tqdm's monitor is a thread, which the sandbox cannot start: every bar warned
    (TqdmMonitorWarning). Its bars update as the loop runs without it."""
    tqdm_std.tqdm.monitor_interval = 0


def forget_finders(folder: str) -> None:
    """Make imports look at `folder` (and the folders in it) afresh: its files changed.
    Narrower than importlib.invalidate_caches(), which also empties zipimport's directory
    cache of the standard library's zip (pkgutil.iter_modules then fails on it)."""
    for path in list(sys.path_importer_cache):
        if path == folder or path.startswith(folder + "/"):
            del sys.path_importer_cache[path]


class Driver(Binding):
    """One session's driver: runs cells, answers the host's calls, holds the interrupt flag.

    Made of parts: DoorClient (door.py: requests, the flag), HostCalls (calls.py: display,
    input, sleep, llm_query, ...), Binding (binding.py: bind, keep, repair, uninstall), and
    here the cells themselves and the host's questions about them.
    """

    def __init__(self, door: Callable[[bytes], bytes], main_module: Any) -> None:
        super().__init__(door, main_module)
        self.displays: list[dict[str, Any]] = []  # the running cell's, in order
        self.shell: Any = None  # IPython's shell (shell.py), when cells run through it
        self.packages: str | None = None  # the session's %pip folder
        self.image_path: tuple[str, ...] = tuple(sys.path)  # the image's folders (install())
        self._outcome: dict[str, Any] = {}  # what the shell reported for the running cell
        self._shell_suspect = False  # a cell failed: probe the shell before the next one
        # The latest cell from the host, and the hash that names its file (shell.py)
        self.named_cell: tuple[str, int | None] = ("", None)

    # -- cells ---------------------------------------------------------------------------

    def run_cell(self, n: int, source: str, file_hash: int | None = None) -> None:
        """Run cell `n`, whose text is `source`, and report the outcome with `done`.
        `file_hash`: the hash that names its file, from the host (shell.cell_file_name)."""
        self.flag[0] = 0
        self.named_cell = (source, file_hash)
        self.displays = []
        forget_turns()
        if self.shell is not None:
            if self._shell_suspect:
                self._check_shell()
            reply = self._run_in_shell(n, source)
        else:
            reply = self._run_plain(n, source)
        self.repair()
        reply["displays"] = self.displays
        self._report(n, reply)

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
        with contextlib.suppress(Exception):  # a cell's own display hook has none to reset
            shell.displayhook.active = False
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
            if self._outcome.get("displayhook_error"):  # ipykernel then fails the request
                status, error = "error", {**self._outcome["displayhook_error"], "shown": True}
            elif self._outcome.get("error"):  # a formatter's failure, shown, the cell went on
                warn("\n".join(self._outcome["error"]["traceback"]))
        else:
            status = "cancelled" if isinstance(failure, KeyboardInterrupt) else "error"
            if error is None and _is_usage_error(failure):  # IPython put it on stderr
                name, value = type(failure).__name__, safe_str(failure)
                error = {"ename": name, "evalue": value, "traceback": [], "shown": True}
            elif error is None:
                error = self._error(failure)
            self._shell_suspect = True  # probed before the next cell: the reply goes first
        payload = list(shell.payload_manager.read_payload())
        if payload:
            shell.payload_manager.clear_payload()
            try:
                payload = to_message(payload)
            except ValueError as exc:  # as ipykernel, whose reply then fails to pack
                warn(f"[sandbox] the cell's payloads were left out: {describe(exc)}")
                payload = []
        return {
            "status": status,
            "error": error,
            "result": self._outcome.get("result"),
            "result_metadata": self._outcome.get("result_metadata", {}),
            "payload": payload,
        }

    @contextlib.contextmanager
    def image_only(self) -> Iterator[None]:
        """Imports inside see only the image's own folders (the interpreter's and the guest
        library's): never the working folder, the workspace or %pip's folder, which another
        user's notebook or a cell can write. The warm image these imports go into is shared by
        every kernel of the machine."""
        saved = sys.path[:]
        sys.path[:] = list(self.image_path)
        try:
            yield
        finally:
            sys.path[:] = saved

    def check_image(self) -> None:
        """Refuse to go on as a shared image holding a module from outside the image's own
        folders (a planted `numbers.py` would run in every kernel started from it)."""
        roots = tuple(path.rstrip("/") + "/" for path in self.image_path)
        builtin = importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter
        foreign = sorted(
            name
            for name, module in list(sys.modules.items())
            if isinstance(origin := getattr(module, "__file__", None), str)
            and not origin.startswith("<")  # ours, loaded from the host's text
            and getattr(getattr(module, "__spec__", None), "loader", None) not in builtin
            and not origin.startswith(roots)
        )
        if foreign:
            raise ImportError(f"modules from outside the image: {', '.join(foreign)}")

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
        warn(
            f"[sandbox] IPython's shell failed ({describe(exc)}) and was started again: "
            "variables are kept, In and Out start afresh"
        )

    # -- what the shell reports (shell.py) -------------------------------------------------

    def set_result(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        """The cell's result, as IPython's display hook gives it: kept for the reply, and shown
        now, as ipykernel's display hook publishes it, so that it comes before what the cell
        shows after it (the figures the inline backend flushes once the cell has run). The
        host shows it from the reply instead when it has not shown it here."""
        # As ipykernel's packer: bytes (an image formatter's) as base64; what has no JSON form
        # is a ValueError in the cell, as there (IPython's display hook raises it).
        data, metadata = to_message(data), to_message(metadata)
        self._outcome["result"], self._outcome["result_metadata"] = data, metadata
        flush_streams()
        try:
            self.request("result", data=data, metadata=metadata)
        except Exception as exc:  # the reply still carries it
            warn(f"the result could not be shown now: {describe(exc)}")

    def set_error(self, etype: Any, evalue: Any, stb: list[str], formatter: bool = False) -> None:
        """IPython's traceback for the cell; or, `formatter`, for a formatter that failed
        while the cell went on: shown on stderr now, where ipykernel shows it (before the
        result or display it was formatting), and in the display hook it fails the cell's
        request, as on ipykernel."""
        name = text_of(getattr(etype, "__name__", None) or type(evalue).__name__)
        evalue_text = safe_str(evalue) if isinstance(evalue, BaseException) else text_of(evalue)
        lines = [text_of(line) for line in stb] if isinstance(stb, list) else [text_of(stb)]
        error = {"ename": name, "evalue": evalue_text, "traceback": lines}
        if not formatter:
            self._outcome["error"] = error
            return
        warn("\n".join(lines))
        if self.shell is not None and getattr(self.shell.displayhook, "active", False):
            self._outcome.setdefault("displayhook_error", error)

    def publish_display(self, message: dict[str, Any]) -> None:
        """A display, or an update of one by its display_id, shown now (after what the cell
        printed before it)."""
        flush_streams()
        self._send_display(message)

    def clear_output(self, wait: bool = False) -> None:
        flush_streams()
        self.call("clear_output", wait=bool(wait))

    @staticmethod
    def loop_checks() -> LoopChecks:
        """The transformer that puts the soft interrupt's check into every loop of a cell."""
        return LoopChecks()

    def _execute(self, n: int, source: str) -> Any:
        """Run the cell in __main__; the value of its last expression (None if it has none)."""
        filename = f"<cell-{n}>"
        lines = io.StringIO(source).readlines()  # split as the compiler counts lines
        linecache.cache[filename] = (len(source), None, lines, filename)
        tree = LoopChecks().visit(ast.parse(source, filename))
        last = None
        if (
            tree.body
            and isinstance(tree.body[-1], ast.Expr)
            and not ends_with_semicolon(lines, tree.body[-1])
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
            prune(report)
            lines = "".join(report.format()).splitlines()
        except BaseException as failure:  # an unformattable traceback must not lose the reply
            lines = [f"{type(exc).__name__}: (no traceback: {describe(failure)})"]
        return {"ename": type(exc).__name__, "evalue": safe_str(exc), "traceback": lines}

    def _flush_figures(self, shown: object) -> None:
        """Show and close pyplot's open figures, as the inline backend does after a cell."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        try:
            for number in pyplot.get_fignums():
                figure = pyplot.figure(number)
                if figure is not shown:  # already the cell's result
                    png = base64.b64encode(figure_png(figure)).decode("ascii")
                    data = {"image/png": png, "text/plain": plain_text(figure)}
                    self._send_display({"data": data, "metadata": {}})
        except Exception as exc:  # a figure that cannot be drawn is reported, the reply still goes
            warn(f"could not show a matplotlib figure: {describe(exc)}")
        finally:
            try:
                pyplot.close("all")
            except Exception as exc:  # as above
                warn(f"could not close matplotlib figures: {describe(exc)}")

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
        try:
            value = to_plain(namespace[name]) if found else None
            self.request("value", name=name, found=found, value=value)
        except BaseException as exc:  # a value no conversion carries: its description instead
            self.request("value", name=name, found=found, value=f"<{describe(exc)}>")

    def comm_handle(self, msg_type: str, message_json: str) -> None:
        """A frontend's comm message, handled by the guest's comm manager (comms.py)."""
        self.flag[0] = 0
        sys.modules["sandbox_kernel_comms"].handle(msg_type, message_json)

    def comm_info(self, target_name: str | None) -> None:
        """The guest's open comms, for comm_info_reply (comms.py)."""
        sys.modules["sandbox_kernel_comms"].info(target_name)

    def list_image(self) -> None:
        """Have the host make the warm image's objects immortal (host/immortal.py): their
        addresses go to it in parts, each written while this waits for the answer, and each
        part's objects held until then, so every listed object is alive when its count is
        written (a warm image was once refused for a listed object found freed).

        Immortal objects are never counted: a cell that calls pandas no longer writes the
        reference counts of the functions, modules and types it touches, scattered over pages
        the write watch would then see and the rollback image copy (a trivial cell of the
        kernel's session wrote 659 pages, now 260-290). The objects are the collector's
        (gc.freeze() has just put them in its permanent generation) and those they refer to.
        Left out: frames, generators and coroutines (what their stacks hold may no longer be
        theirs), ints (made immortal from a cell, they crashed the guest a few statements
        later, for a reason not found; the image gains little from them), and what is
        immortal already, which is also how an object met again is not sent twice.

        This holds no more than one part and the list of containers, since the memory a
        session starts with keeps whatever its listing used (wasm memory never shrinks): a
        first version held every object and a set of their addresses until the turn ended,
        which started sessions 15 MB bigger, and a pandas workload under the library's 128 MB
        default ran out of memory seven cells sooner."""
        import array
        import gc

        is_immortal = sys._is_immortal  # type: ignore[attr-defined]  # 3.14 and later
        static = sys.getrefcount(None)  # says how this build counts: the host checks it
        gc.unfreeze()
        containers = gc.get_objects()
        gc.freeze()
        part = array.array("I")  # wasm32: an address is 32 bits
        held: list[object] = []  # part's objects, alive until the host has written them
        written = [0]  # what the host wrote: none when it does not know this build's layout

        def send() -> None:
            where, count = part.buffer_info()
            written[0] += self.request("image", address=where, count=count, static=static)
            del part[:], held[:]

        for container in containers:
            if type(container) in _RUNNING_CODE:
                continue
            for each in (container, *gc.get_referents(container)):
                if _image_object(each) and not is_immortal(each):
                    part.append(id(each))
                    held.append(each)
            if len(part) >= _IMAGE_PART:
                send()
        if part:
            send()
        left = sum(1 for c in containers if _image_object(c) and not is_immortal(c))
        if left and written[0]:  # written, yet not immortal: say so
            raise SystemError(f"{left:,} of the image's objects are not immortal")

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
        except BaseException:
            reply = None
        empty = {"matches": [], "cursor_start": cursor_pos, "cursor_end": cursor_pos}
        self._answer("__complete__", reply, empty)

    def inspect(self, code: str, cursor_pos: int, detail: int = 0) -> None:
        """Send Jupyter's inspect_reply content for the name at `cursor_pos` to the host."""
        self.flag[0] = 0
        introspect = sys.modules["sandbox_kernel_introspect"]
        try:
            reply = to_plain(introspect.inspect_object(vars(self.main), code, cursor_pos, detail))
        except BaseException:
            reply = None
        self._answer("__inspect__", reply, {"found": False})

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
                data, metadata = to_message(data), to_message(metadata)
                results[key] = {"status": "ok", "data": data, "metadata": metadata}
            except KeyboardInterrupt:
                break
            except BaseException as exc:  # whatever an expression raises is its answer
                error = {"ename": type(exc).__name__, "evalue": safe_str(exc)}
                results[key] = {"status": "error", **error, "traceback": []}
        self._answer("__expressions__", results, {})


# list_image: the addresses sent at a time (64 kB); objects whose traversal shows what their
# running code's stack holds.
_IMAGE_PART = 16_384
_RUNNING_CODE = (
    types.FrameType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
)


def _image_object(each: object) -> bool:
    """Whether list_image sends `each` (the reasons are its docstring's)."""
    return type(each) not in _RUNNING_CODE and not isinstance(each, int)


def _is_usage_error(exc: BaseException) -> bool:
    """IPython's UsageError (a magic's), which IPython shows as one line on stderr."""
    errors = sys.modules.get("IPython.core.error")
    return errors is not None and isinstance(exc, errors.UsageError)
