"""IPython inside the sandbox: the shell that runs a kernel session's cells.

Runs INSIDE the sandbox's CPython, loaded as the module "sandbox_kernel_shell" after the guest
library (IPython and its pure-Python dependencies, read-only at /usr/local/lib/site-packages)
is on sys.path. As JupyterLite's pyodide-kernel does in Pyodide, it is IPython's own
`InteractiveShell`, with the parts that would talk to a terminal or a ZMQ socket replaced by
the driver's door (driver.py):

- display publisher: display(), update_display(), clear_output() and matplotlib figures go to
  the host as they happen, with their display_id and update flag;
- display hook: the cell's result becomes the execute_result bundle (IPython's formatters,
  `Out`, `_`, `_N` as in ipykernel);
- tracebacks: IPython's, sent as the error reply instead of printed;
- the pager: `obj?` and `obj??` become a `page` payload, as in ipykernel.

What WebAssembly cannot do is refused or replaced here, in one place, each with its reason:
processes (`!cmd`, `%sx`, `%%bash`, `%%script`): WASI has no process API (`%pip` and
`!pip install` are served through the door instead, packages.py); the event loop for top-level
`await`: asyncio's default loop wakes itself through a socket pair, and
WASI has no sockets, so the loop below sleeps through the door instead; threads: IPython's
history is kept in memory, without its saving thread.

Must import only the standard library at module level: IPython is imported by `start()`.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import selectors
import struct
import sys
import time
import types
from typing import Any

__all__ = ["NO_PROCESSES", "start"]

NO_PROCESSES = (
    "the sandbox runs no processes (WebAssembly has no way to start one): {what} is not "
    "available; use Python instead (os, shutil, pathlib, glob for files)"
)
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
# Cell magics that start a program: IPython's ScriptMagics and its shortcuts.
_SCRIPT_CELL_MAGICS = ("script", "bash", "sh", "perl", "ruby", "python2", "python3", "pypy", "js")
_PROCESS_LINE_MAGICS = ("sx", "system", "conda", "mamba", "micromamba", "uv")
# `!pip install x` and its spellings: %pip, which the sandbox has (packages.py).
_PIP_COMMAND = re.compile(r"^\s*(?:pip3?|python3?\s+-m\s+pip)(?:\s+(.*))?$", re.DOTALL)
# What warm_tracebacks() formats: a traceback through a function in a file IPython can read.
_WARM_UP_CELL = "def warm_up():\n    return 1 / 0\n\nwarm_up()\n"
# Where cells' files are named, as ipykernel names them (a folder of the process's own), and
# ipykernel's seed for the MurmurHash2 of a cell's text that names the file in it (the host's
# is protocol.CELL_NAME_SEED: it hashes the cells it sends).
_CELLS_FOLDER = f"/tmp/ipykernel_{os.getpid()}"
_CELL_NAME_SEED = 0xC70F6907
_MURMUR_M = 0x5BD1E995
_WORD = 0xFFFFFFFF


class NoProcessesError(OSError):
    """What `!cmd` and its relatives raise in the sandbox."""


class _SleepSelector(selectors.BaseSelector):
    """A selector with nothing to select: waits sleep (through the door, so they end on an
    interrupt or the cell's deadline) and there are no sockets to register."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        raise NoProcessesError("the sandbox has no sockets or pipes to wait on")

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise RuntimeError("the event loop would wait forever: nothing can wake it")
        if timeout > 0:
            time.sleep(timeout)
        return []

    def get_map(self) -> dict[Any, selectors.SelectorKey]:
        return {}


class SandboxEventLoop(asyncio.BaseEventLoop):
    """asyncio's event loop without its self-pipe: callbacks, tasks, futures and timers work;
    sockets and subprocesses do not exist here."""

    def __init__(self) -> None:
        super().__init__()
        self._selector = _SleepSelector()

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:  # only threads need to wake the loop; there are none
        pass


def _new_event_loop() -> asyncio.AbstractEventLoop:
    return SandboxEventLoop()


def start(driver: Any, main_module: Any) -> Any:
    """Create the session's shell over `main_module` (its namespace is the user's) and return
    it. IPython is imported here, once, from the guest library."""
    from IPython.core import page, payloadpage
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # no file, no saving thread
    # As under ipykernel, whose app's section is in the shell's config: libraries tell a
    # notebook from a terminal by it (older tqdm.auto, plotly's renderers).
    config.IPKernelApp = Config()
    os.environ["MPLBACKEND"] = INLINE_BACKEND  # as ipykernel: figures show below the cell
    asyncio.events.new_event_loop = asyncio.new_event_loop = _new_event_loop  # asyncio.run too
    shell = _shell_class(driver).instance(
        config=config, user_module=main_module, compiler_class=_compiler_class(driver)
    )
    shell.loop_runner = _LoopRunner()
    shell.set_hook("show_in_pager", page.as_hook(payloadpage.page), 99)
    for name in _SCRIPT_CELL_MAGICS:
        shell.register_magic_function(_refuse(name, "%%"), "cell", name)
    for name in _PROCESS_LINE_MAGICS:
        shell.register_magic_function(_refuse(name, "%"), "line", name)
    shell.register_magic_function(_pip_magic(driver), "line", "pip")
    shell.register_magic_function(_matplotlib_magic(shell), "line", "matplotlib")
    sys.modules["sandbox_kernel_speedups"].apply(shell)
    _name_the_kernel(type(shell))
    return shell


# The kernel is ipykernel's Kernel on the host (sandbox_kernel/kernel/kernel.py); this is the
# version the guest names (tests/kernel/test_widgets.py checks it against the host's).
IPYKERNEL_VERSION = (7, 4, 0)


def _name_the_kernel(shell_class: Any) -> None:
    """Say in the guest, as sys.modules does under ipykernel, that a Jupyter kernel runs these
    cells: libraries tell a notebook from a terminal by `ipykernel.zmqshell` being loaded
    (tqdm.auto picks its widget bar) and read `ipykernel.version_info` (ipywidgets then uses
    the `comm` package, which is the sandbox's). Names only: the package has no submodules
    to import but `zmqshell`, whose ZMQInteractiveShell is this session's shell class."""
    import types

    if "ipykernel" in sys.modules:
        return
    package = types.ModuleType("ipykernel", "The host's Jupyter kernel, named in the guest.")
    package.__path__ = []
    package.version_info = IPYKERNEL_VERSION
    package.__version__ = ".".join(map(str, IPYKERNEL_VERSION))
    zmqshell = types.ModuleType("ipykernel.zmqshell")
    zmqshell.ZMQInteractiveShell = shell_class
    package.zmqshell = zmqshell
    sys.modules["ipykernel"], sys.modules["ipykernel.zmqshell"] = package, zmqshell


def _matplotlib_magic(shell: Any) -> Any:
    """IPython's %matplotlib, with `notebook` (nbagg) drawn by ipympl's widget backend: nbagg
    is JavaScript for the classic Notebook, which JupyterLab does not run (on ipykernel it
    shows "Javascript Error: IPython is not defined") and the output firewall would drop;
    ipympl gives the same interactive figure through widgets."""
    original = shell.magics_manager.magics["line"]["matplotlib"]

    def matplotlib(line: str = "") -> Any:
        words = line.split()
        if words and words[0] in ("notebook", "nbagg"):
            sys.stderr.write(
                "[sandbox] %matplotlib notebook is the classic Notebook's JavaScript: this "
                "kernel draws the figure with ipympl (%matplotlib widget) instead\n"
            )
            line = " ".join(["widget", *words[1:]])
        return original(line)

    matplotlib.__doc__ = original.__doc__
    return matplotlib


def warm_tracebacks() -> None:
    """Format a traceback as a user's error is formatted, once the session's modules are
    imported: the warm image is taken after this, so a user's first error does not pay for
    what IPython, stack_data and pygments work out once (a map from every imported module's
    file to the module, a stat through WASI per file; the lexer's rules; the parsers' first
    use): 12 ms off a first `1/0`, 150 ms off a first pandas KeyError. Its frames are of a
    file IPython can read, which stack_data shows (a workspace module's); a cell's file does
    not exist, as on ipykernel, and IPython shows it line by line, which needs no warm-up
    (a first `1/0` costs 5.0 M instructions, a later one 6.0 M)."""
    import linecache

    from IPython import get_ipython

    name = "<sandbox-warm-up>"
    linecache.cache[name] = (len(_WARM_UP_CELL), None, _WARM_UP_CELL.splitlines(True), name)
    try:
        exec(compile(_WARM_UP_CELL, name, "exec"), {})
    except ZeroDivisionError:
        get_ipython().InteractiveTB.structured_traceback(*sys.exc_info())
    finally:
        linecache.cache.pop(name, None)


def murmur2(data: bytes, seed: int) -> int:
    """MurmurHash2 (32-bit, Austin Appleby's), the hash ipykernel names a cell's file by."""
    length = len(data)
    whole = length & ~3
    h = (seed ^ length) & _WORD
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _MURMUR_M) & _WORD
        k = ((k ^ (k >> 24)) * _MURMUR_M) & _WORD
        h = ((h * _MURMUR_M) & _WORD) ^ k
    if length > whole:
        h = ((h ^ int.from_bytes(data[whole:], "little")) * _MURMUR_M) & _WORD
    h = ((h ^ (h >> 13)) * _MURMUR_M) & _WORD
    return h ^ (h >> 15)


def cell_file_name(raw_code: str, named: tuple[str, int | None] = ("", None)) -> str:
    """The file a cell's code is compiled as, named as ipykernel names it: a folder of the
    process's own and the hash of the cell's text. Users see it where ipykernel shows it (a
    SyntaxError's message, a warning's location, `inspect.getfile`); a cell run again is the
    same file, so linecache keeps one copy of it. And IPython formats its frames as it does
    on ipykernel: the file does not exist, so IPython shows its lines one by one instead of
    parsing the cell with stack_data (an interrupt's turn: 10.5 M -> 7.7 M instructions).

    `named`: a cell's text and its hash as the host computed it (protocol.cell_hash), used
    when `raw_code` is that text; here it costs 0.8M instructions for a 25-line cell."""
    text, hashed = named
    if hashed is None or raw_code != text:
        hashed = murmur2(raw_code.encode("utf-8", "surrogatepass"), _CELL_NAME_SEED)
    return f"{_CELLS_FOLDER}/{hashed}.py"


def _compiler_class(driver: Any) -> Any:
    from IPython.core.compilerop import CachingCompiler

    class CellCompiler(CachingCompiler):
        """IPython's compiler, with cells' files named as ipykernel's XCachingCompiler does."""

        def get_code_name(self, raw_code: str, transformed_code: str, number: int) -> str:
            return cell_file_name(raw_code, driver.named_cell)

    return CellCompiler


def _output_classes(driver: Any) -> tuple[Any, Any]:
    """IPython's display publisher and display hook, answering through `driver`."""
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher

    class DoorDisplayPublisher(DisplayPublisher):
        def publish(  # type: ignore[override]
            self,
            data: dict[str, Any],
            metadata: dict[str, Any] | None = None,
            source: Any = None,
            *,
            transient: dict[str, Any] | None = None,
            update: bool = False,
            **kwargs: Any,
        ) -> None:
            message = {"data": data, "metadata": metadata or {}}
            if transient:
                message["transient"] = transient
            if update:
                message["update"] = True
            driver.publish_display(message)

        def clear_output(self, wait: bool = False) -> None:
            driver.clear_output(wait)

    class DoorDisplayHook(DisplayHook):
        exec_result = None  # a plain attribute, not a trait: see _PLAIN_TRAITS
        active = False  # between start_displayhook and its end (a formatter's error then)

        def start_displayhook(self) -> None:
            self.active = True
            super().start_displayhook()

        def write_output_prompt(self) -> None:
            pass

        def write_format_data(
            self, format_dict: dict[str, Any], md_dict: dict[str, Any] | None = None
        ) -> None:
            try:
                driver.set_result(format_dict, md_dict or {})
            except BaseException:  # the cell's error (no JSON form), not a formatter's
                self.active = False
                raise

        def finish_displayhook(self) -> None:
            self.active = False

    return DoorDisplayPublisher, DoorDisplayHook


# Traits that IPython sets in every cell, and that nothing observes, validates or configures:
# the shell's execution count and last result, the display hook's result, and the history's
# _i, _ii, _iii and _i00. A trait's set validates, cross-validates (a failed hasattr each)
# and notifies: 19,000 guest instructions, eight times a cell, for a dict store. They are
# plain class attributes in the sandbox's subclasses, which shadow IPython's traits; cells
# see the same values (tests/repl/test_shell_speedups.py compares them with IPython's).
_PLAIN_TRAITS = (
    "ZMQInteractiveShell.execution_count",
    "ZMQInteractiveShell.last_execution_succeeded",
    "ZMQInteractiveShell.last_execution_result",
    "DoorDisplayHook.exec_result",
    "HistoryManager._i",
    "HistoryManager._ii",
    "HistoryManager._iii",
    "HistoryManager._i00",
)


def _history_initializer() -> Any:
    """The shell's init_history: IPython's, with a history manager whose input variables are
    plain attributes (_PLAIN_TRAITS)."""
    from IPython.core.history import HistoryManager as IPythonHistoryManager

    class HistoryManager(IPythonHistoryManager):
        """IPython's, in memory (start()). Named as IPython's, as its config section is."""

        _i00 = _i = _ii = _iii = ""

    def init_history(shell: Any) -> None:
        shell.history_manager = HistoryManager(shell=shell, parent=shell)
        shell.configurables.append(shell.history_manager)

    return init_history


def _shell_class(driver: Any) -> Any:
    """IPython's InteractiveShell, answering through `driver`."""
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    publisher, hook = _output_classes(driver)
    history_initializer = _history_initializer()
    loop_checks = driver.loop_checks()
    cells = sys.modules["sandbox_kernel_cells"]  # the sandbox's functions, not a cell's
    user_frames, chain = cells.user_frames, cells.chain

    class ZMQInteractiveShell(InteractiveShell):
        """IPython's shell, answering through the door. Named as ipykernel's shell is: it
        serves a Jupyter frontend too, and libraries tell a notebook from a terminal by this
        name (pandas' in_ipython_frontend looks for "zmq" in it, and then lays out wide and
        categorical reprs as in JupyterLab; a common idiom compares the name itself)."""

        # What a Jupyter kernel's shell has and a terminal's lacks: pandas' is_terminal() looks
        # for it when pandas is imported (and then shows up to 20 columns, wrapped, as in
        # JupyterLab). There is no kernel object in the guest: the kernel is on the host.
        kernel = None

        display_pub_class = publisher
        displayhook_class = hook

        # Plain attributes, not traits (_PLAIN_TRAITS)
        execution_count = 1
        last_execution_succeeded = True
        last_execution_result = None

        init_history = history_initializer

        def _get_exc_info(self, exc_tuple: Any = None) -> Any:
            """As IPython's, without the sandbox's own frames: an interrupt, or an error in
            a helper such as llm_query, ends at the user's line, as in ipykernel."""
            etype, value, tb = super()._get_exc_info(exc_tuple)
            sys.last_traceback = tb = _user_tracebacks(self, value, tb, user_frames, chain)
            return etype, value, tb

        def _showtraceback(self, etype: Any, evalue: Any, stb: list[str]) -> None:
            driver.set_error(etype, evalue, stb, _in_formatter())

        def should_run_async(
            self,
            raw_cell: str,
            *,
            transformed_cell: str | None = None,
            preprocessing_exc_tuple: Any = None,
        ) -> bool:
            """As IPython's, which compiles the whole cell once more to see whether it awaits
            at its top level: a cell that says neither `await` nor `async` cannot (17% of a
            25-line cell's instructions in the guest)."""
            cell = transformed_cell
            if cell is not None and "await" not in cell and "async" not in cell:
                return False
            return bool(
                super().should_run_async(
                    raw_cell,
                    transformed_cell=transformed_cell,
                    preprocessing_exc_tuple=preprocessing_exc_tuple,
                )
            )

        def transform_ast(self, node: Any) -> Any:
            """The soft interrupt's check in every loop, then IPython's own transformers. As
            one of those, the check made IPython walk each cell's tree again to fix locations
            the check already has (with the check's own walk, a third of a 25-line cell's
            turn); `ast_transformers` is also left as on ipykernel, empty until a user adds."""
            return super().transform_ast(loop_checks.visit(node))

        def enable_gui(self, gui: str | None = None) -> None:
            if gui not in (None, "inline"):
                raise UsageError(f"the sandbox has no windows: only `inline` plots, not {gui!r}")

        def system_piped(self, cmd: str) -> None:
            """`!cmd`: %pip for pip, the sandbox's own commands (commands.py) for the rest; the
            output as the shell would print it, the status in `_exit_code`, as ipykernel."""
            pip = _PIP_COMMAND.match(cmd)
            if pip:  # `!pip install x` is %pip's, as in ipykernel's environment
                _pip(driver, pip.group(1) or "")
                return
            line = self.var_expand(cmd, depth=1)
            out, err, status = sys.modules["sandbox_kernel_commands"].run(line, tty=True)
            # As ipykernel shows a command run on its pseudo-terminal: both streams on stdout,
            # each line ending in \r\n.
            sys.stdout.write((out + err).replace("\n", "\r\n"))
            self.user_ns["_exit_code"] = status

        system_raw = system = system_piped

        def set_next_input(self, text: str, replace: bool = False) -> None:
            """As ipykernel: a `set_next_input` payload (%load, %recall), not readline's."""
            payload = {"source": "set_next_input", "text": text, "replace": replace}
            self.payload_manager.write_payload(payload)

        def getoutput(self, cmd: str, split: bool = True, depth: int = 0) -> Any:
            """`x = !cmd` and `!!cmd`: the output (stderr with it, as IPython's) as an SList."""
            from IPython.utils.text import SList

            out, err, status = sys.modules["sandbox_kernel_commands"].run(
                self.var_expand(cmd, depth=depth + 1)
            )
            self.user_ns["_exit_code"] = status
            text = out + err
            return SList(text.splitlines()) if split else text

    return ZMQInteractiveShell


def _in_formatter() -> bool:
    """Whether IPython's formatters are showing their own failure (catch_format_error): a
    repr that raised while the cell goes on, not the cell's error."""
    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "catch_format_error" and code.co_filename.endswith("formatters.py"):
            return True
        frame = frame.f_back
    return False


def _user_tracebacks(
    shell: Any, value: BaseException, tb: Any, user_frames: Any, chain: Any
) -> Any:
    """`tb` and the tracebacks of the exceptions chained to `value`, without the sandbox's own
    frames and what they called (driver.user_frames); `value`'s chain is changed in place, as
    IPython reads it from there. The cells' files are made known to `inspect.getmodule`, which
    otherwise looks through every loaded module for each cell frame (1-2 ms apiece here)."""
    cells = shell.compile._filename_map
    module = shell.user_module
    module_name = module.__name__ if sys.modules.get(module.__name__) is module else None

    def prune(head: Any) -> Any:
        entries = []
        while head is not None:
            entries.append(head)
            head = head.tb_next
        names = [entry.tb_frame.f_code.co_filename for entry in entries]
        users = user_frames(names, cells.__contains__)
        kept = [entry for entry, user in zip(entries, users, strict=True) if user]
        for name in names if module_name is not None else ():
            if name in cells:  # under the absolute name inspect looks files up by
                inspect.modulesbyfile[os.path.normcase(os.path.abspath(name))] = module_name
        if len(kept) == len(entries):
            return entries[0] if entries else None
        rebuilt = None
        for entry in reversed(kept):
            rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        return rebuilt

    top = value.__traceback__
    for exc in chain(value):
        if exc.__traceback__ is not None:
            exc.__traceback__ = prune(exc.__traceback__)
    return value.__traceback__ if tb is top else prune(tb)


def _pip(driver: Any, line: str) -> None:
    if driver.packages is None:
        raise RuntimeError("this session has no package folder for %pip")
    sys.modules["sandbox_kernel_packages"].pip(driver, line, driver.packages)


def _pip_magic(driver: Any) -> Any:
    def pip(line: str = "") -> None:
        """Install pure-Python packages into this session: `%pip install NAME...`.

        The host's pip downloads wheels without compiled code from its package index (never
        building from source) and logs their SHA-256; they are unpacked into the session's
        own folder under /app and importable at once and after a restart. Also
        `%pip list` and `%pip uninstall NAME` (this session's packages)."""
        _pip(driver, line)

    return pip


def _refuse(name: str, prefix: str) -> Any:
    def magic(line: str = "", cell: str | None = None) -> None:
        raise NoProcessesError(NO_PROCESSES.format(what=f"`{prefix}{name}`"))

    magic.__doc__ = f"Not available in the sandbox: {NO_PROCESSES.format(what=prefix + name)}"
    return magic


class _LoopRunner:
    """Runs a cell that awaits at top level on the session's one event loop (so futures and
    tasks made in one cell can be awaited in the next, as in ipykernel)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, coro: Any) -> Any:
        if self.loop is None or self.loop.is_closed():
            self.loop = SandboxEventLoop()
        asyncio.set_event_loop(self.loop)
        return self.loop.run_until_complete(coro)
